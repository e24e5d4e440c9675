"""The test tiers, the replicated test cluster shared by every test marked ``cluster``, and
the real browser of the browser tests (one chromium per test module that uses it).

A test that takes one of :data:`MARKER_OF_FIXTURE`'s fixtures, directly or through another
fixture, gets that fixture's marker, so ``-m "not kafka and not cluster and not browser and
not slow"`` (``scripts/test --quick``) never reaches a broker or a browser. A test that needs
one some other way carries the marker itself.

Every test also runs under a hard deadline that needs no Python thread to fire: its
pytest-timeout plus :data:`HARD_DEADLINE_GRACE` seconds, enforced by ``faulthandler``'s C
watchdog. A Kafka client call that blocks in C while it holds the GIL freezes every Python
thread, pytest-timeout's included; then the watchdog writes the stack of every thread to
:data:`HARD_DEADLINE_REPORT` and ends the run with exit code 1 (``scripts/test`` prints
the report), instead of a run that hangs until CI kills it."""

from __future__ import annotations

import faulthandler
import os
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING

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


HARD_DEADLINE_GRACE = float(os.environ.get("MIQPS_TEST_DEADLINE_GRACE") or 60.0)
HARD_DEADLINE_REPORT = Path(
    os.environ.get("MIQPS_TEST_DEADLINE_REPORT")
    or Path(__file__).resolve().parents[1] / ".pytest-deadline.txt"
)
_deadline_report: list[IO[str]] = []


def _timeout_of(item: pytest.Item) -> float:
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0])
    return float(item.config.getini("timeout") or 0)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, None, None]:
    timeout = _timeout_of(item)
    if timeout <= 0:
        yield
        return
    limit = timeout + HARD_DEADLINE_GRACE
    report = HARD_DEADLINE_REPORT.open("w", encoding="utf-8")
    _deadline_report[:] = [report]  # the watchdog writes to its descriptor
    report.write(
        f"{item.nodeid} passed its hard deadline of {limit:g}s (pytest-timeout could not "
        "fire: a thread holds the GIL); every thread's stack, most recent call first:\n"
    )
    report.flush()
    faulthandler.dump_traceback_later(limit, exit=True, file=report)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
        report.close()
        HARD_DEADLINE_REPORT.unlink(missing_ok=True)


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
