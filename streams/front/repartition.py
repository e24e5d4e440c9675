"""The repartition hop, with ``MIQPS_REPARTITION_INPUT``: ``urls.raw`` (any key) ->
``miqps.urls-by-domain`` (keyed by domain), which the canonicalizer front then reads as
input keyed by domain.

Kafka Streams re-keys a stream the same way (``selectKey`` then a repartition topic). Each
input is written, unchanged, with its URL's domain as the key, to the partition Java's
partitioner gives that key in the domain-keyed topics (:mod:`streams.kafka.copartition`),
so the front that owns a domain's maps meets all of its URLs. The record keeps the input's
headers and timestamp, and gains a :attr:`~streams.messages.Source.HEADER` saying where it
was read, so a dead letter names the original input. An input with no readable URL is not
the hop's to judge: it goes on with its own key, to the partition numbered as its own
(modulo the count), and the front dead-letters it with its reason.

The hop is a :class:`~streams.front.stage.Stage` of its own consumer group
(``<app id>-repartition``), in a thread of the front's process: at least once it stores
an input's offset once the re-keyed record is delivered; exactly once, the re-keyed
records and the input offsets are committed in one transaction, and the front reads them
``read_committed``, so each input is canonicalized once across the hop.

Order: the URLs of one domain read from one input partition keep their order; URLs of one
domain from different input partitions interleave as the hop reads them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Consumer, Message, Producer

from streams.front.stage import Stage, StageCounters
from streams.kafka.clients import Headers, produce
from streams.kafka.partitioning import key_partition
from streams.messages import BadInput, Source, input_domain
from streams.settings import Settings

log = logging.getLogger(__name__)

MAX_REMEMBERED = 100_000
"""Domains whose partition the hop remembers (then it starts over)."""


@dataclass(slots=True)
class RepartitionCounters(StageCounters):
    rekeyed: int = 0
    """Inputs written under their URL's domain."""
    unreadable: int = 0
    """Inputs with no readable URL, passed on under their own key for the front to
    dead-letter."""


class DomainRepartitioner(Stage):
    name = "repartition"

    def __init__(
        self,
        settings: Settings,
        on_fatal: Callable[[BaseException], None] | None = None,
        transactional_id: str | None = None,
    ) -> None:
        self.counters: RepartitionCounters = RepartitionCounters()
        super().__init__(settings, self.counters, on_fatal, transactional_id)
        self.partitions = 0
        """The partition count of the topic written (read when the clients start)."""
        self._partition_of: dict[bytes, int] = {}

    @property
    def group_id(self) -> str:
        return f"{self.settings.app_id}-repartition"

    @property
    def input_topic(self) -> str:
        return self.settings.topics.raw

    def _prepare(self, consumer: Consumer) -> None:
        topic = self.settings.topics.by_domain
        found = consumer.list_topics(topic, timeout=30).topics[topic]
        if found.error is not None or not found.partitions:
            raise RuntimeError(f"{topic}: the repartition topic is missing ({found.error})")
        if len(found.partitions) != self.partitions:
            self.partitions = len(found.partitions)
            self._partition_of.clear()

    def route(
        self, value: bytes | None, key: bytes | None, partition: int
    ) -> tuple[bytes | None, int]:
        """The key and partition of an input read from ``partition`` under ``key``: its
        URL's domain and that domain's partition, or, with no readable URL, its own key
        and ``partition`` modulo the count."""
        try:
            domain = input_domain(value, self.settings.max_message_bytes).encode()
        except BadInput:
            self.counters.unreadable += 1
            return key, partition % self.partitions
        self.counters.rekeyed += 1
        target = self._partition_of.get(domain)
        if target is None:
            if len(self._partition_of) >= MAX_REMEMBERED:
                self._partition_of.clear()
            target = self._partition_of[domain] = key_partition(domain, self.partitions)
        return domain, target

    def _process_batch(
        self, messages: list[Message], producer: Producer, now: float
    ) -> dict[tuple[str, int], int]:
        topic = self.settings.topics.by_domain
        offsets: dict[tuple[str, int], int] = {}
        for message in messages:
            if message.error() is not None:
                self._consumer_error(message)
                continue
            input_topic, partition, offset = (
                message.topic() or "",
                message.partition() or 0,
                message.offset() or 0,
            )
            value = message.value()
            key, target = self.route(value, message.key(), partition)
            timestamp_type, timestamp = message.timestamp()
            timestamp_ms = None if timestamp_type == TIMESTAMP_NOT_AVAILABLE else timestamp
            source = Source(input_topic, partition, offset, timestamp_ms)
            kept = message.headers() or []
            headers: Headers = [
                (name, header)
                for name, header in (kept.items() if isinstance(kept, dict) else kept)
                if name != Source.HEADER
            ]
            headers.append((Source.HEADER, source.to_header()))
            produce(
                producer,
                topic,
                value,
                key,
                target,
                headers=headers,
                timestamp_ms=timestamp_ms,
            )
            offsets[(input_topic, partition)] = offset + 1
        self.counters.consumed += len(messages)
        return offsets

    def _report(self, per_second: float) -> None:
        counters = self.counters
        log.info(
            "repartition: %d in (%.0f/s), %d re-keyed by domain, %d with no readable URL; "
            "seconds consuming %.1f, processing %.1f, delivering %.1f",
            counters.consumed,
            per_second,
            counters.rekeyed,
            counters.unreadable,
            counters.consume_seconds,
            counters.process_seconds,
            counters.deliver_seconds,
        )

    def _report_stopped(self) -> None:
        log.info(
            "repartition stopped after %d messages (%d re-keyed, %d with no readable URL)",
            self.counters.consumed,
            self.counters.rekeyed,
            self.counters.unreadable,
        )
