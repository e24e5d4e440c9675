"""``miqps report``: the parameter-sprawl report of a URL list, as one self-contained HTML
file."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from miqps.canonical import Canonicalizer, StaticLayers
from miqps.cli.common import add_skip_invalid, load_maps, prepare_output
from miqps.report import Limits, ReportBuilder

NAME = "report"
HELP = "write the parameter-sprawl report of a URL list as one HTML file"
OWN_PARSER = False


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--urls", required=True, type=Path, help="file with one URL per line")
    parser.add_argument("--maps", required=True, type=Path, help="maps written by 'miqps learn'")
    parser.add_argument(
        "--out",
        required=True,
        type=Path,
        help="the HTML file to write (a missing folder is created)",
    )
    parser.add_argument(
        "--no-prior",
        action="store_true",
        help="canonicalize as 'miqps canonicalize --no-prior' does",
    )
    report_limits = Limits()
    parser.add_argument(
        "--max-domains",
        type=int,
        default=report_limits.domains,
        help="domains shown, those with the most distinct URLs first",
    )
    parser.add_argument(
        "--max-patterns",
        type=int,
        default=report_limits.patterns_per_domain,
        help="patterns shown per domain, those with the most URLs first",
    )
    parser.add_argument(
        "--max-params",
        type=int,
        default=report_limits.params_per_domain,
        help="parameters shown per domain, those creating the most URLs first",
    )
    parser.add_argument(
        "--max-explained",
        type=int,
        default=report_limits.explained_urls,
        help="distinct URLs whose explanation is embedded (one per pattern first)",
    )
    add_skip_invalid(parser, "of --maps")


def run(args: argparse.Namespace) -> int:
    try:
        limits = Limits(
            domains=args.max_domains,
            patterns_per_domain=args.max_patterns,
            params_per_domain=args.max_params,
            explained_urls=args.max_explained,
        )
    except ValueError as error:
        print(f"miqps report: {error}", file=sys.stderr)
        return 2
    if not prepare_output(args.out, "miqps report", "--out"):
        return 2
    loaded = load_maps(args.maps, args.skip_invalid, "miqps report", "maps")
    if loaded is None:
        return 2
    maps = loaded[0]
    canonicalizer = Canonicalizer(StaticLayers.default(), use_prior=not args.no_prior)
    canonicalizer.load(maps)
    builder = ReportBuilder(canonicalizer, maps, limits)
    try:
        with args.urls.open(encoding="utf-8", errors="surrogateescape", newline="") as handle:
            builder.add_lines(handle)
    except OSError as error:
        print(f"miqps report: cannot read {args.urls}: {error.strerror}", file=sys.stderr)
        return 2
    view = builder.view()
    from miqps.report_html import render

    page = render(view, (f"URLs: {args.urls}", f"maps: {args.maps}"))
    try:
        args.out.write_text(page, encoding="utf-8", errors="surrogateescape")
    except OSError as error:
        print(f"miqps report: cannot write --out: {args.out}: {error.strerror}", file=sys.stderr)
        return 2
    print(
        f"{view.lines} lines: {view.distinct_urls} distinct URLs, {view.canonical_urls} "
        f"canonical ({view.duplicates_saved} duplicates saved), {view.blank} blank, "
        f"{view.invalid} invalid; {view.domain_count} domains; report written to {args.out}"
    )
    return 0
