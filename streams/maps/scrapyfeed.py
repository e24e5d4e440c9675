"""The Scrapy add-on's Kafka side, :class:`KafkaMapFeed` (the add-on's default
``MIQPS_MAP_FEED``): the maps topic followed (``MIQPS_KAFKA_BOOTSTRAP``), the feed of
unlearned URLs to the raw topic (``MIQPS_FEED_UNLEARNED``) and the feed of the crawl's
pages to the observations topic (``MIQPS_FEED_OBSERVATIONS``). :mod:`miqps.scrapy` loads it
only when one of those is set."""

from __future__ import annotations

import logging
from typing import Protocol

from confluent_kafka import Producer

from miqps.canonical import Canonicalizer
from streams.maps.follow import from_kafka

__all__ = [
    "FEED_ATTEMPTS",
    "AdvisoryFeed",
    "FeedProducer",
    "KafkaMapFeed",
    "ObservationFeed",
    "UnlearnedFeed",
]

FEED_ATTEMPTS = 3
FEED_POLL_SECONDS = 0.05

logger = logging.getLogger(__name__)


class FeedProducer(Protocol):
    """What :class:`UnlearnedFeed` needs of a ``confluent_kafka.Producer``."""

    def produce(self, topic: str, value: bytes, key: bytes) -> None: ...

    def poll(self, timeout: float) -> int: ...

    def flush(self, timeout: float) -> int: ...


class AdvisoryFeed:
    """Sends records to one topic without ever holding the crawl up: learning can wait,
    crawling cannot. When the producer's local queue stays full after a few polls, the
    record is dropped and logged; while it stays full, each further record gets one try."""

    def __init__(self, producer: FeedProducer, topic: str) -> None:
        self.producer = producer
        self.topic = topic
        self.congested = False
        """The last record was dropped: try the next one once, without waiting."""

    @classmethod
    def producer_for(cls, bootstrap: str) -> Producer:
        return Producer({"bootstrap.servers": bootstrap, "linger.ms": 100, "log_level": 3})

    def offer(self, value: bytes, key: bytes, what: str) -> bool:
        """Queue ``value``; False when it was dropped (``what`` names it in the log)."""
        for attempt in range(1 if self.congested else FEED_ATTEMPTS):
            try:
                self.producer.produce(self.topic, value, key)
            except BufferError:
                # The local queue is full: let delivery drain it, a little.
                self.producer.poll(FEED_POLL_SECONDS if attempt and not self.congested else 0)
                continue
            self.producer.poll(0)
            self.congested = False
            return True
        logger.log(
            logging.DEBUG if self.congested else logging.WARNING,
            "miqps: the feed to %s has a full queue; dropped %s",
            self.topic,
            what,
        )
        self.congested = True
        return False

    def close(self) -> None:
        self.producer.flush(10)


class UnlearnedFeed(AdvisoryFeed):
    """Sends URLs of unlearned patterns to the stream's raw topic, a few per pattern."""

    def __init__(self, producer: FeedProducer, topic: str, per_pattern: int) -> None:
        super().__init__(producer, topic)
        self.per_pattern = per_pattern
        self.sent: dict[tuple[str, str], int] = {}

    @classmethod
    def connect(cls, bootstrap: str, topic: str, per_pattern: int) -> UnlearnedFeed:
        return cls(cls.producer_for(bootstrap), topic, per_pattern)

    def send(self, domain: str, pattern: str, url: str) -> str | None:
        """Send ``url`` unless its pattern had its share: "fed" when it was queued,
        "dropped" when the producer's queue stayed full, None when not sent."""
        key = (domain, pattern)
        count = self.sent.get(key, 0)
        if count >= self.per_pattern:
            return None
        if not self.offer(url.encode(), domain.encode(), url):
            return "dropped"
        self.sent[key] = count + 1
        return "fed"


class ObservationFeed(AdvisoryFeed):
    """Sends the observations of the pages a crawl fetched to the stream's observations
    topic, keyed by domain."""

    @classmethod
    def connect(cls, bootstrap: str, topic: str) -> ObservationFeed:
        return cls(cls.producer_for(bootstrap), topic)

    def send(self, domain: str, url: str, observation: bytes) -> str:
        """ "fed" when ``observation`` (of ``url``) was queued, "dropped" when not."""
        return "fed" if self.offer(observation, domain.encode(), url) else "dropped"


class KafkaMapFeed:
    """The add-on's Kafka side (:class:`miqps.scrapy.MapFeed`)."""

    def follow(self, bootstrap: str, topic: str, use_prior: bool) -> Canonicalizer:
        return from_kafka(bootstrap, topic=topic, use_prior=use_prior)

    def unlearned(self, bootstrap: str, topic: str, per_pattern: int) -> UnlearnedFeed:
        return UnlearnedFeed.connect(bootstrap, topic, per_pattern)

    def observations(self, bootstrap: str, topic: str) -> ObservationFeed:
        return ObservationFeed.connect(bootstrap, topic)
