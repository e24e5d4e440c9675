"""Scrapy crawls of the simulated web's crawlable sites with the add-on and without it,
each in a process of its own (``testkit.scrapy_spider``), with items lost against ground
truth: for ``bench.scrapy_crawl`` and ``tests/miqps/test_scrapy.py``."""

from __future__ import annotations

import json
import subprocess
import sys
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
        [sys.executable, "-m", "testkit.scrapy_spider", str(config_path), str(out_path)],
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
