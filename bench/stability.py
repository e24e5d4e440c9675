"""Stability benchmark: the same corpus learned several times, and how far the results spread.

    .venv/bin/python -m bench.stability [--family validation] [--sites 12]
                                         [--urls-per-site 3000] [--runs 5]

Each run learns the same corpus from scratch against a fresh simulated web whose per-fetch
noise (rotating ads and carousels, nonces, interstitials, flaky answers) draws from another
seed, as a real site's noise would on another day. It prints one row per run and the spread
of redundant URLs removed (max - min, in points); every run must have 0 false merges.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from miqps.canonical import Canonicalizer
from miqps.fetch import FetchConfig
from miqps.learner import LearnConfig
from miqps.urls import InvalidURL, parse
from simweb.corpus import generate_corpus
from simweb.resolve import page_shown
from simweb.server import SimWeb
from simweb.sites import FAMILIES, build_sites
from testkit.quality import Quality, format_table, learn_maps, score


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--family", default="validation", choices=FAMILIES)
    parser.add_argument("--sites", type=int, default=12)
    parser.add_argument("--urls-per-site", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rate", type=float, default=40.0)
    args = parser.parse_args(argv)
    sites = build_sites(args.family, args.sites, seed=args.seed)
    corpus = generate_corpus(sites, args.urls_per_site, seed=args.seed)
    rows: list[Quality] = []
    for run in range(args.runs):
        with SimWeb(
            sites, seed=args.seed * 1000 + run, rate_limit_per_second=args.rate * 1.5
        ) as web:
            fetch_config = FetchConfig(proxy=web.proxy_url, per_host_rate=args.rate, timeout=2.0)
            maps, fetches, seconds = asyncio.run(
                learn_maps(corpus, web.proxy_url, LearnConfig(), fetch_config)
            )
        canonicalizer = Canonicalizer()
        canonicalizer.load(maps)

        def canonical(url: str, learned: Canonicalizer = canonicalizer) -> str:
            try:
                return learned.canonical_url(parse(url))
            except InvalidURL:
                return url

        rows.append(
            score(
                f"run {run + 1}",
                corpus,
                canonical,
                fetches=fetches,
                extra_seconds=seconds,
                shown=page_shown(sites),
            )
        )
        print(format_table(rows[-1:]).splitlines()[-1], flush=True)
    removed = [row.redundant_removed for row in rows]
    print(f"family={args.family} sites={args.sites} urls={len(corpus)} runs={args.runs}")
    print(format_table(rows))
    print(
        f"redundant removed: min {min(removed):.2%}, max {max(removed):.2%}, "
        f"spread {100 * (max(removed) - min(removed)):.2f} points; "
        f"false merges per run: {[row.false_merges for row in rows]}; "
        f"canonical URLs showing another page per run: {[row.another_page for row in rows]}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
