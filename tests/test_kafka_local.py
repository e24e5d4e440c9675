"""The local test broker (scripts/kafka-local) is up and does a real round trip.

Needs the broker already running: `scripts/kafka-local start` (the CI script does it).
"""

from __future__ import annotations

import os
import string
import subprocess
import time
import uuid
from pathlib import Path

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402
from confluent_kafka.admin._config import ConfigResource  # noqa: E402
from confluent_kafka.cimpl import NewTopic  # noqa: E402

from testkit.localbroker import LocalBroker, maven_cache  # noqa: E402

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "kafka-local"
BOOTSTRAP = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
BASE64URL = set(string.ascii_letters + string.digits + "-_")


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


def _run_script(broker: LocalBroker, *command: str) -> subprocess.CompletedProcess[str]:
    env = dict(
        os.environ,
        KAFKA_LOCAL_PORT=str(broker.port),
        KAFKA_LOCAL_CONTROLLER_PORT=str(broker.controller_port),
        KAFKA_LOCAL_HOME=str(broker.home),
        KAFKA_LOCAL_M2=str(maven_cache()),
    )
    return subprocess.run(
        [str(SCRIPT), "--brokers", str(broker.brokers), *command],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env=env,
    )


def _partition_replicas(bootstrap: str, topic: str) -> list[tuple[list[int], list[int]]]:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions.values()
    return [(sorted(p.replicas), sorted(p.isrs)) for p in partitions]


def _produce_all_acks(bootstrap: str, topic: str, count: int) -> int:
    """How many of ``count`` records were acknowledged by every in-sync replica."""
    delivered = 0

    def on_delivery(error: object, _message: object) -> None:
        nonlocal delivered
        delivered += error is None

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "message.timeout.ms": 30_000,
            "log_level": 0,
        }
    )
    for number in range(count):
        producer.produce(topic, str(number).encode(), on_delivery=on_delivery)
    producer.flush(40)
    return delivered


@pytest.mark.cluster
def test_cluster_topics_are_replicated_on_three_brokers_with_two_in_sync(
    cluster: LocalBroker,
) -> None:
    status = _run_script(cluster, "status")
    assert status.returncode == 0, status.stdout + status.stderr
    assert [line.split(":")[0] for line in status.stdout.splitlines()] == [
        "node 1",
        "node 2",
        "node 3",
    ]
    topic = f"test.cluster.auto.{uuid.uuid4().hex[:12]}"
    assert _produce_all_acks(cluster.bootstrap, topic, 10) == 10
    assert _partition_replicas(cluster.bootstrap, topic) == [([1, 2, 3], [1, 2, 3])]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
    resource = ConfigResource("topic", topic)
    config = admin.describe_configs([resource])[resource].result(timeout=30)
    assert config["min.insync.replicas"].value == "2"


@pytest.mark.cluster
def test_a_killed_node_is_reported_and_rejoins_after_a_restart(cluster: LocalBroker) -> None:
    topic = f"test.cluster.kill.{uuid.uuid4().hex[:12]}"
    assert _produce_all_acks(cluster.bootstrap, topic, 10) == 10
    killed = _run_script(cluster, "kill", "2")
    try:
        assert killed.returncode == 0, killed.stderr
        status = _run_script(cluster, "status")
        assert status.returncode == 1
        assert "node 2: not running" in status.stdout, status.stdout
        assert _run_script(cluster, "status", "1").returncode == 0
        # Two replicas of three are still in sync: writes that need min.insync.replicas go on.
        assert _produce_all_acks(cluster.bootstrap, topic, 100) == 100
    finally:
        cluster.start_node(2)
    deadline = time.monotonic() + 60
    while _partition_replicas(cluster.bootstrap, topic) != [([1, 2, 3], [1, 2, 3])]:
        assert time.monotonic() < deadline, _partition_replicas(cluster.bootstrap, topic)
        time.sleep(0.5)


@pytest.mark.cluster
def test_a_node_outside_the_cluster_is_refused(cluster: LocalBroker) -> None:
    done = _run_script(cluster, "kill", "4")
    assert done.returncode != 0
    assert "node must be 1..3, got '4'" in done.stderr


def test_generated_cluster_ids_are_kafka_uuids_that_no_tool_reads_as_an_option() -> None:
    """kafka-storage takes ``-t <id>``: an id starting with "-" (1 draw in 64) would be read as
    an option and formatting would fail."""
    body = SCRIPT.read_text("utf-8").split("\nnew_cluster_id() {\n", 1)[1].split("\n}\n", 1)[0]
    drawn = subprocess.run(
        [
            "bash",
            "-c",
            f"new_cluster_id() {{\n{body}\n}}\nfor _ in $(seq 640); do new_cluster_id; done",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert len(drawn) == 640
    assert all(len(cluster_id) == 22 for cluster_id in drawn), drawn
    assert all(set(cluster_id) <= BASE64URL for cluster_id in drawn), drawn
    assert not [cluster_id for cluster_id in drawn if cluster_id.startswith("-")]
