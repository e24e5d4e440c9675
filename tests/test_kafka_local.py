"""The local test broker (scripts/kafka-local) is up and does a real round trip.

Needs the broker already running: `scripts/kafka-local start` (the CI script does it).
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402
from confluent_kafka.cimpl import NewTopic  # noqa: E402

pytestmark = pytest.mark.kafka

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "kafka-local"
BOOTSTRAP = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")


@pytest.fixture(scope="module")
def admin() -> AdminClient:
    client = AdminClient({"bootstrap.servers": BOOTSTRAP, "log_level": 0})
    try:
        client.list_topics(timeout=10)
    except Exception as exc:
        pytest.fail(f"no Kafka broker at {BOOTSTRAP} (run scripts/kafka-local start): {exc}")
    return client


def _round_trip(topic: str) -> tuple[bytes | None, bytes | None]:
    producer = Producer({"bootstrap.servers": BOOTSTRAP, "acks": "all"})
    producer.produce(topic, key=b"example.com", value=b"https://example.com/?a=1")
    assert producer.flush(30) == 0, "message not delivered"

    consumer = Consumer(
        {
            "bootstrap.servers": BOOTSTRAP,
            "group.id": f"test-kafka-local-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            consumer.commit(message=msg, asynchronous=False)
            return msg.key(), msg.value()
    finally:
        consumer.close()
    pytest.fail(f"no message consumed from {topic} within 30 s")


def test_status_reports_running() -> None:
    result = subprocess.run(
        [str(SCRIPT), "status"], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("running"), result.stdout


def test_round_trip_on_created_topic(admin: AdminClient) -> None:
    topic = f"test.kafka-local.{uuid.uuid4().hex[:12]}"
    futures = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    futures[topic].result(timeout=30)
    try:
        assert _round_trip(topic) == (b"example.com", b"https://example.com/?a=1")
    finally:
        admin.delete_topics([topic])[topic].result(timeout=30)


def test_auto_created_topic_has_one_partition(admin: AdminClient) -> None:
    topic = f"test.kafka-local.auto.{uuid.uuid4().hex[:12]}"
    try:
        assert _round_trip(topic) == (b"example.com", b"https://example.com/?a=1")
        partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
        assert len(partitions) == 1
    finally:
        admin.delete_topics([topic])[topic].result(timeout=30)
