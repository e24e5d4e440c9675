"""The prober against real loopback sites whose noise and interstitials are adversarial."""

from __future__ import annotations

import asyncio
import threading
import zlib
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import ClassVar
from urllib.parse import parse_qsl, urlsplit

import pytest

from miqps.content import VolatilityModel
from miqps.content import block_key as K
from miqps.fetch import FetchConfig, Fetcher
from miqps.learner import Learner
from miqps.prober import Comparison, Outcome, PageProber
from miqps.urls import parse
from simweb.server import SimWeb
from simweb.sites import FAMILIES, Rendering, Role, Route, Site, build_sites, route_traps
from tests.miqps.loopback import send_html, serve
from tests.simweb.support import item_url

_ADS = (("Save big today", "On shoes"), ("Limited offer", "On boots"))


class _RepeatingAd(BaseHTTPRequestHandler):
    """Product pages with a two-variant ad block that shows the same variant on the first
    two fetches of a URL and the other one after: one refetch says "stable"."""

    fetches: ClassVar[Counter[str]] = Counter()
    lock = threading.Lock()
    interstitial_every = 0
    flip_from = 3

    def do_GET(self) -> None:
        with self.lock:
            type(self).fetches[self.path] += 1
            count = type(self).fetches[self.path]
            total = sum(type(self).fetches.values())
        split = urlsplit(self.path)
        if not split.path.startswith("/p/"):
            send_html(self, 404, b"<html><body><h1>Not found</h1></body></html>")
            return
        if self.interstitial_every and total % self.interstitial_every == 0:
            send_html(
                self,
                200,
                b"<html><head><title>Just a moment...</title></head><body>"
                b"<h1>Checking your browser before accessing</h1>"
                b"<p>Ray ID: 8c2f9a1b3d4e</p></body></html>",
            )
            return
        variant = zlib.crc32(self.path.encode()) % 2
        if count >= self.flip_from:
            variant = 1 - variant
        title, line = _ADS[variant]
        item = split.path.rsplit("/", 1)[-1]
        colour = dict(parse_qsl(split.query)).get("color", "black")
        body = (
            f"<html><head><title>Item {item}</title></head><body><main><h1>Item {item}</h1>"
            f"<p>A fine {colour} item.</p><p>Sturdy and light.</p></main>"
            f"<aside class='ad'><h3>{title}</h3><p>{line}</p></aside></body></html>"
        ).encode()
        send_html(self, 200, body)

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def repeating_ad_proxy() -> Iterator[str]:
    _RepeatingAd.fetches = Counter()
    _RepeatingAd.interstitial_every = 0
    _RepeatingAd.flip_from = 3
    yield from serve(_RepeatingAd)


def _first_ads_differ(original: str, reduced: str) -> bool:
    return zlib.crc32(original.encode()) % 2 != zlib.crc32(reduced.encode()) % 2


def test_a_rotating_ad_that_repeats_on_one_refetch_is_not_taken_for_content(
    repeating_ad_proxy: str,
) -> None:
    pairs = []
    for n in range(40):
        url = parse(f"http://ads.test/p/{n}?utm_source=s{n}")
        pairs.append((url.url, url.without(["utm_source"])))
    pairs = [(o, r) for o, r in pairs if _first_ads_differ(o, r)][:3]
    assert pairs, "the fixture needs URLs whose first fetches show different ads"

    async def compare() -> list[Outcome]:
        async with Fetcher(FetchConfig(proxy=repeating_ad_proxy, per_host_rate=100)) as fetcher:
            prober = PageProber(fetcher)
            return [await prober.compare("ads.test/p/*", o, r) for o, r in pairs]

    assert asyncio.run(compare()) == [Outcome.UNCHANGED] * len(pairs)


def test_tracking_is_dropped_and_colour_kept_despite_a_repeating_ad(
    repeating_ad_proxy: str,
) -> None:
    urls = [
        parse(f"http://ads.test/p/{n}?color={c}&gclid=g{n}{c}&utm_source=s{n}")
        for n in range(12)
        for c in ("red", "blue")
    ]

    async def learn() -> None:
        async with Fetcher(FetchConfig(proxy=repeating_ad_proxy, per_host_rate=100)) as fetcher:
            domain_map, _ = await Learner(PageProber(fetcher)).learn_domain("ads.test", urls)
        [decision] = domain_map.patterns.values()
        assert decision.dropped == {"gclid", "utm_source"}, decision.to_json()
        assert "color" in decision.kept

    asyncio.run(learn())


def test_an_interstitial_is_retried_and_never_counts_as_unchanged(
    repeating_ad_proxy: str,
) -> None:
    _RepeatingAd.interstitial_every = 2  # every other answer is a challenge page
    original = parse("http://ads.test/p/7?color=red")

    async def compare() -> tuple[Outcome, int]:
        config = FetchConfig(proxy=repeating_ad_proxy, per_host_rate=100, backoff_base=0.01)
        async with Fetcher(config) as fetcher:
            prober = PageProber(fetcher)
            outcome = await prober.compare(
                "ads.test/p/*", original.url, original.without(["color"])
            )
            return outcome, fetcher.stats.requests

    outcome, requests = asyncio.run(compare())
    assert outcome is Outcome.CHANGED, "retries got past the interstitials to the pages"
    assert requests > 2, "every retry is a fetch and is counted"
    _RepeatingAd.interstitial_every = 1  # nothing but challenge pages

    async def walled() -> Outcome:
        config = FetchConfig(proxy=repeating_ad_proxy, per_host_rate=100, backoff_base=0.01)
        async with Fetcher(config) as fetcher:
            return await PageProber(fetcher).compare(
                "ads.test/p/*", original.url, original.without(["color"])
            )

    assert asyncio.run(walled()) is Outcome.INCONCLUSIVE


def test_blocks_taken_for_stable_are_still_audited_by_a_refetch_now_and_then(
    repeating_ad_proxy: str,
) -> None:
    _RepeatingAd.flip_from = 2  # the ad moves on every refetch
    template = "ads.test/p/*"
    ad = {K("body>aside.ad>h3"), K("body>aside.ad>p")}
    model = VolatilityModel()
    model.stable[template] = Counter(dict.fromkeys(ad, 10))  # lucky refetches made it "stable"
    pairs = []
    for n in range(60):
        url = parse(f"http://ads.test/p/{n}?utm_source=s{n}")
        pairs.append((url.url, url.without(["utm_source"])))
    pairs = [(o, r) for o, r in pairs if _first_ads_differ(o, r)][:4]

    async def compare() -> list[Comparison]:
        async with Fetcher(FetchConfig(proxy=repeating_ad_proxy, per_host_rate=100)) as fetcher:
            prober = PageProber(fetcher, model, audit_every=4)
            found = [await prober.compare_detail(template, o, r) for o, r in pairs]
            assert not any(prober.still_changed(template, c) for c in found)
            return found

    found = asyncio.run(compare())
    assert [c.outcome for c in found[:3]] == [Outcome.CHANGED] * 3, "the shortcut was taken"
    assert found[3].outcome is Outcome.UNCHANGED, "the audit refetched and saw the ad move"
    assert ad <= model.paths(template)


def test_unjudgeable_pages_are_counted_apart_from_the_pages_fetched(
    repeating_ad_proxy: str,
) -> None:
    _RepeatingAd.interstitial_every = 1  # nothing but challenge pages
    original = parse("http://ads.test/p/7?color=red")

    async def walled() -> tuple[int, int]:
        config = FetchConfig(proxy=repeating_ad_proxy, per_host_rate=100, backoff_base=0.01)
        async with Fetcher(config) as fetcher:
            await PageProber(fetcher).compare(
                "ads.test/p/*", original.url, original.without(["color"])
            )
            return fetcher.stats.fetched, fetcher.stats.unjudgeable

    fetched, unjudgeable = asyncio.run(walled())
    pages = [n for url, n in _RepeatingAd.fetches.items() if not url.endswith("/robots.txt")]
    assert fetched == sum(pages) > 0  # robots.txt is a request, but no page to judge
    assert unjudgeable == fetched, "every answer was a challenge page"


def _trap(sites: list[Site], trap: str) -> tuple[Site, Route]:
    return next(
        (site, route) for site in sites for route in site.routes if trap in route_traps(site, route)
    )


def _judged(prober: PageProber, template: str, comparisons: list[Comparison]) -> list[Outcome]:
    """The outcomes as the learner counts them, in the light of all the noise learned."""
    return [
        Outcome.UNCHANGED
        if c.outcome is Outcome.CHANGED and not prober.still_changed(template, c)
        else c.outcome
        for c in comparisons
    ]


@pytest.mark.parametrize("family", FAMILIES)
def test_a_print_view_shows_its_article_and_a_printed_invoice_another_item(family: str) -> None:
    sites = build_sites(family, 6)
    news, article = _trap(sites, "print-view")
    view = next(p for p in article.params if p.role is Role.LAYOUT)
    _, invoice = _trap(sites, "print-other-item")
    printed = next(p for p in invoice.params if p.role is Role.VARIANT)

    async def compare() -> tuple[list[Outcome], list[Outcome]]:
        with SimWeb(sites, rate_limit_per_second=0, flaky_rate=0, interstitials=False) as web:
            async with Fetcher(FetchConfig(proxy=web.proxy_url, per_host_rate=500)) as fetcher:
                prober = PageProber(fetcher)
                views, invoices = [], []
                for n in range(6):
                    plain = item_url(news, article, n)
                    views.append(
                        await prober.compare_detail(
                            news.host + article.path, f"{plain}&{view.name}={view.values[0]}", plain
                        )
                    )
                    order = item_url(news, invoice, n)
                    invoices.append(
                        await prober.compare_detail(
                            news.host + invoice.path, f"{order}&{printed.name}=1", order
                        )
                    )
                return (
                    _judged(prober, news.host + article.path, views),
                    _judged(prober, news.host + invoice.path, invoices),
                )

    views, invoices = asyncio.run(compare())
    assert views == [Outcome.UNCHANGED] * 6, "the same article in the print template"
    assert invoices == [Outcome.CHANGED] * 6, "an order and its printed invoice"


@pytest.mark.parametrize("family", FAMILIES)
def test_an_ab_layout_keeps_its_items_apart_and_shows_tracking_changes_nothing(
    family: str,
) -> None:
    sites = build_sites(family, 6)
    site, route = _trap(sites, "ab-layout")
    route = next(r for r in site.routes if r.key and r.rendering is Rendering.SERVER)
    tracking = next(n.name for n in site.noise if n.role is Role.TRACKING and not n.matrix)
    template = site.host + route.path

    async def learn() -> tuple[list[Outcome], list[Outcome], set[str], set[str]]:
        with SimWeb(sites, rate_limit_per_second=0, flaky_rate=0, interstitials=False) as web:
            async with Fetcher(FetchConfig(proxy=web.proxy_url, per_host_rate=500)) as fetcher:
                prober = PageProber(fetcher)
                tracked = [
                    await prober.compare_detail(
                        template,
                        item_url(site, route, n, f"{tracking}=t{n}"),
                        item_url(site, route, n),
                    )
                    for n in range(12)
                ]
                items = [
                    await prober.compare_detail(
                        template, item_url(site, route, n), item_url(site, route, n + 1)
                    )
                    for n in range(6)
                ]
                urls = [parse(item_url(site, route, n, f"{tracking}=u{n}")) for n in range(20, 44)]
                domain_map, _ = await Learner(prober).learn_domain(site.host, urls)
                [decision] = domain_map.patterns.values()
                return (
                    _judged(prober, template, tracked),
                    _judged(prober, template, items),
                    set(decision.dropped),
                    set(decision.kept),
                )

    tracked, items, dropped, kept = asyncio.run(learn())
    assert tracked == [Outcome.UNCHANGED] * 12
    assert items == [Outcome.CHANGED] * 6
    assert dropped == {tracking}
    assert kept == set(route.key)
