"""Records written together: :class:`TransactionalWriter` on the real broker, read back by
``read_committed`` consumers (librdkafka's default, and every reader of the project's)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from streams.kafka.admin import producer_config
from streams.kafka.clients import read_compacted
from streams.kafka.partitioning import key_partition
from streams.kafka.transactions import (
    Record,
    TransactionalWriter,
    transactional_producer_config,
    worker_transactional_id,
)
from streams.settings import Settings
from testkit.tools import set_max_message_bytes

pytestmark = [pytest.mark.timeout(120)]

REFUSED_BYTES = 4096
"""The ``max.message.bytes`` of the topic that refuses: below the producer's own limit, so
the broker refuses the record, not the client."""


@pytest.fixture
def settings(bootstrap: str) -> Iterator[Settings]:
    settings = Settings.from_env({"KAFKA_BOOTSTRAP_SERVERS": bootstrap})
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    prefix = f"txn-{uuid.uuid4().hex[:8]}"
    topics = {
        f"{prefix}.maps": NewTopic(f"{prefix}.maps", 2, 1),
        f"{prefix}.history": NewTopic(f"{prefix}.history", 2, 1),
        f"{prefix}.small": NewTopic(
            f"{prefix}.small", 1, 1, config={"max.message.bytes": str(REFUSED_BYTES)}
        ),
    }
    for future in admin.create_topics(list(topics.values())).values():
        future.result()
    yield settings.with_overrides(app_id=prefix)
    for future in admin.delete_topics(list(topics)).values():
        future.result()


def visible(settings: Settings, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    return list(read_compacted(settings, topic, timeout=30.0))


def publication(settings: Settings, refused: bool) -> list[Record]:
    prefix = settings.app_id
    audit = b"x" * (4 * REFUSED_BYTES if refused else 100)
    return [
        (f"{prefix}.history", b"shop.example", b"version 2"),
        (f"{prefix}.maps", b"shop.example", b"map 2"),
        (f"{prefix}.small", b"shop.example", audit),
    ]


@pytest.mark.kafka
def test_a_writer_commits_a_publication_to_several_topics(settings: Settings) -> None:
    writer = TransactionalWriter(producer_config(settings), settings.app_id)
    try:
        writer.write(publication(settings, refused=False))
        writer.write(publication(settings, refused=False))
    finally:
        writer.close()
    prefix = settings.app_id
    assert visible(settings, f"{prefix}.history") == [(b"shop.example", b"version 2")] * 2
    assert visible(settings, f"{prefix}.maps") == [(b"shop.example", b"map 2")] * 2
    assert len(visible(settings, f"{prefix}.small")) == 2


@pytest.mark.kafka
def test_a_record_the_broker_refuses_leaves_none_of_its_publication_visible(
    settings: Settings,
) -> None:
    writer = TransactionalWriter(producer_config(settings), settings.app_id, patience=2.0)
    try:
        with pytest.raises(KafkaException):
            writer.write(publication(settings, refused=True))
        writer.write(publication(settings, refused=False))  # the writer goes on
    finally:
        writer.close()
    prefix = settings.app_id
    assert visible(settings, f"{prefix}.maps") == [(b"shop.example", b"map 2")]
    assert visible(settings, f"{prefix}.history") == [(b"shop.example", b"version 2")]


@pytest.mark.kafka
def test_within_its_patience_a_writer_writes_a_refused_publication_again_once_it_is_taken(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """A refusal that outlasts several attempts (a broker restarting, say) but not the
    writer's patience: the publication is written once, when it is taken."""
    prefix = settings.app_id
    writer = TransactionalWriter(producer_config(settings), prefix, 10.0, patience=60.0)
    failures: list[BaseException] = []

    def write() -> None:
        try:
            writer.write(publication(settings, refused=True))
        except BaseException as error:
            failures.append(error)

    thread = threading.Thread(target=write)
    try:
        thread.start()
        deadline = time.monotonic() + 30
        while "writing it again" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "writing it again" in caplog.text, "the refusal was not retried"
        time.sleep(8.0)  # several attempts, all refused
        assert thread.is_alive(), f"the writer gave up: {failures}"
        set_max_message_bytes(settings, f"{prefix}.small", 16 * REFUSED_BYTES)
        thread.join(60)
    finally:
        thread.join(60)
        writer.close()
    assert failures == []
    assert visible(settings, f"{prefix}.maps") == [(b"shop.example", b"map 2")]
    assert visible(settings, f"{prefix}.history") == [(b"shop.example", b"version 2")]
    assert len(visible(settings, f"{prefix}.small")) == 1


@pytest.mark.kafka
def test_without_a_transaction_the_same_refusal_leaves_a_map_without_its_audit(
    settings: Settings,
) -> None:
    """What the writer prevents: records sent one by one are visible one by one."""
    producer = Producer(producer_config(settings))
    for topic, key, value in publication(settings, refused=True):
        producer.produce(topic, value, key)
    assert producer.flush(30) == 0
    prefix = settings.app_id
    assert visible(settings, f"{prefix}.maps") == [(b"shop.example", b"map 2")]
    assert visible(settings, f"{prefix}.small") == []


def test_a_writer_without_a_broker_fails_within_its_timeout() -> None:
    writer = TransactionalWriter({"bootstrap.servers": "127.0.0.1:1", "log_level": 0}, "t", 2.0)
    started = time.monotonic()
    with pytest.raises(KafkaException):
        writer.write([("t.maps", b"k", b"v")])
    assert time.monotonic() - started < 10.0


@pytest.mark.kafka
def test_a_worker_restarted_on_its_state_fences_the_transaction_its_predecessor_left_open(
    settings: Settings, tmp_path: Path
) -> None:
    """A worker killed inside a transaction leaves it open; the worker started again on the
    same state directory takes the same transactional id, so its first transaction aborts
    the one left open at once: a ``read_committed`` reader sees the new records right
    away, not after ``transaction.timeout.ms`` (10 s), and never the old ones."""
    worker = settings.with_overrides(state_dir=tmp_path / "state")
    other = settings.with_overrides(state_dir=tmp_path / "other")
    identity = worker_transactional_id(worker, "probe")
    assert identity == worker_transactional_id(worker, "probe")
    assert identity != worker_transactional_id(other, "probe")
    assert identity != worker_transactional_id(worker, "canonicalizer")
    topic = f"{settings.app_id}.maps"
    killed = Producer({**producer_config(settings), **transactional_producer_config(identity)})
    killed.init_transactions(10.0)
    killed.begin_transaction()
    partition = key_partition(b"shop.example", 2)  # the writer's record goes there too
    killed.produce(topic, b"left open", b"shop.example", partition)
    killed.flush(10.0)
    writer = TransactionalWriter(
        producer_config(settings), settings.app_id, transactional_id=identity
    )
    started = time.monotonic()
    try:
        writer.write([(topic, b"shop.example", b"map 3")])
    finally:
        writer.close()
    seen = visible(settings, topic)
    took = time.monotonic() - started
    assert seen == [(b"shop.example", b"map 3")]
    assert took < 5.0, f"the new records were visible only after {took:.1f}s"
