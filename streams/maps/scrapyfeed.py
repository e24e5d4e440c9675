"""The Scrapy add-on's Kafka side, :class:`KafkaMapFeed` (the add-on's default
``MIQPS_MAP_FEED``): the maps topic followed (``MIQPS_KAFKA_BOOTSTRAP``) and the feed of
unlearned URLs to the raw topic (``MIQPS_FEED_UNLEARNED``). :mod:`miqps.scrapy` loads it
only when one of those is set."""

from __future__ import annotations

import logging
from typing import Protocol

from confluent_kafka import Producer

from miqps.canonical import Canonicalizer
from streams.maps.follow import from_kafka

__all__ = ["FEED_ATTEMPTS", "FeedProducer", "KafkaMapFeed", "UnlearnedFeed"]

FEED_ATTEMPTS = 3
FEED_POLL_SECONDS = 0.05

logger = logging.getLogger(__name__)


class FeedProducer(Protocol):
    """What :class:`UnlearnedFeed` needs of a ``confluent_kafka.Producer``."""

    def produce(self, topic: str, value: bytes, key: bytes) -> None: ...

    def poll(self, timeout: float) -> int: ...

    def flush(self, timeout: float) -> int: ...


class UnlearnedFeed:
    """Sends URLs of unlearned patterns to the stream's raw topic, a few per pattern."""

    def __init__(self, producer: FeedProducer, topic: str, per_pattern: int) -> None:
        self.producer = producer
        self.topic = topic
        self.per_pattern = per_pattern
        self.sent: dict[tuple[str, str], int] = {}
        self.congested = False
        """The last URL was dropped: try the next one once, without waiting."""

    @classmethod
    def connect(cls, bootstrap: str, topic: str, per_pattern: int) -> UnlearnedFeed:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 100, "log_level": 3})
        return cls(producer, topic, per_pattern)

    def send(self, domain: str, pattern: str, url: str) -> str | None:
        """Send ``url`` unless its pattern had its share: "fed" when it was queued,
        "dropped" when the producer's queue stayed full, None when not sent."""
        key = (domain, pattern)
        count = self.sent.get(key, 0)
        if count >= self.per_pattern:
            return None
        for attempt in range(1 if self.congested else FEED_ATTEMPTS):
            try:
                self.producer.produce(self.topic, url.encode(), domain.encode())
            except BufferError:
                # The local queue is full: let delivery drain it, a little.
                self.producer.poll(FEED_POLL_SECONDS if attempt and not self.congested else 0)
                continue
            self.producer.poll(0)
            self.sent[key] = count + 1
            self.congested = False
            return "fed"
        # Learning can wait, crawling cannot: the feed is advisory.
        logger.log(
            logging.DEBUG if self.congested else logging.WARNING,
            "miqps: the unlearned-URL feed's queue is full; dropped %s",
            url,
        )
        self.congested = True
        return "dropped"

    def close(self) -> None:
        self.producer.flush(10)


class KafkaMapFeed:
    """The add-on's Kafka side (:class:`miqps.scrapy.MapFeed`)."""

    def follow(self, bootstrap: str, topic: str, use_prior: bool) -> Canonicalizer:
        return from_kafka(bootstrap, topic=topic, use_prior=use_prior)

    def unlearned(self, bootstrap: str, topic: str, per_pattern: int) -> UnlearnedFeed:
        return UnlearnedFeed.connect(bootstrap, topic, per_pattern)
