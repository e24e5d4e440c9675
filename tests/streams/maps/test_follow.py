"""``streams.from_kafka``: a :class:`miqps.Canonicalizer` following the maps topic live."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterator

import pytest

import streams
from miqps import Canonicalizer
from miqps.maps import DomainMap
from streams.maps.follow import from_kafka
from tests.miqps.test_api import HOST, product_map


def test_from_kafka_lives_with_kafka_and_is_exported_at_the_top_of_streams() -> None:
    assert streams.from_kafka is from_kafka
    assert from_kafka.__doc__
    assert not hasattr(Canonicalizer, "from_kafka")  # the core has no Kafka of its own


@pytest.fixture
def maps_topic() -> Iterator[tuple[str, Callable[[DomainMap | None], None]]]:
    """A topic of our own on the local broker, and a way to publish maps (None: tombstone)."""
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    from streams.settings import Settings
    from testkit.tools import produce

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    try:
        admin.list_topics(timeout=5)
    except Exception as error:
        if os.environ.get("CI"):
            pytest.fail(f"no Kafka broker at {bootstrap}: {error}")
        pytest.skip(f"no Kafka broker at {bootstrap} (scripts/kafka-local start): {error}")
    topic = f"test-api-maps-{os.getpid()}-{time.monotonic_ns()}"
    config = {"cleanup.policy": "compact"}
    admin.create_topics([NewTopic(topic, 2, 1, config=config)])[topic].result(30)
    settings = Settings(bootstrap_servers=bootstrap)

    def publish(domain_map: DomainMap | None) -> None:
        value = domain_map.dumps().encode() if domain_map is not None else None
        produce(settings, topic, [value], [HOST.encode()])

    try:
        yield bootstrap + "|" + topic, publish
    finally:
        admin.delete_topics([topic])[topic].result(30)


def eventually(check: Callable[[], bool], seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return False


@pytest.mark.kafka
@pytest.mark.timeout(120)
def test_from_kafka_follows_the_maps_topic_live(
    maps_topic: tuple[str, Callable[[DomainMap | None], None]],
) -> None:
    where, publish = maps_topic
    bootstrap, topic = where.split("|")
    publish(product_map(1, drop="ref"))
    url = f"https://{HOST}/p/9?id=7&ref=mail&sid=1"
    canonicalizer = from_kafka(bootstrap, topic=topic, timeout=60)
    try:
        assert isinstance(canonicalizer, Canonicalizer)
        assert canonicalizer.canonicalize(url) == f"https://{HOST}/p/9?id=7"
        publish(product_map(2, drop="id"))  # a newer version: id neutral, ref kept
        assert eventually(lambda: canonicalizer.canonicalize(url) == f"https://{HOST}/p/9?ref=mail")
        publish(None)  # tombstone: the domain has no map any more
        assert eventually(lambda: canonicalizer.canonicalize(url) == url)
    finally:
        canonicalizer.close()


@pytest.mark.timeout(60)
@pytest.mark.slow  # about 12 s: closing the consumer that never reached a broker
def test_from_kafka_without_a_broker_times_out_clearly() -> None:
    with socket.socket() as sock:  # bound, never listening: nothing answers there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        with pytest.raises(TimeoutError, match="maps topic"):
            from_kafka(f"127.0.0.1:{port}", timeout=2)
