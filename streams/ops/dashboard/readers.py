"""What the dashboard reads, into a :class:`~streams.ops.dashboard.state.DashboardState`.

Each with a consumer of its own (no group, no commits):

- the compacted ``miqps.maps`` through :class:`~streams.maps.feed.MapFeed`;
- ``miqps.map-updates`` from the beginning;
- a tail of ``urls.canonical`` (at most :data:`TAIL_PER_PARTITION` records back per
  partition, then live);
- the high watermarks of ``urls.raw`` and ``urls.canonical`` once a second: URLs in and out
  per second, with no worker involved.

And, when given its URL, the probing worker's metrics endpoint every
:data:`WORKER_METRICS_SECONDS`.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Mapping, Sequence

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Message, TopicPartition

from streams.kafka.admin import consumer_config
from streams.maps.feed import MapFeed
from streams.ops.dashboard.state import DashboardState
from streams.settings import Settings

log = logging.getLogger(__name__)

WORKER_METRICS_SECONDS = 5.0
TAIL_PER_PARTITION = 5000
TICK_SECONDS = 1.0
TOPIC_WAIT_SECONDS = 2.0


class StreamReaders:
    """The dashboard's Kafka side: the map feed, and one thread reading the audit topic,
    the tail of the canonical topic and the watermarks."""

    def __init__(self, settings: Settings, state: DashboardState) -> None:
        self.settings = settings
        self.state = state
        self._stopping = threading.Event()
        self._feed_broken = threading.Event()
        self._feed: MapFeed | None = None
        self._thread = threading.Thread(
            target=self._run, name="miqps-dashboard-readers", daemon=True
        )

    def start(self) -> StreamReaders:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._feed is not None:
            self._feed.stop()
        self._thread.join(10.0)

    def _run(self) -> None:
        try:
            self._follow()
        except BaseException as error:
            log.exception("dashboard: reading Kafka failed")
            self.state.status = f"reading Kafka failed: {error}"

    def _follow(self) -> None:
        topics = self.settings.topics
        consumer = Consumer(
            consumer_config(
                self.settings,
                f"miqps-dashboard-{uuid.uuid4().hex}",
                **{"enable.auto.commit": False, "fetch.wait.max.ms": 100},
            )
        )
        try:
            partitions = self._wait_for_topics(consumer)
            if partitions is None:
                return
            self._feed = MapFeed(
                self.settings, self.state.maps, self._feed_failed, dead_letter=_no_dead_letters
            )
            self._feed.start()
            # The tail is canonicalized as it arrives: with every map, not the first few.
            self.state.status = "reading the maps"
            while not self._feed.wait_ready(0.2):
                if self._stopping.is_set() or self._feed_broken.is_set():
                    return
            consumer.assign(self._start_positions(consumer, partitions))
            self.state.status = "live"
            handlers: dict[str, Callable[[bytes | None], None]] = {
                topics.canonical: self.state.add_canonical,
                topics.map_updates: self.state.add_map_update,
            }
            next_tick = time.monotonic()
            while not self._stopping.is_set():
                for message in consumer.consume(500, 0.2):
                    self._handle(message, handlers)
                if time.monotonic() >= next_tick:
                    next_tick += TICK_SECONDS
                    self.state.tick(
                        time.time(),
                        _high_total(consumer, topics.raw, partitions[topics.raw]),
                        _high_total(consumer, topics.canonical, partitions[topics.canonical]),
                    )
        finally:
            consumer.close()

    def _feed_failed(self, error: BaseException) -> None:
        self._feed_broken.set()
        self.state.status = f"following the maps failed: {error}"

    def _wait_for_topics(self, consumer: Consumer) -> dict[str, list[int]] | None:
        """The partitions of each topic read, once they all exist (a dashboard may start
        before the first worker creates them); None when asked to stop first."""
        topics = self.settings.topics
        wanted = (topics.maps, topics.map_updates, topics.raw, topics.canonical)
        while not self._stopping.is_set():
            try:
                metadata = consumer.list_topics(timeout=10.0).topics
                missing = [
                    name for name in wanted if name not in metadata or not metadata[name].partitions
                ]
                if not missing:
                    return {name: sorted(metadata[name].partitions) for name in wanted}
                self.state.status = f"waiting for the topics {', '.join(missing)}"
            except KafkaException as error:
                self.state.status = f"waiting for the broker: {error}"
            self._stopping.wait(TOPIC_WAIT_SECONDS)
        return None

    def _start_positions(
        self, consumer: Consumer, partitions: dict[str, list[int]]
    ) -> list[TopicPartition]:
        topics = self.settings.topics
        positions = [
            TopicPartition(topics.map_updates, partition, OFFSET_BEGINNING)
            for partition in partitions[topics.map_updates]
        ]
        for partition in partitions[topics.canonical]:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topics.canonical, partition), timeout=10.0
            )
            positions.append(
                TopicPartition(topics.canonical, partition, max(low, high - TAIL_PER_PARTITION))
            )
        return positions

    @staticmethod
    def _handle(
        message: Message,
        handlers: Mapping[str, Callable[[bytes | None], None]],
    ) -> None:
        if message.error() is not None:
            log.warning("dashboard: %s", message.error())
            return
        handler = handlers.get(message.topic() or "")
        if handler is not None:
            handler(message.value())


def _no_dead_letters(key: bytes | None, record: bytes) -> None:
    """The dashboard only reads: the workers' own feeds dead-letter invalid maps."""


def _high_total(consumer: Consumer, topic: str, partitions: Sequence[int]) -> int:
    total = 0
    for partition in partitions:
        _, high = consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=5.0, cached=False
        )
        total += max(high, 0)
    return total


def follow_worker_metrics(state: DashboardState, url: str, stopping: threading.Event) -> None:
    """Read the worker's metrics every few seconds; a failed read keeps what was shown."""
    warned = False
    while not stopping.is_set():
        try:
            with urllib.request.urlopen(url, timeout=WORKER_METRICS_SECONDS) as answer:
                state.add_worker_metrics(answer.read(4 * 1024 * 1024).decode("utf-8", "replace"))
            warned = False
        except (OSError, ValueError) as error:
            if not warned:
                log.warning("dashboard: cannot read the worker's metrics at %s: %s", url, error)
                warned = True
        stopping.wait(WORKER_METRICS_SECONDS)
