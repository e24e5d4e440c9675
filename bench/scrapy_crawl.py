"""Pages a Scrapy crawl fetches with the add-on and without it, on the simulated web's
crawlable sites (``simweb.crawl``), with items lost against ground truth::

    .venv/bin/python -m bench.scrapy_crawl [--family tuning] [--sites 3] [--seed 5]
        [--items 30] [--depth 3] [--no-rewrite]

As a user would: crawl from each site's home page with the spider of
``testkit.scrapy_spider`` and no add-on, learn maps with ``miqps learn`` on the URLs that
crawl requested, then crawl again with the add-on (and once more with
``MIQPS_REWRITE_REQUESTS``). An item is lost when a page the crawl was sent to (fetched or
filtered as a duplicate) is among no item scraped, by ``simweb.corpus.content_key_for``.
It prints figures and the saving; the target (at least 40% fewer pages, 0 lost) is not
asserted here (``tests/miqps/test_scrapy.py`` asserts 0 lost and fewer pages).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from testkit.scrapy_crawl import compare


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", default="tuning")
    parser.add_argument("--sites", type=int, default=3)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--items", type=int, default=30, help="catalogue items per site")
    parser.add_argument("--depth", type=int, default=3, help="links deep from the home pages")
    parser.add_argument(
        "--no-rewrite",
        dest="rewrite",
        action="store_false",
        help="skip the crawl with MIQPS_REWRITE_REQUESTS",
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as directory:
        result = compare(
            Path(directory),
            args.family,
            args.sites,
            args.seed,
            args.items,
            args.depth,
            args.rewrite,
        )
    without = result.without
    print(
        f"{args.sites} {args.family} crawl sites, {args.items} items each, depth "
        f"{args.depth}: {len(set(without.requested)):,} distinct URLs requested, "
        f"{result.distinct_pages:,} distinct pages"
    )
    rows = [("without the add-on", without), ("with the add-on", result.with_addon)]
    if result.rewriting is not None:
        rows.append(("with MIQPS_REWRITE_REQUESTS", result.rewriting))
    for label, run in rows:
        print(
            f"  {label:<28} {run.fetched:6,} pages fetched ({run.responses('3'):5,} "
            f"redirects, {run.responses('404'):5,} not found) {run.pages:6,} items "
            f"{len(run.lost):3} lost  ({1 - run.fetched / without.fetched:.1%} fewer)"
        )
    floor = 1 - result.distinct_pages / without.fetched
    print(
        f"  saving {result.saving:.1%} (target >= 40%); perfect deduplication: {floor:.1%}; "
        f"learning sent {result.learn_fetches:,} requests"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
