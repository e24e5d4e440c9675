"""The replicated test cluster, shared by every test marked ``cluster``, and the real
browser of the browser tests (one chromium per test module that uses it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from streams.localbroker import LocalBroker
from tests.browser import browser, browser_page

__all__ = ["browser", "browser_page"]  # fixtures

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
