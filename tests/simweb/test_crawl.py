"""The crawlable mode of the simulated web: small sites whose pages link every item under
many URLs, some of them different pages."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import Counter

import httpx
import pytest
from selectolax.lexbor import LexborHTMLParser

from simweb.corpus import content_key_for
from simweb.crawl import CRAWL_HOST_PREFIX, CrawlWeb, build_crawl_sites, crawl_links
from simweb.render import kit
from simweb.resolve import Page, home_page, resolve
from simweb.sites import FAMILIES, PageKind, Site, build_sites


def _page(site: Site, href: str) -> Page:
    path, _, query = href.partition("?")
    return resolve(site, path, query).page


def _links_of_a_site(site: Site) -> dict[str, list[str]]:
    """The crawl links of the home page, of every item's plain page and of the listings
    the home page links to, by the page's key."""
    pages = [home_page(site), *(_page(site, href) for href in kit(site).item_href)]
    pages += [_page(site, href) for href in crawl_links(site, pages[0])]
    return {page.key: crawl_links(site, page) for page in pages}


@pytest.mark.parametrize("family", FAMILIES)
def test_crawl_sites_are_small_copies_on_hosts_of_their_own(family: str) -> None:
    originals = build_sites(family, 6, seed=2)
    small = build_crawl_sites(family, 6, seed=2, items=12)
    for original, site in zip(originals, small, strict=True):
        assert site.host == CRAWL_HOST_PREFIX + original.host
        assert len(site.catalog.items) == 12 < len(original.catalog.items)
        assert all(
            0 <= idx < 12 for table in site.catalog.lookup.values() for idx in table.values()
        )
        assert site.routes == original.routes and site.noise == original.noise
    with pytest.raises(ValueError, match="items"):
        build_crawl_sites(family, 1, items=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_crawl_links_lead_to_pages_under_many_urls_and_to_different_pages(family: str) -> None:
    for site in build_crawl_sites(family, 6, seed=2, items=12):
        links = _links_of_a_site(site)
        item_keys = {_page(site, href).key for href in kit(site).item_href}
        urls_per_page: Counter[str] = Counter()
        for page_key, hrefs in links.items():
            for href in hrefs:
                key = content_key_for(site, f"http://{site.host}{href}")
                assert not key.endswith("|notfound"), (page_key, href)
                urls_per_page[key] += 1
        assert sum(urls_per_page[key] for key in item_keys) > len(item_keys), site.host
        # From an item's plain page: its variants, languages or pages, other pages.
        variants = {key for key in urls_per_page if "|#" in key and "=" in key}
        assert variants, site.host


def test_crawl_links_are_the_same_for_every_url_of_a_page() -> None:
    site = build_crawl_sites("tuning", 1, seed=2, items=12)[0]
    item_href = kit(site).item_href[3]
    tracking = next(n.name for n in site.noise if n.name.startswith("utm_"))
    blocks = []
    with (
        CrawlWeb([site], rate_limit_per_second=0, flaky_rate=0.0) as web,
        httpx.Client(proxy=web.proxy_url, follow_redirects=True) as client,
    ):
        for url in (
            f"http://{site.host}{item_href}",
            f"http://{site.host}{item_href}{'&' if '?' in item_href else '?'}{tracking}=mail",
        ):
            response = client.get(url)
            assert response.status_code == 200
            block = LexborHTMLParser(response.text).css_first("nav.more")
            assert block is not None
            blocks.append([str(a.attributes["href"]) for a in block.css("a")])
    assert blocks[0] == blocks[1] == crawl_links(site, _page(site, item_href))


def test_a_missing_page_links_nowhere() -> None:
    site = build_crawl_sites("tuning", 1, items=5)[0]
    page = _page(site, "/no-such-page")
    assert page.kind is PageKind.NOT_FOUND
    assert crawl_links(site, page) == []


def test_the_command_prints_its_usage() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "simweb.crawl", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: python -m simweb.crawl")
    assert "--family" in done.stdout and "--port" in done.stdout


def test_the_command_serves_the_crawl_sites_until_sigterm() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "simweb.crawl", "--sites", "2", "--seed", "5", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        proxy = process.stdout.readline().split("proxy ", 1)[1].split(";")[0]
        starts = [process.stdout.readline().strip() for _ in range(2)]
        sites = build_crawl_sites("tuning", 2, seed=5)
        assert starts == [f"http://{site.host}/" for site in sites]
        with httpx.Client(proxy=proxy, timeout=10) as client:
            home = client.get(starts[0])
        assert home.status_code == 200
        hrefs = [
            node.attributes.get("href") for node in LexborHTMLParser(home.text).css("nav.more a")
        ]
        assert hrefs == crawl_links(sites[0], home_page(sites[0]))
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
