"""Pages a Scrapy crawl fetches with the add-on and without it, on the simulated web's
crawlable sites (``simweb.crawl``), with items lost against ground truth::

    .venv/bin/python -m bench.scrapy_crawl [--family tuning] [--sites 3] [--seed 5]
        [--items 30] [--depth 3] [--no-rewrite]

As a user would: crawl from each site's home page with the spider of
``bench.scrapy_spider`` and no add-on, learn maps with ``miqps learn`` on the URLs that
crawl requested, then crawl again with the add-on (and once more with
``MIQPS_REWRITE_REQUESTS``). An item is lost when a page the crawl was sent to (fetched or
filtered as a duplicate) is among no item scraped, by ``simweb.corpus.content_key_for``.
It prints figures and the saving; the target (at least 40% fewer pages, 0 lost) is not
asserted here (``tests/miqps/test_scrapy.py`` asserts 0 lost and fewer pages).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from simweb.corpus import content_key_for
from simweb.crawl import CrawlWeb, build_crawl_sites
from simweb.server import SimWeb
from simweb.sites import Site


@dataclass(frozen=True)
class Crawl:
    fetched: int
    """Responses downloaded, redirects included."""
    items: list[tuple[str, str]]
    """Per item scraped: its URL and the URL first requested for it."""
    requested: list[str]
    """The URLs the spider asked for, duplicates included."""
    lost: frozenset[str]
    """Content keys of pages asked for and never scraped."""
    stats: dict[str, Any]

    @property
    def pages(self) -> int:
        return len(self.items)

    def responses(self, status_class: str) -> int:
        """Responses with a status starting with ``status_class`` ("3", "404")."""
        prefix = f"downloader/response_status_count/{status_class}"
        return sum(value for key, value in self.stats.items() if key.startswith(prefix))


@dataclass(frozen=True)
class Comparison:
    without: Crawl
    with_addon: Crawl
    rewriting: Crawl | None
    maps: Path
    learn_fetches: int
    distinct_pages: int
    """Distinct pages the crawl without the add-on was sent to: the fewest fetches any
    deduplication could reach."""

    @property
    def saving(self) -> float:
        return 1 - self.with_addon.fetched / self.without.fetched


def crawl(
    web: SimWeb,
    sites: dict[str, Site],
    workdir: Path,
    depth: int,
    maps: Path | None = None,
    rewrite: bool = False,
) -> Crawl:
    """One crawl from every site's home page, in a process of its own."""
    name = "without" if maps is None else ("rewrite" if rewrite else "addon")
    config = {
        "proxy": web.proxy_url,
        "start_urls": [f"http://{host}/" for host in sites],
        "hosts": sorted(sites),
        "depth": depth,
        "maps": None if maps is None else str(maps),
        "rewrite": rewrite,
    }
    config_path, out_path = workdir / f"{name}.json", workdir / f"{name}.out.json"
    config_path.write_text(json.dumps(config), "utf-8")
    subprocess.run(
        [sys.executable, "-m", "bench.scrapy_spider", str(config_path), str(out_path)],
        check=True,
        timeout=600,
    )
    out = json.loads(out_path.read_text("utf-8"))
    items = [(url, first) for url, first in out["items"]]
    scraped = {page_key(sites, url) for url, _ in items}
    lost = frozenset(
        key
        for key in map(lambda url: page_key(sites, url), out["discovered"])
        if key not in scraped and not key.endswith("|notfound")
    )
    stats = out["stats"]
    return Crawl(stats.get("downloader/response_count", 0), items, out["discovered"], lost, stats)


def page_key(sites: dict[str, Site], url: str) -> str:
    """Ground truth: which page ``url`` shows."""
    return content_key_for(sites[urlsplit(url).hostname or ""], url)


def learn(sites: list[Site], urls: list[str], out: Path, seed: int) -> int:
    """Maps learned by ``miqps learn`` on ``urls``, against a simulated web that answers
    with challenge pages as it does; the number of requests learning sent."""
    urls_path = out.with_suffix(".urls.txt")
    urls_path.write_text("\n".join(dict.fromkeys(urls)) + "\n", "utf-8")
    with CrawlWeb(sites, seed=seed, rate_limit_per_second=300, flaky_rate=0.0) as web:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "miqps.cli",
                "learn",
                "--urls",
                str(urls_path),
                "--out",
                str(out),
                "--proxy",
                web.proxy_url,
                "--rate",
                "200",
                "--no-progress",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            timeout=600,
        )
        return web.requests_total()


def compare(
    workdir: Path,
    family: str = "tuning",
    count: int = 3,
    seed: int = 5,
    items: int = 30,
    depth: int = 3,
    rewrite: bool = True,
) -> Comparison:
    """Crawl without the add-on, learn maps on what it requested, crawl with them."""
    site_list = build_crawl_sites(family, count, seed=seed, items=items)
    sites = {site.host: site for site in site_list}
    maps = workdir / "maps.jsonl"

    def web() -> CrawlWeb:
        return CrawlWeb(
            site_list, seed=seed, rate_limit_per_second=0, flaky_rate=0.0, interstitials=False
        )

    with web() as crawl_web:
        without = crawl(crawl_web, sites, workdir, depth)
    learn_fetches = learn(site_list, without.requested, maps, seed)
    with web() as crawl_web:
        with_addon = crawl(crawl_web, sites, workdir, depth, maps)
        rewriting = crawl(crawl_web, sites, workdir, depth, maps, rewrite=True) if rewrite else None
    distinct = {page_key(sites, url) for url in without.requested}
    return Comparison(without, with_addon, rewriting, maps, learn_fetches, len(distinct))


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
