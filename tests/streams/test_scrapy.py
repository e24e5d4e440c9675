"""The Scrapy add-on: a real crawl of the simulated web with and without it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from scrapy import Request
from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured
from scrapy.settings import Settings
from scrapy.utils.request import RequestFingerprinter
from scrapy.utils.test import get_crawler

from bench.scrapy_crawl import Comparison, Crawl, compare
from miqps import Canonicalizer
from miqps.maps import DomainMap, write_maps
from streams.scrapy import (
    FEED_ATTEMPTS,
    Addon,
    CanonicalRequestsMiddleware,
    MapsRequestFingerprinter,
    UnlearnedFeed,
)
from streams.settings import Settings as StreamSettings
from streams.tools import TopicReader
from tests.miqps.test_api import HOST, maps_topic, product_map

__all__ = ["maps_topic"]  # a fixture shared with test_api


def _fingerprinter(
    maps: list[DomainMap], tmp_path: Path, **settings: Any
) -> MapsRequestFingerprinter:
    path = tmp_path / "maps.jsonl"
    write_maps(path, maps)
    crawler = get_crawler(settings_dict={"MIQPS_MAPS": str(path), **settings})
    return MapsRequestFingerprinter.from_crawler(crawler)


def test_mapped_domains_are_fingerprinted_by_canonical_url(tmp_path: Path) -> None:
    fingerprinter = _fingerprinter([product_map()], tmp_path)
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
    fingerprinter = _fingerprinter([product_map()], tmp_path)
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


# --- the optional feed of unlearned patterns -------------------------------------------


class FullQueueProducer:
    """A producer whose local queue is full for its first ``full_for`` calls."""

    def __init__(self, full_for: int) -> None:
        self.full_for = full_for
        self.produced: list[bytes] = []
        self.polls = 0

    def produce(self, topic: str, value: bytes, key: bytes) -> None:
        if self.full_for > 0:
            self.full_for -= 1
            raise BufferError("Local: Queue full")
        self.produced.append(value)

    def poll(self, timeout: float) -> int:
        self.polls += 1
        return 0

    def flush(self, timeout: float) -> int:
        return 0


def test_the_feed_retries_a_full_queue_a_few_times_then_drops_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    briefly_full = FullQueueProducer(full_for=2)
    fed = UnlearnedFeed(briefly_full, "raw", 5).send("a.test", "id", "https://a.test/?id=1")
    assert fed == "fed"
    assert briefly_full.produced == [b"https://a.test/?id=1"]
    stuck = FullQueueProducer(full_for=10**9)
    feed = UnlearnedFeed(stuck, "raw", 1)
    with caplog.at_level(logging.WARNING, logger="streams.scrapy"):
        assert feed.send("a.test", "id", "https://a.test/?id=2") == "dropped"
    assert stuck.polls == FEED_ATTEMPTS
    assert "dropped https://a.test/?id=2" in caplog.text
    # While the queue stays full, one try each, and a dropped URL does not use up its
    # pattern's share.
    assert feed.send("a.test", "id", "https://a.test/?id=3") == "dropped"
    assert stuck.polls == FEED_ATTEMPTS + 1
    stuck.full_for = 0
    assert feed.send("a.test", "id", "https://a.test/?id=4") == "fed"
    assert feed.send("a.test", "id", "https://a.test/?id=5") is None  # its share is used
    assert feed.congested is False


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


@pytest.mark.kafka
@pytest.mark.timeout(120)
def test_unlearned_patterns_are_fed_to_the_raw_topic(
    maps_topic: tuple[str, Callable[[DomainMap | None], None]], tmp_path: Path
) -> None:
    bootstrap, topic = maps_topic[0].split("|")  # an empty topic of our own
    fingerprinter = _fingerprinter(
        [product_map()],
        tmp_path,
        MIQPS_FEED_UNLEARNED=bootstrap,
        MIQPS_RAW_TOPIC=topic,
        MIQPS_FEED_PER_PATTERN=2,
    )
    learned = [f"https://{HOST}/p/1?id={n}&ref=a&sid=1" for n in range(3)]
    unlearned = [f"https://{HOST}/p/1?id={n}&color=red" for n in range(3)]
    unmapped = ["https://other.test/?q=1"]
    for url in learned + unlearned + unmapped:
        fingerprinter.fingerprint(Request(url))
    fingerprinter.close()
    with TopicReader(StreamSettings(bootstrap_servers=bootstrap), topic) as reader:
        assert reader.wait_for(3, 30)
        reader.poll(1.0)
        sent = sorted(value.decode() for _, value, _ in reader.records if value)
    assert sent == sorted(unlearned[:2] + unmapped)
    stats = fingerprinter.stats
    assert stats is not None and stats.get_value("miqps/unlearned_fed") == 3
