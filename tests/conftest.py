"""The test tiers, the replicated test cluster shared by every test marked ``cluster``, and
the real browser of the browser tests (one chromium per test module that uses it).

A test that takes one of :data:`MARKER_OF_FIXTURE`'s fixtures, directly or through another
fixture, gets that fixture's marker, so ``-m "not kafka and not cluster and not browser and
not slow"`` (``scripts/test --quick``) never reaches a broker or a browser. A test that needs
one some other way carries the marker itself."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.browser import browser, browser_page

if TYPE_CHECKING:
    from testkit.localbroker import LocalBroker

__all__ = ["browser", "browser_page"]  # fixtures

CLUSTER_BROKERS = 3

MARKER_OF_FIXTURE = {
    "bootstrap": "kafka",
    "private_broker": "kafka",
    "cluster": "cluster",
    "browser": "browser",
    "tuning_run": "slow",
    "learned": "slow",
    "simweb_crawls": "slow",
}
"""The tier of every test that uses the fixture: the shared broker, a private broker, the
3-broker cluster, chromium; and, taking 10 to 45 s each, the learning run on the tuning
family (tests/miqps), the ``miqps learn`` run of tests/miqps/cli/ and the Scrapy
crawls of tests/miqps/test_scrapy.py."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for fixture in getattr(item, "fixturenames", ()):
            marker = MARKER_OF_FIXTURE.get(fixture)
            if marker is not None:
                item.add_marker(marker)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    """A private 3-broker KRaft cluster on free ports, whose nodes tests may kill and
    restart (each test leaves every node running); stopped at the end of the session."""
    from testkit.localbroker import LocalBroker

    broker = LocalBroker(tmp_path_factory.mktemp("cluster"), brokers=CLUSTER_BROKERS)
    try:
        yield broker.start()
    finally:
        broker.stop()
