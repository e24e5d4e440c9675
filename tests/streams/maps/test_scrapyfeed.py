"""The Scrapy add-on's feed of unlearned URLs to the raw topic (``streams.maps.scrapyfeed``)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest
from scrapy import Request
from scrapy.http import HtmlResponse
from scrapy.utils.test import get_crawler

from miqps.maps import DomainMap
from miqps.observations import read_observation
from miqps.scrapy import CrawlObservations, MapsRequestFingerprinter
from streams.maps.scrapyfeed import FEED_ATTEMPTS, UnlearnedFeed
from streams.settings import Settings as StreamSettings
from testkit.tools import TopicReader
from tests.miqps.test_api import HOST, product_map
from tests.miqps.test_scrapy import maps_fingerprinter
from tests.streams.maps.test_follow import eventually, maps_topic

__all__ = ["maps_topic"]  # a fixture shared with test_mapfollow


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
    with caplog.at_level(logging.WARNING, logger="streams.maps.scrapyfeed"):
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


@pytest.mark.kafka
@pytest.mark.timeout(120)
def test_unlearned_patterns_are_fed_to_the_raw_topic(
    maps_topic: tuple[str, Callable[[DomainMap | None], None]], tmp_path: Path
) -> None:
    bootstrap, topic = maps_topic[0].split("|")  # an empty topic of our own
    fingerprinter = maps_fingerprinter(
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


@pytest.mark.kafka
@pytest.mark.timeout(120)
def test_the_addon_follows_the_maps_topic_live(
    maps_topic: tuple[str, Callable[[DomainMap | None], None]], tmp_path: Path
) -> None:
    where, publish = maps_topic
    bootstrap, topic = where.split("|")
    publish(product_map(1, drop="ref"))
    crawler = get_crawler(
        settings_dict={"MIQPS_KAFKA_BOOTSTRAP": bootstrap, "MIQPS_MAPS_TOPIC": topic}
    )
    fingerprinter = MapsRequestFingerprinter.from_crawler(crawler)
    try:
        url = f"https://{HOST}/p/9?id=7&ref=mail&sid=1"
        assert fingerprinter.canonical_url(Request(url)) == f"https://{HOST}/p/9?id=7"
        publish(product_map(2, drop="id"))  # a newer version: id neutral, ref kept
        assert eventually(
            lambda: fingerprinter.canonical_url(Request(url)) == f"https://{HOST}/p/9?ref=mail"
        )
    finally:
        fingerprinter.close()


@pytest.mark.kafka
@pytest.mark.timeout(120)
def test_the_crawl_s_pages_reach_the_observations_topic(
    maps_topic: tuple[str, Callable[[DomainMap | None], None]],
) -> None:
    bootstrap, topic = maps_topic[0].split("|")  # an empty topic of our own
    crawler = get_crawler(
        settings_dict={"MIQPS_FEED_OBSERVATIONS": bootstrap, "MIQPS_OBSERVATIONS_TOPIC": topic}
    )
    extension = CrawlObservations.from_crawler(crawler)
    urls = [f"https://{HOST}/p/{n}?id={n}&ref=a" for n in range(3)]
    for n, url in enumerate(urls):
        body = f"<html><head><title>Item {n}</title></head><body><h1>Item {n}</h1></body></html>"
        response = HtmlResponse(url, body=body.encode(), headers={"Content-Type": "text/html"})
        extension.response_received(response, Request(url))
    extension.close()
    with TopicReader(StreamSettings(bootstrap_servers=bootstrap), topic) as reader:
        assert reader.wait_for(3, 30)
        records = list(reader.records)
    assert {key for key, _, _ in records} == {HOST.encode()}
    observed = [read_observation(value, max_bytes=1 << 20) for _, value, _ in records]
    assert sorted(observation.url for observation in observed) == sorted(urls)
    assert all(observation.snapshot is not None for observation in observed)
    assert crawler.stats is not None and crawler.stats.get_value("miqps/observations_fed") == 3
