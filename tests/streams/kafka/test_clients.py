"""The Kafka client layer with fake clients: bounded produce retries, and the batch
checkpoint (flush -> check deliveries -> store offsets) at each step that can fail."""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from streams.kafka import clients
from streams.kafka.clients import (
    DeliveryFailed,
    DeliveryReports,
    Headers,
    ProduceBlocked,
    StoppedBeforeDelivery,
    checkpoint,
    produce,
)

OFFSETS = {("urls.raw", 0): 11, ("urls.raw", 3): 7}


class FakeProducer:
    """Refuses the first ``full_for`` produce calls with BufferError; each flush returns
    the next count of ``pending`` (0 once they run out)."""

    def __init__(self, full_for: int = 0, pending: tuple[int, ...] = ()) -> None:
        self.full_for = full_for
        self.pending = list(pending)
        self.produced: list[tuple[str, bytes | None, bytes | None, int]] = []
        self.polls = 0
        self.flush_timeouts: list[float] = []

    def produce(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        partition: int = -1,
        *,
        timestamp: int = 0,
        headers: Headers | None = None,
    ) -> None:
        if self.full_for > 0:
            self.full_for -= 1
            raise BufferError("Local: Queue full")
        self.produced.append((topic, value, key, partition))

    def poll(self, timeout: float = -1) -> int:
        self.polls += 1
        return 0

    def flush(self, timeout: float = -1) -> int:
        self.flush_timeouts.append(timeout)
        return self.pending.pop(0) if self.pending else 0


class FakeConsumer:
    def __init__(self, refuse: bool = False) -> None:
        self.refuse = refuse
        self.stored: list[TopicPartition] = []

    def store_offsets(
        self, message: Message | None = None, offsets: list[TopicPartition] | None = None
    ) -> None:
        if self.refuse:
            raise KafkaException(KafkaError(KafkaError._STATE, "Erroneous state"))
        self.stored.extend(offsets or [])


def stored(consumer: FakeConsumer) -> dict[tuple[str, int], int]:
    return {(tp.topic, tp.partition): tp.offset for tp in consumer.stored}


def test_produce_retries_a_full_queue_while_serving_delivery_reports() -> None:
    producer = FakeProducer(full_for=3)
    produce(producer, "t", b"v", b"k", 2)
    assert producer.produced == [("t", b"v", b"k", 2)]
    assert producer.polls == 3


def test_produce_gives_up_on_a_queue_that_stays_full_with_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(clients, "BLOCKED_POLL_SECONDS", 0.0)
    producer = FakeProducer(full_for=10**9)
    with pytest.raises(
        ProduceBlocked,
        match=r"urls\.canonical: the producer's queue stayed "
        r"full for 0\.05s",
    ):
        produce(producer, "urls.canonical", b"v", blocked_for=0.05)
    assert producer.produced == [] and producer.polls > 0


def test_a_checkpoint_stores_the_offsets_once_everything_is_delivered() -> None:
    producer, consumer = FakeProducer(pending=(5, 2)), FakeConsumer()
    assert checkpoint(producer, consumer, OFFSETS, DeliveryReports(), threading.Event(), wait=0.01)
    assert len(producer.flush_timeouts) == 3, "flushed until nothing was pending"
    assert stored(consumer) == OFFSETS


def test_a_flush_that_times_out_while_stopping_stores_nothing() -> None:
    stopping = threading.Event()
    stopping.set()
    producer, consumer = FakeProducer(pending=(4,)), FakeConsumer()
    with pytest.raises(StoppedBeforeDelivery):
        checkpoint(producer, consumer, OFFSETS, DeliveryReports(), stopping)
    assert consumer.stored == []


def test_a_delivery_error_stores_nothing_and_says_so() -> None:
    producer, consumer = FakeProducer(), FakeConsumer()
    reports = DeliveryReports()
    reports(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "too large"), None)  # type: ignore[arg-type]
    reports(None, None)  # type: ignore[arg-type]
    with pytest.raises(DeliveryFailed, match="1 records not delivered"):
        checkpoint(producer, consumer, OFFSETS, reports, threading.Event())
    assert consumer.stored == []


def test_a_delivery_error_while_stopping_is_reported_rather_than_waited_on() -> None:
    stopping = threading.Event()
    stopping.set()
    reports = DeliveryReports()
    reports(KafkaError(KafkaError._MSG_TIMED_OUT, "timed out"), None)  # type: ignore[arg-type]
    consumer = FakeConsumer()
    with pytest.raises(DeliveryFailed):
        checkpoint(FakeProducer(pending=(3,)), consumer, OFFSETS, reports, stopping)
    assert consumer.stored == []


def test_a_refused_store_is_no_failure_the_records_only_come_again() -> None:
    consumer = FakeConsumer(refuse=True)
    assert not checkpoint(FakeProducer(), consumer, OFFSETS, DeliveryReports(), threading.Event())
    assert consumer.stored == []


def test_a_batch_without_offsets_still_checks_its_deliveries() -> None:
    reports = DeliveryReports()
    reports(KafkaError(KafkaError._MSG_TIMED_OUT, "timed out"), None)  # type: ignore[arg-type]
    with pytest.raises(DeliveryFailed):
        checkpoint(FakeProducer(), FakeConsumer(), {}, reports, threading.Event())
