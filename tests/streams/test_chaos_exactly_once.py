"""Exactly once on the replicated cluster (3 brokers, replication factor 3,
``min.insync.replicas`` 2): with ``MIQPS_PROCESSING_GUARANTEE=exactly_once``, two
canonicalizer workers and a probing worker, inputs flowing all along, a ``read_committed``
reader of the outputs finds every input once after a kill -9 of a canonicalizer worker and
after a kill -9 of the broker leading the inputs. (test_chaos.py runs the same faults at
least once, where duplicates are counted, not forbidden.)"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.chaos import (
    CANONICALIZE,
    ChaosReport,
    ChaosRig,
    Timing,
    kill_broker_scenario,
    kill_worker_scenario,
)
from testkit.localbroker import LocalBroker

pytestmark = [pytest.mark.kafka, pytest.mark.cluster, pytest.mark.timeout(420)]


@pytest.fixture(scope="module")
def rig(cluster: LocalBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChaosRig]:
    with ChaosRig(
        cluster,
        tmp_path_factory.mktemp("exactly-once"),
        "exactly-once",
        rate=150.0,
        guarantee="exactly_once",
    ) as rig:
        rig.start_pipeline(240.0)
        yield rig


def check_exactly_once(report: ChaosReport, rig: ChaosRig) -> None:
    print(report.line())
    assert report.inputs > 0, report.line()
    assert report.exited == (), f"{report.line()}; {rig.worker_logs()}"
    assert report.missing == 0, f"{report.line()}; {rig.worker_logs()}"
    assert report.duplicates == 0, f"{report.line()}; {rig.worker_logs()}"


def test_exactly_once_through_a_kill_9_of_a_canonicalizer_worker(rig: ChaosRig) -> None:
    check_exactly_once(kill_worker_scenario(rig, "c1", CANONICALIZE, Timing(after=20.0)), rig)


def test_exactly_once_through_a_kill_9_of_the_broker_leading_the_inputs(rig: ChaosRig) -> None:
    check_exactly_once(kill_broker_scenario(rig, Timing(down=10.0)), rig)
