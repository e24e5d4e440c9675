"""The replicated test cluster, shared by every test marked ``cluster``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from streams.localbroker import LocalBroker

CLUSTER_BROKERS = 3


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    """A private 3-broker KRaft cluster on free ports, whose nodes tests may kill and
    restart (each test leaves every node running); stopped at the end of the session."""
    broker = LocalBroker(tmp_path_factory.mktemp("cluster"), brokers=CLUSTER_BROKERS)
    try:
        yield broker.start()
    finally:
        broker.stop()
