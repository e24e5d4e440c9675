"""Faults on a replicated cluster (3 brokers, replication factor 3, min.insync.replicas 2),
with inputs flowing all along through two canonicalizer workers and a probing worker:

- kill -9 of the probing worker while it learns, then of a canonicalizer worker (each
  restarted a few seconds later, as a supervisor would);
- kill -9 of the broker leading the input topic, restarted 10 s later;
- a rebalance storm: workers joining and leaving every few seconds.

After each, every input the cluster acknowledged has an output (at least once: duplicates
are allowed, and after a kill -9 bounded by about one commit interval of input), and every
site of the simulated web has a map. The tests
share one rig and run in this order; bench/chaos.py runs the same faults at a larger scale
and reports duplicates and recovery times against their targets.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.chaos import (
    CANONICALIZE,
    PROBE,
    ChaosReport,
    ChaosRig,
    Timing,
    kill_broker_scenario,
    kill_worker_scenario,
    rebalance_storm,
)
from testkit.localbroker import LocalBroker

pytestmark = [pytest.mark.kafka, pytest.mark.cluster, pytest.mark.timeout(420)]


@pytest.fixture(scope="module")
def rig(cluster: LocalBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChaosRig]:
    with ChaosRig(cluster, tmp_path_factory.mktemp("chaos"), "chaos", rate=150.0) as rig:
        rig.start_pipeline(240.0)
        yield rig


def check(report: ChaosReport, rig: ChaosRig) -> None:
    print(report.line())
    assert report.inputs > 0, report.line()
    assert report.exited == (), f"{report.line()}; {rig.worker_logs()}"
    assert report.missing == 0, f"{report.line()}; {rig.worker_logs()}"
    assert report.maps_converged, f"{report.line()}; {rig.worker_logs()}"


def test_kill_9_of_the_probing_worker_while_it_learns(rig: ChaosRig) -> None:
    check(kill_worker_scenario(rig, "p1", PROBE, Timing(before=3.0, down=3.0)), rig)


def check_duplicates_within_a_commit_interval(report: ChaosReport, rig: ChaosRig) -> None:
    """At least once, a kill -9 redelivers the inputs since the last commit: about one
    commit interval of input (twice that is allowed, for the batch in flight)."""
    assert rig.settings is not None
    bound = 2 * rig.rate * rig.settings.commit_interval
    assert report.duplicates <= bound, f"{report.line()}; more than {bound:g} duplicates"


def test_kill_9_of_a_canonicalizer_worker(rig: ChaosRig) -> None:
    report = kill_worker_scenario(rig, "c1", CANONICALIZE, Timing(after=20.0))
    check(report, rig)
    check_duplicates_within_a_commit_interval(report, rig)


def test_kill_9_of_the_broker_leading_the_inputs(rig: ChaosRig) -> None:
    report = kill_broker_scenario(rig, Timing(down=10.0))
    check(report, rig)
    check_duplicates_within_a_commit_interval(report, rig)


def test_a_rebalance_storm(rig: ChaosRig) -> None:
    check(rebalance_storm(rig, Timing(down=30.0)), rig)
