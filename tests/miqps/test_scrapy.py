"""The Scrapy add-on: a real crawl of the simulated web with and without it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest
from scrapy import Request
from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured
from scrapy.http import HtmlResponse
from scrapy.settings import Settings
from scrapy.utils.request import RequestFingerprinter
from scrapy.utils.test import get_crawler

from miqps import Canonicalizer
from miqps.content import snapshot_of
from miqps.maps import DomainMap, write_maps
from miqps.observations import read_observation
from miqps.scrapy import (
    Addon,
    CanonicalRequestsMiddleware,
    CrawlObservations,
    MapsRequestFingerprinter,
)
from simweb.crawl import CrawlWeb, build_crawl_sites
from testkit.scrapy_crawl import Comparison, Crawl, compare
from tests.miqps.test_api import HOST, product_map

pytestmark = pytest.mark.timeout(120)


def maps_fingerprinter(
    maps: list[DomainMap], tmp_path: Path, **settings: Any
) -> MapsRequestFingerprinter:
    path = tmp_path / "maps.jsonl"
    write_maps(path, maps)
    crawler = get_crawler(settings_dict={"MIQPS_MAPS": str(path), **settings})
    return MapsRequestFingerprinter.from_crawler(crawler)


def test_mapped_domains_are_fingerprinted_by_canonical_url(tmp_path: Path) -> None:
    fingerprinter = maps_fingerprinter([product_map()], tmp_path)
    fingerprint = fingerprinter.fingerprint
    base = f"https://{HOST}/p/1?id=7&ref=a&sid=1"
    assert fingerprint(Request(base)) == fingerprint(
        Request(f"https://{HOST}/p/1?sid=9&id=7&ref=b")
    )
    assert fingerprint(Request(base)) != fingerprint(
        Request(f"https://{HOST}/p/1?id=8&ref=a&sid=1")
    )
    assert fingerprint(Request(base)) != fingerprint(Request(base, method="POST"))
    # A site redirecting to the canonical URL: the redirect is not its source's duplicate.
    redirected = Request(
        f"https://{HOST}/p/1?id=7&ref=a&sid=1",
        meta={"redirect_urls": [f"https://{HOST}/p/1?id=7&ref=x&sid=2"]},
    )
    assert fingerprint(redirected) != fingerprint(Request(base))
    stats = fingerprinter.stats
    assert stats is not None
    assert stats.get_value("miqps/params_dropped") == 2 * 8  # ref and sid, 8 requests
    assert stats.get_value("miqps/domains_without_map") is None


def test_domains_without_a_map_keep_the_fallback_fingerprint(tmp_path: Path) -> None:
    fingerprinter = maps_fingerprinter([product_map()], tmp_path)
    default = RequestFingerprinter()
    for url in ("https://other.test/p/1?id=7&ref=a", "https://third.test/?utm_source=x"):
        assert fingerprinter.fingerprint(Request(url)) == default.fingerprint(Request(url))
    stats = fingerprinter.stats
    assert stats is not None and stats.get_value("miqps/domains_without_map") == 2


def test_the_addon_installs_the_fingerprinter_and_keeps_the_old_one_as_fallback() -> None:
    other = f"{__name__}.OtherFingerprinter"
    settings = Settings({"REQUEST_FINGERPRINTER_CLASS": other})
    Addon().update_settings(settings)
    assert settings["REQUEST_FINGERPRINTER_CLASS"] is MapsRequestFingerprinter
    assert settings["MIQPS_FALLBACK_REQUEST_FINGERPRINTER_CLASS"] == other
    Addon().update_settings(settings)  # enabled twice: the fallback stays
    assert settings["MIQPS_FALLBACK_REQUEST_FINGERPRINTER_CLASS"] == other


class OtherFingerprinter(RequestFingerprinter):
    """A project's own fingerprinter, which the add-on keeps for domains without a map."""


def test_a_crawl_without_maps_is_refused_clearly() -> None:
    with pytest.raises(ValueError, match="MIQPS_MAPS"):
        MapsRequestFingerprinter.from_crawler(get_crawler())


def test_the_unlearned_feed_without_kafka_names_the_streams_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "confluent_kafka", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "streams.maps.scrapyfeed", raising=False)
    with pytest.raises(RuntimeError, match="MIQPS_FEED_UNLEARNED needs the 'streams' extra"):
        maps_fingerprinter([product_map()], tmp_path, MIQPS_FEED_UNLEARNED="127.0.0.1:1")


def test_following_the_maps_topic_without_kafka_names_the_streams_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "confluent_kafka", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "streams.maps.scrapyfeed", raising=False)
    with pytest.raises(RuntimeError, match="MIQPS_KAFKA_BOOTSTRAP needs the 'streams' extra"):
        maps_fingerprinter([product_map()], tmp_path, MIQPS_KAFKA_BOOTSTRAP="127.0.0.1:1")


class RecordingMapFeed:
    """A ``MIQPS_MAP_FEED`` of a project's own: maps from a list, URLs into one."""

    calls: ClassVar[list[tuple[str, ...]]] = []

    def follow(self, bootstrap: str, topic: str, use_prior: bool) -> Canonicalizer:
        self.calls.append(("follow", bootstrap, topic, str(use_prior)))
        canonicalizer = Canonicalizer(use_prior=use_prior)
        canonicalizer.load({HOST: product_map()})
        return canonicalizer

    def unlearned(self, bootstrap: str, topic: str, per_pattern: int) -> RecordingSink:
        self.calls.append(("unlearned", bootstrap, topic, str(per_pattern)))
        return RecordingSink()


class RecordingSink:
    def __init__(self) -> None:
        self.sent: list[str] = []

    def send(self, domain: str, pattern: str, url: str) -> str | None:
        self.sent.append(url)
        return "fed"

    def close(self) -> None:
        pass


def test_the_kafka_side_is_the_map_feed_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(RecordingMapFeed, "calls", [])
    crawler = get_crawler(
        settings_dict={
            "MIQPS_MAP_FEED": f"{__name__}.RecordingMapFeed",
            "MIQPS_KAFKA_BOOTSTRAP": "kafka.test:9092",
            "MIQPS_MAPS_TOPIC": "maps.test",
            "MIQPS_FEED_UNLEARNED": "kafka.test:9092",
            "MIQPS_RAW_TOPIC": "raw.test",
            "MIQPS_FEED_PER_PATTERN": 7,
        }
    )
    fingerprinter = MapsRequestFingerprinter.from_crawler(crawler)
    assert RecordingMapFeed.calls == [
        ("follow", "kafka.test:9092", "maps.test", "True"),
        ("unlearned", "kafka.test:9092", "raw.test", "7"),
    ]
    fingerprint = fingerprinter.fingerprint
    assert fingerprint(Request(f"https://{HOST}/p/1?id=7&ref=a&sid=1")) == fingerprint(
        Request(f"https://{HOST}/p/1?sid=9&id=7&ref=b")
    )
    fingerprint(Request("https://other.test/?q=1"))
    assert isinstance(fingerprinter.unlearned, RecordingSink)
    assert fingerprinter.unlearned.sent == ["https://other.test/?q=1"]


def test_an_unloadable_map_feed_is_named(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match=r"MIQPS_MAP_FEED = 'nowhere\.Feed' cannot be loaded"):
        maps_fingerprinter(
            [product_map()],
            tmp_path,
            MIQPS_MAP_FEED="nowhere.Feed",
            MIQPS_FEED_UNLEARNED="127.0.0.1:1",
        )
    # Without a Kafka setting the feed is never loaded, so a file of maps needs nothing.
    maps_fingerprinter([product_map()], tmp_path, MIQPS_MAP_FEED="nowhere.Feed")


# --- the optional request rewriting --------------------------------------------------


def _crawler_with_addon(tmp_path: Path, **settings: Any) -> Crawler:
    path = tmp_path / "maps.jsonl"
    write_maps(path, [product_map()])
    crawler = get_crawler(
        settings_dict={"ADDONS": {Addon: 600}, "MIQPS_MAPS": str(path), **settings}
    )
    crawler._apply_settings()
    return crawler


def test_rewriting_sends_requests_to_their_canonical_url(tmp_path: Path) -> None:
    crawler = _crawler_with_addon(tmp_path, MIQPS_REWRITE_REQUESTS=True)
    middleware = CanonicalRequestsMiddleware.from_crawler(crawler)
    site_url = f"https://{HOST}/p/1?sid=9&id=7&ref=b"
    rewritten = middleware.get_processed_request(Request(site_url, meta={"depth": 2}), None)
    assert rewritten is not None
    assert rewritten.url == f"https://{HOST}/p/1?id=7"
    assert rewritten.meta == {"depth": 2, "miqps_original_url": site_url}
    unmapped = Request("https://other.test/p/1?id=7&ref=a")
    assert middleware.get_processed_request(unmapped, None) is unmapped
    assert crawler.stats is not None
    assert crawler.stats.get_value("miqps/requests_rewritten") == 1


def test_rewriting_is_off_by_default(tmp_path: Path) -> None:
    crawler = _crawler_with_addon(tmp_path)
    assert crawler.settings.getdict("SPIDER_MIDDLEWARES")[CanonicalRequestsMiddleware] == 50
    with pytest.raises(NotConfigured):
        CanonicalRequestsMiddleware.from_crawler(crawler)


def test_rewriting_without_the_maps_fingerprinter_is_refused_clearly() -> None:
    crawler = get_crawler(settings_dict={"MIQPS_REWRITE_REQUESTS": True})
    crawler._apply_settings()
    with pytest.raises(ValueError, match="enable the add-on"):
        CanonicalRequestsMiddleware.from_crawler(crawler)


SPIDER = """
import scrapy


class Shop(scrapy.Spider):
    name = "shop"
    start_urls = [{start!r}]
    custom_settings = {{"ADDONS": {{"miqps.scrapy.Addon": 600}}, "MIQPS_MAPS": {maps!r}}}

    def parse(self, response):
        yield {{"url": response.url}}
"""


def test_a_crawl_whose_maps_file_is_missing_stops_at_start_up_naming_setting_and_path(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "not-learned-yet" / "maps.jsonl"
    sites = build_crawl_sites("tuning", 1, seed=5, items=5)
    with CrawlWeb(sites, seed=5, rate_limit_per_second=0, flaky_rate=0.0) as web:
        spider = tmp_path / "spider.py"
        spider.write_text(SPIDER.format(start=f"http://{sites[0].host}/", maps=str(missing)))
        done = subprocess.run(
            [str(Path(sys.executable).with_name("scrapy")), "runspider", str(spider)],
            cwd=tmp_path,
            env={**os.environ, "http_proxy": web.proxy_url},
            capture_output=True,
            text=True,
            timeout=120,
        )
        fetched = web.requests_total()
    assert done.returncode != 0
    assert f"MIQPS_MAPS = '{missing}' cannot be read (No such file or directory)" in done.stderr
    assert "FileNotFoundError" not in done.stderr, done.stderr[-2000:]
    assert fetched == 0


# --- a real crawl --------------------------------------------------------------------


@pytest.fixture(scope="module")
def simweb_crawls(tmp_path_factory: pytest.TempPathFactory) -> Comparison:
    return compare(tmp_path_factory.mktemp("crawl"), "tuning", 3, seed=5, items=10, depth=2)


def _summary(label: str, crawl: Crawl, without: Crawl) -> str:
    return (
        f"{label}: {crawl.fetched} pages fetched, {crawl.pages} items, {len(crawl.lost)} "
        f"lost ({1 - crawl.fetched / without.fetched:.0%} fewer pages)"
    )


@pytest.mark.timeout(400)
def test_the_addon_loses_no_item_and_fetches_fewer_pages(simweb_crawls: Comparison) -> None:
    without, with_addon = simweb_crawls.without, simweb_crawls.with_addon
    print(
        "\n"
        + "\n".join(
            _summary(label, crawl, without)
            for label, crawl in (("without the add-on", without), ("with the add-on", with_addon))
        )
    )
    assert without.lost == set()
    assert with_addon.lost == set()
    assert with_addon.fetched < without.fetched
    stats = with_addon.stats
    assert stats["miqps/params_dropped"] > 0
    assert stats["miqps/duplicates_filtered"] > 0
    assert "miqps/requests_canonicalized" not in without.stats
    assert "miqps/requests_rewritten" not in stats


def test_the_addon_fetches_the_sites_own_urls(simweb_crawls: Comparison) -> None:
    """Requests are not rewritten by default: pages are fetched at the URL the site gave,
    tracking parameters included, though their fingerprint left them out."""
    canonicalizer = Canonicalizer.from_file(simweb_crawls.maps)
    fetched = [first for _, first in simweb_crawls.with_addon.items]
    assert any(canonicalizer.canonicalize(url) != url for url in fetched)


def test_rewriting_crawls_canonical_urls_and_loses_no_item(simweb_crawls: Comparison) -> None:
    rewriting, without = simweb_crawls.rewriting, simweb_crawls.without
    assert rewriting is not None
    print("\n" + _summary("with MIQPS_REWRITE_REQUESTS", rewriting, without))
    assert rewriting.lost == set()
    canonicalizer = Canonicalizer.from_file(simweb_crawls.maps)
    requested = [first for _, first in rewriting.items]
    assert [url for url in requested if canonicalizer.canonicalize(url) != url] == []
    assert rewriting.stats["miqps/requests_rewritten"] > 0
    assert rewriting.fetched < simweb_crawls.with_addon.fetched


class RecordingFeed:
    """A ``MIQPS_MAP_FEED`` of our own whose observation sink keeps what it is sent."""

    sent: ClassVar[list[tuple[str, str, bytes]]] = []

    def observations(self, bootstrap: str, topic: str) -> RecordingFeed:
        return self

    def send(self, domain: str, url: str, observation: bytes) -> str:
        self.sent.append((domain, url, observation))
        return "fed"

    def close(self) -> None:
        pass


def test_the_addon_enables_the_crawl_s_observations_only_when_asked() -> None:
    settings = Settings()
    Addon().update_settings(settings)
    assert CrawlObservations in settings["EXTENSIONS"]
    with pytest.raises(NotConfigured):
        CrawlObservations.from_crawler(get_crawler())


def test_a_page_is_observed_under_the_url_first_asked_for_after_its_redirects() -> None:
    crawler = get_crawler(
        settings_dict={
            "MIQPS_FEED_OBSERVATIONS": "127.0.0.1:1",
            "MIQPS_MAP_FEED": f"{__name__}.RecordingFeed",
        }
    )
    extension = CrawlObservations.from_crawler(crawler)
    RecordingFeed.sent.clear()
    asked, landed = f"https://{HOST}/p/1?id=7&ref=a", f"https://{HOST}/p/1?id=7"
    body = b"<html><head><title>Item 7</title></head><body><h1>Item 7</h1></body></html>"
    response = HtmlResponse(landed, body=body, headers={"Content-Type": "text/html"})
    extension.response_received(response, Request(landed, meta={"redirect_urls": [asked]}))
    extension.response_received(HtmlResponse("https://other.test/", body=body), Request(asked))
    [(domain, url, sent), _] = RecordingFeed.sent
    assert (domain, url) == (HOST, asked)
    observation = read_observation(sent, max_bytes=1 << 20)
    assert observation.url == asked and observation.snapshot is not None
    assert observation.snapshot.final_url == landed and observation.snapshot.redirects == 1
    assert observation.snapshot.blocks == snapshot_of(200, landed, body, "text/html").blocks
    assert crawler.stats is not None and crawler.stats.get_value("miqps/observations_fed") == 2
