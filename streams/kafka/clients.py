"""How every stream component uses its confluent-kafka clients.

- :func:`produce`: one record, retrying a full local queue (``BufferError``) for a bounded
  time, then :class:`ProduceBlocked`.
- :class:`DeliveryReports`: the producer's ``on_delivery`` callback, keeping every error.
- :func:`checkpoint`: the at-least-once step at the end of a batch: flush the producer,
  check that everything was delivered, and only then store the consumer's offsets.
- :func:`read_to_end`: every record of a topic from the beginning (or from where the
  caller says, per partition) up to where it ended when the read began (``miqps maps``,
  the map feed's catch-up).
- :func:`read_partition`: the records of one partition from its beginning up to a given
  offset (the restore of an observations partition, up to the group's committed offset).
- :func:`leave_and_close`: close a group member without a rebalance callback inside
  ``close()``, where librdkafka can block for ever while the callback holds the GIL.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from streams.kafka.admin import consumer_config
from streams.kafka.partitioning import key_partition
from streams.settings import Settings

log = logging.getLogger(__name__)

PRODUCE_BLOCKED_SECONDS = 30.0
"""How long :func:`produce` retries a full local queue before it gives up."""
DELIVERY_WAIT_SECONDS = 10.0
STOPPING_FLUSH_SECONDS = 2.0
BLOCKED_POLL_SECONDS = 0.05
LEAVE_GROUP_SECONDS = 10.0
"""How long :func:`leave_and_close` serves the revocation before it closes anyway."""


class ProduceBlocked(RuntimeError):
    """The producer's local queue stayed full: the broker does not take what it is sent."""


class DeliveryFailed(RuntimeError):
    """The broker refused records of the batch for good."""


class StoppedBeforeDelivery(Exception):
    """Asked to stop while records of the current batch were still undelivered."""


Headers = list[tuple[str, str | bytes | None]]


class Producing(Protocol):
    def produce(
        self,
        topic: str,
        value: bytes | None = ...,
        key: bytes | None = ...,
        partition: int = ...,
        *,
        timestamp: int = ...,
        headers: Headers | None = ...,
    ) -> None: ...

    def poll(self, timeout: float = ...) -> int: ...

    def flush(self, timeout: float = ...) -> int: ...


class StoringOffsets(Protocol):
    def store_offsets(
        self, message: Message | None = ..., offsets: list[TopicPartition] | None = ...
    ) -> None: ...


def produce(
    producer: Producing,
    topic: str,
    value: bytes | None,
    key: bytes | None = None,
    partition: int = -1,
    *,
    blocked_for: float = PRODUCE_BLOCKED_SECONDS,
    headers: Headers | None = None,
    timestamp_ms: int | None = None,
) -> None:
    """Queue one record (with ``headers`` and the time ``timestamp_ms``, if given); while
    the local queue is full, serve delivery reports and retry, for at most ``blocked_for``
    seconds, then raise :class:`ProduceBlocked`."""
    extra: dict[str, Any] = {}
    if headers:
        extra["headers"] = headers
    if timestamp_ms is not None:
        extra["timestamp"] = timestamp_ms
    try:
        producer.produce(topic, value, key, partition, **extra)
        return
    except BufferError:
        deadline = time.monotonic() + blocked_for
    while True:
        producer.poll(BLOCKED_POLL_SECONDS)
        try:
            producer.produce(topic, value, key, partition, **extra)
            return
        except BufferError:
            if time.monotonic() >= deadline:
                raise ProduceBlocked(
                    f"{topic}: the producer's queue stayed full for {blocked_for:g}s "
                    f"(is the broker reachable?)"
                ) from None


class DeliveryReports:
    """A producer's ``on_delivery`` callback that keeps the errors it reports."""

    def __init__(self) -> None:
        self.errors: list[KafkaError] = []

    def __call__(self, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            self.errors.append(error)

    def raise_errors(self) -> None:
        if self.errors:
            raise DeliveryFailed(f"{len(self.errors)} records not delivered: {self.errors[:3]}")


def checkpoint(
    producer: Producing,
    consumer: StoringOffsets,
    offsets: Mapping[tuple[str, int], int],
    reports: DeliveryReports,
    stopping: threading.Event,
    *,
    wait: float = DELIVERY_WAIT_SECONDS,
    stopping_wait: float = STOPPING_FLUSH_SECONDS,
) -> bool:
    """End a batch at least once: flush ``producer`` (waiting as long as it takes, unless
    ``stopping`` is set), raise :class:`DeliveryFailed` if ``reports`` holds an error, and
    only then store ``offsets`` ((topic, partition) -> next offset) for the consumer to
    commit. Returns whether they were stored: a store refused (the partitions were
    revoked) only means their records are delivered again.

    Raises :class:`StoppedBeforeDelivery` when stopping with records still undelivered.
    """
    while pending := producer.flush(stopping_wait if stopping.is_set() else wait):
        if stopping.is_set():
            if reports.errors:
                break
            raise StoppedBeforeDelivery(pending)
        log.warning("still waiting for %d deliveries", pending)
    reports.raise_errors()
    if not offsets:
        return True
    partitions = [
        TopicPartition(topic, partition, offset) for (topic, partition), offset in offsets.items()
    ]
    try:
        consumer.store_offsets(offsets=partitions)
    except KafkaException as error:
        log.info("offsets not stored (partitions revoked?); their records come again: %s", error)
        return False
    return True


StartAt = Callable[[int, int, int], int | None]
"""Where to read a partition from, given (partition, low watermark, high watermark): an
offset between the two, or None for its beginning."""


def read_to_end(
    consumer: Consumer,
    topic: str,
    *,
    timeout: float | None = None,
    stopping: threading.Event | None = None,
    key: bytes | None = None,
    start_at: StartAt | None = None,
) -> Iterator[Message]:
    """Assign every partition of ``topic`` (only the one ``key`` goes to, if given) to
    ``consumer`` from the beginning (or where ``start_at`` says) and yield its records up
    to where each partition ended when the read began (records with an error are logged
    and skipped). The consumer stays assigned, so the caller can go on following the topic.
    Ends early when ``stopping`` is set; raises :class:`TimeoutError` when ``timeout``
    seconds pass without a record (None: no limit), so a large topic read at any pace is
    read whole."""
    metadata_wait = 30.0 if timeout is None else timeout
    remaining = _assign(consumer, topic, metadata_wait, key, start_at)
    deadline = None if timeout is None else time.monotonic() + timeout
    while remaining and not (stopping is not None and stopping.is_set()):
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"{topic}: no record for {timeout:g}s before its end")
        messages = consumer.consume(500, 0.2)
        if messages and timeout is not None:
            deadline = time.monotonic() + timeout
        for message in messages:
            if message.error() is not None:
                log.warning("%s: %s", topic, message.error())
                continue
            yield message
            partition = message.partition() or 0
            end = remaining.get(partition)
            if end is not None and (message.offset() or 0) + 1 >= end:
                del remaining[partition]
        if not messages:
            _drop_reached(consumer, topic, remaining)


def read_partition(
    consumer: Consumer,
    topic: str,
    partition: int,
    end: int,
    *,
    timeout: float = 60.0,
    stopping: Callable[[], bool] | None = None,
) -> Iterator[Message]:
    """Assign ``topic[partition]`` alone to ``consumer`` from its beginning (what retention
    still holds) and yield its records before offset ``end``, or before where the partition
    ends now if that is sooner (records with an error are logged and skipped). Ends early
    when ``stopping()`` says so; raises :class:`TimeoutError` when ``timeout`` seconds pass
    without a record before the end."""
    where = TopicPartition(topic, partition)
    low, high = consumer.get_watermark_offsets(where, timeout=timeout)
    end = min(end, high)
    if end <= low:
        return
    consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
    deadline = time.monotonic() + timeout
    try:
        while not (stopping is not None and stopping()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}[{partition}]: no record for {timeout:g}s before {end}")
            messages = consumer.consume(500, 0.2)
            if messages:
                deadline = time.monotonic() + timeout
            for message in messages:
                if message.error() is not None:
                    log.warning("%s[%d]: %s", topic, partition, message.error())
                    continue
                offset = message.offset() or 0
                if offset >= end:
                    return
                yield message
                if offset + 1 >= end:
                    return
            if not messages:
                # Offsets can have gaps (transaction markers, compaction).
                [position] = consumer.position([where])
                if position.offset >= end:
                    return
    finally:
        consumer.unassign()


def read_compacted(
    settings: Settings, topic: str, timeout: float = 30.0, key: bytes | None = None
) -> Iterator[tuple[bytes | None, bytes | None]]:
    """Every (key, value) of ``topic`` from the beginning to the end as of now (of the
    partition ``key`` goes to only, if given: the other keys there come too)."""
    consumer = Consumer(
        consumer_config(settings, f"miqps-read-{uuid.uuid4().hex}", **{"enable.auto.commit": False})
    )
    try:
        for message in read_to_end(consumer, topic, timeout=timeout, key=key):
            yield message.key(), message.value()
    finally:
        consumer.close()


def _assign(
    consumer: Consumer,
    topic: str,
    timeout: float,
    key: bytes | None = None,
    start_at: StartAt | None = None,
) -> dict[int, int]:
    """Assign every partition of ``topic`` (only ``key``'s, if given) from its beginning,
    or from where ``start_at`` says; return the high watermark of each partition that
    holds anything to read."""
    metadata = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
    if metadata is None or metadata.error is not None or not metadata.partitions:
        raise RuntimeError(f"topic {topic} does not exist")
    partitions = sorted(metadata.partitions)
    if key is not None:
        partitions = [key_partition(key, len(partitions))]
    assigned: list[TopicPartition] = []
    pending: dict[int, int] = {}
    for partition in partitions:
        low, high = consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=timeout
        )
        start = start_at(partition, low, high) if start_at is not None else None
        assigned.append(
            TopicPartition(topic, partition, OFFSET_BEGINNING if start is None else start)
        )
        if high > (low if start is None else start):
            pending[partition] = high
    consumer.assign(assigned)
    return pending


def _drop_reached(consumer: Consumer, topic: str, remaining: dict[int, int]) -> None:
    """Forget the partitions whose position reached their end: offsets can have gaps."""
    positions = consumer.position([TopicPartition(topic, p) for p in remaining])
    for position in positions:
        if position.offset >= 0 and position.offset >= remaining.get(position.partition, 0):
            remaining.pop(position.partition, None)


def leave_and_close(consumer: Consumer, timeout: float = LEAVE_GROUP_SECONDS) -> bool:
    """Close a consumer that subscribed with rebalance callbacks, without running one of
    them inside ``close()``.

    confluent-kafka calls ``rd_kafka_assign`` from its rebalance callback while it holds
    the GIL (confluent-kafka-python#1023), and inside ``rd_kafka_consumer_close`` that call
    can block for ever (confluentinc/librdkafka#4884, #4527): the whole process freezes, no
    Python thread runs, not even a watchdog. So: unsubscribe, and serve the revocation from
    ``consume`` (where ``rd_kafka_assign`` returns) until nothing is assigned; only then
    close, with no partition left to revoke. Messages read meanwhile are dropped unseen:
    their offsets were never stored, so they are read again by the partitions' next owner.

    Returns whether the revocation was served within ``timeout`` seconds (it is not when
    the broker is unreachable; ``close`` then runs anyway, as before)."""
    left = False
    try:
        consumer.unsubscribe()
        deadline = time.monotonic() + timeout
        while consumer.assignment():
            if time.monotonic() > deadline:
                break
            consumer.consume(500, 0.1)
        else:
            left = True
    except KafkaException as error:
        log.warning("consumer: leaving the group failed (%s); closing anyway", error)
    if not left:
        log.warning(
            "consumer: partitions still assigned %gs after unsubscribing; closing anyway", timeout
        )
    consumer.close()
    return left
