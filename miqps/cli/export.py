"""``miqps export``: write what the maps learned as rules for crawlers and caches."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from miqps.canonical import StaticLayers
from miqps.cli.common import add_skip_invalid, ensure_folder, load_maps
from miqps.export import FORMATS, clean_param_by_host, export

NAME = "export"
HELP = "write what the maps learned as rules for crawlers and caches"
OWN_PARSER = False


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--maps", required=True, type=Path, help="maps written by 'miqps learn'")
    parser.add_argument(
        "--format",
        required=True,
        choices=sorted(FORMATS),
        help="clean-param (robots.txt), dud-rules (duplicate-url-"
        "discarder), varnish (VCL), cloudflare (cache rules), clearurls",
    )
    parser.add_argument("--domain", action="append", help="only this domain's map (repeatable)")
    parser.add_argument(
        "--out-dir",
        type=Path,
        help="clean-param: write one file per host, DIR/HOST.robots.txt, to append to "
        "that host's robots.txt (a missing DIR is created)",
    )
    parser.add_argument(
        "--cache-key-only",
        action="store_true",
        help='cloudflare: leave out "cache": true, so the rules set the cache key alone '
        "and do not make responses eligible for caching",
    )
    add_skip_invalid(parser, "of --maps")


def run(args: argparse.Namespace) -> int:
    loaded = load_maps(args.maps, args.skip_invalid, "miqps export", "maps")
    if loaded is None:
        return 2
    maps, _ = loaded
    if args.domain:
        wanted = [domain.lower() for domain in args.domain]  # a domain is a lowercased host
        missing = sorted(set(wanted) - maps.keys())
        if missing:
            print(f"miqps export: no map for {', '.join(missing)} in {args.maps}", file=sys.stderr)
            return 1
        maps = {domain: maps[domain] for domain in wanted}
    if args.out_dir is not None:
        if args.format != "clean-param":
            print("miqps export: --out-dir is for --format clean-param", file=sys.stderr)
            return 2
        return _write_per_host(clean_param_by_host(maps, StaticLayers.default()), args.out_dir)
    if args.cache_key_only and args.format != "cloudflare":
        print("miqps export: --cache-key-only is for --format cloudflare", file=sys.stderr)
        return 2
    sys.stdout.write(export(maps, args.format, cache_key_only=args.cache_key_only))
    return 0


# A host as a file name: what a lowercased host can hold, and never a path of its own.
_FILE_NAME_HOST = re.compile(r"[a-z0-9\[][a-z0-9.:\[\]_-]*")


def _write_per_host(files: dict[str, str], folder: Path) -> int:
    if not ensure_folder(folder, "miqps export", "--out-dir"):
        return 2
    written = 0
    try:
        for host, text in files.items():
            if not _FILE_NAME_HOST.fullmatch(host):
                print(f"miqps export: skipped {host!r}: not a file name", file=sys.stderr)
                continue
            (folder / f"{host}.robots.txt").write_text(text, encoding="utf-8")
            written += 1
    except OSError as error:
        print(f"miqps export: cannot write to {folder}: {error.strerror}", file=sys.stderr)
        return 2
    print(f"miqps export: {written} robots.txt additions written to {folder}", file=sys.stderr)
    return 0
