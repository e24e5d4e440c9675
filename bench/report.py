"""Build time, peak memory and file size of ``miqps report``, against ``miqps canonicalize``.

Generates a crawl with parameter sprawl (product, category and search pages of about 60
shops, most URLs carrying tracking, click-id, referral or session parameters drawn from
small pools, so one page is reached under many URLs) and maps that learned most patterns,
then runs, each as its own process on the same files, in the same run:

- ``miqps canonicalize --maps`` (the baseline: the plain fast path),
- ``miqps canonicalize --maps --json`` (one decision per URL, as the report takes),
- ``miqps report --urls --maps --out``.

::

    .venv/bin/python -m bench.report [--urls 100000] [--repeat 1] [--keep DIR]

It prints figures and ratios to the baseline; it asserts no target. It exits non-zero only
if a process fails.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.canonicalize_speed import _miqps_command
from miqps.maps import DomainMap, Layer, ParamEvidence, PatternDecision, Verification, write_maps
from miqps.urls import path_shape

STAMP = "2026-01-01T00:00:00Z"
SITES = 60
ITEMS_PER_SITE = 400
_WORDS = (
    "kettle",
    "lamp",
    "chair",
    "boots",
    "jacket",
    "mug",
    "desk",
    "rug",
    "bag",
    "clock",
    "tent",
    "bike",
    "pan",
    "sofa",
    "shelf",
    "vase",
    "scarf",
    "watch",
    "radio",
    "kite",
)
_KINDS = (("/p/{word}-{item}", ("id",)), ("/c/{word}", ("page", "sort")), ("/search", ("q",)))
_NOISE_BUNDLES = (
    (),
    (),
    ("utm_source", "utm_medium", "utm_campaign"),
    ("gclid",),
    ("fbclid",),
    ("ref",),
    ("sid",),
    ("utm_source", "ref"),
)


def _values(rng: random.Random) -> dict[str, tuple[str, ...]]:
    """Each parameter's pool of values: small pools make many URLs per page."""
    hex_ids = tuple(f"{rng.getrandbits(48):012x}" for _ in range(60))
    return {
        "page": tuple(str(n) for n in range(1, 6)),
        "sort": ("relevance", "price", "newest"),
        "q": _WORDS,
        "utm_source": ("mail", "ads", "social", "partner"),
        "utm_medium": ("cpc", "email", "banner"),
        "utm_campaign": tuple(f"spring{n}" for n in range(8)),
        "gclid": hex_ids,
        "fbclid": hex_ids,
        "ref": ("home", "nav", "related", "footer", "search"),
        "sid": tuple(f"{rng.getrandbits(32):08x}" for _ in range(300)),
    }


@dataclass
class _Site:
    host: str
    ref_is_content: bool
    patterns: dict[str, tuple[frozenset[str], frozenset[str]]]


def sprawl_corpus(count: int, seed: int = 11) -> tuple[list[str], list[DomainMap]]:
    """``count`` URLs and the maps of their sites (nine in ten patterns learned; on one site
    in five ``ref`` picks content and is kept)."""
    rng = random.Random(seed)
    values = _values(rng)
    sites = [
        _Site(f"{rng.choice(_WORDS)}-shop{number}.example", number % 5 == 0, {})
        for number in range(SITES)
    ]
    weights = [1.0 / (rank + 1) ** 0.8 for rank in range(SITES)]
    urls: list[str] = []
    for site in rng.choices(sites, weights=weights, k=count):
        template, content = rng.choice(_KINDS)
        item = rng.randrange(ITEMS_PER_SITE)
        path = template.format(word=_WORDS[item % len(_WORDS)], item=item)
        noise = rng.choice(_NOISE_BUNDLES)
        pairs = [
            f"id={item}" if name == "id" else f"{name}={rng.choice(values[name])}"
            for name in content
        ]
        pairs += [f"{name}={rng.choice(values[name])}" for name in noise]
        rng.shuffle(pairs)
        urls.append(f"https://{site.host}{path}?{'&'.join(pairs)}")
        kept = frozenset(content) | (
            frozenset({"ref"}) & frozenset(noise) if site.ref_is_content else frozenset()
        )
        names = frozenset(content) | frozenset(noise)
        site.patterns.setdefault(
            path_shape(path) + "?" + "&".join(sorted(names)), (kept, names - kept)
        )
    return urls, [_site_map(site, rng) for site in sites]


def _site_map(site: _Site, rng: random.Random) -> DomainMap:
    decisions: dict[str, PatternDecision] = {}
    for key, (kept, dropped) in sorted(site.patterns.items()):
        if rng.random() < 0.1:
            continue
        params: dict[str, ParamEvidence] = {}
        for name in kept | dropped:
            samples = rng.randrange(3, 7)
            inconclusive = rng.randrange(2)
            changed = samples if name in kept else 0
            params[name] = ParamEvidence(
                "keep" if name in kept else "drop",
                Layer.LEARNED,
                samples,
                changed,
                samples - changed,
                inconclusive,
                ["page=1"] if name == "page" else [],
            )
        decisions[key] = PatternDecision(
            kept,
            dropped,
            params,
            Verification(2, 0, rng.randrange(2), []),
            STAMP,
            rng.randrange(20, 400),
        )
    return DomainMap(site.host, rng.randrange(1, 9), STAMP, decisions)


def write_inputs(count: int, seed: int, urls_file: Path, maps_file: Path) -> None:
    urls, maps = sprawl_corpus(count, seed)
    urls_file.write_text("\n".join(urls) + "\n", encoding="utf-8")
    write_maps(maps_file, maps)
    print(f"{len(maps)} domains, {sum(len(m.patterns) for m in maps):,} learned patterns")


def run(command: list[str], stdin: Path | None, stdout: Path) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes) of one process."""
    with stdin.open("rb") if stdin else open(os.devnull, "rb") as source, stdout.open("wb") as sink:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdin=source, stdout=sink, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - started
        error = process.stderr.read() if process.stderr else b""
        if process.stderr:
            process.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {error.decode(errors='replace')}")
    return seconds, usage.ru_maxrss * 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--urls", type=int, default=100_000, help="URLs to generate")
    parser.add_argument("--repeat", type=int, default=1, help="runs per process; best counts")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--keep", type=Path, help="keep the inputs and the report here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="miqps-bench-report-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        urls_file, maps_file, report = (
            folder / "urls.txt",
            folder / "maps.jsonl",
            folder / "report.html",
        )
        # Written by another process: a child's peak RSS counts its parent's at the fork.
        writer = multiprocessing.get_context("spawn").Process(
            target=write_inputs, args=(args.urls, args.seed, urls_file, maps_file)
        )
        writer.start()
        writer.join()
        if writer.exitcode != 0:
            raise RuntimeError("generating the inputs failed")
        print(f"{args.urls:,} URLs ({urls_file.stat().st_size / 2**20:.1f} MiB) in {maps_file}")
        miqps = _miqps_command()
        contenders = {
            "canonicalize": ([*miqps, "canonicalize", "--maps", str(maps_file)], urls_file),
            "canonicalize --json": (
                [*miqps, "canonicalize", "--json", "--maps", str(maps_file)],
                urls_file,
            ),
            "report": (
                [
                    *miqps,
                    "report",
                    "--urls",
                    str(urls_file),
                    "--maps",
                    str(maps_file),
                    "--out",
                    str(report),
                ],
                None,
            ),
        }
        best: dict[str, tuple[float, int]] = {}
        for _ in range(args.repeat):
            for name, (command, stdin) in contenders.items():
                seconds, peak = run(command, stdin, folder / "out.txt")
                previous = best.get(name, (seconds, peak))
                best[name] = (min(previous[0], seconds), max(previous[1], peak))
        size = report.stat().st_size
    baseline_seconds, baseline_peak = best["canonicalize"]
    print(
        f"\n| process (best of {args.repeat}) | wall s | URLs/s | × canonicalize | peak RSS MiB |"
    )
    print("|---|---:|---:|---:|---:|")
    for name, (seconds, peak) in best.items():
        print(
            f"| miqps {name} | {seconds:.2f} | {args.urls / seconds:,.0f} | "
            f"{seconds / baseline_seconds:.1f} | {peak / 2**20:.0f} |"
        )
    print(
        f"\nreport file: {size / 2**20:.2f} MiB ({size / args.urls:.1f} bytes per URL); "
        f"peak RSS {best['report'][1] / baseline_peak:.1f}× canonicalize's"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
