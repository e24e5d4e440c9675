"""Fixtures of the stream tests: a tiny web whose behaviour can change, and Kafka access."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from testkit.localbroker import LocalBroker
from tests.miqps.drifting import DriftingSite as DriftingSite
from tests.miqps.drifting import serve_drifting


@pytest.fixture
def drifting_web() -> Iterator[tuple[DriftingSite, str]]:
    """A loopback HTTP proxy that serves :class:`DriftingSite`; yields it and the proxy URL."""
    with serve_drifting() as served:
        yield served


@pytest.fixture(scope="session")
def bootstrap() -> str:
    """The test broker (scripts/test starts it); Kafka tests fail fast without it."""
    servers = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    from confluent_kafka.admin import AdminClient

    try:
        AdminClient({"bootstrap.servers": servers, "log_level": 0}).list_topics(timeout=10)
    except Exception as error:
        pytest.fail(f"no Kafka broker at {servers} (run scripts/kafka-local start): {error}")
    return servers


@pytest.fixture(scope="module")
def private_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    """A broker of this module's own (free ports, temporary home) that its tests may stop
    and start; always stopped at the end. The shared broker is never touched."""
    broker = LocalBroker(tmp_path_factory.mktemp("private-kafka"))
    try:
        yield broker.start()
    finally:
        broker.stop()
