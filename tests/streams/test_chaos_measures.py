"""How the chaos rig measures a fault, without a broker."""

from __future__ import annotations

from testkit.chaos import ChaosReport, recovery_time


def test_recovery_waits_for_the_backlog_at_the_fault_and_for_new_outputs() -> None:
    produced = {0: 9.0, 1: 9.5, 2: 10.5, 3: 11.0}
    # Input 1, produced before the fault at 10.0, came out last: that is when it recovered.
    assert recovery_time(produced, {0: 9.1, 1: 25.0, 2: 12.0, 3: 12.5}, 10.0) == 15.0
    # The backlog is out early, but nothing produced after the fault came out before 14.0.
    assert recovery_time(produced, {0: 9.1, 1: 10.2, 2: 14.0, 3: 14.5}, 10.0) == 4.0


def test_no_recovery_while_an_input_of_either_side_has_no_output() -> None:
    produced = {0: 9.0, 1: 11.0}
    assert recovery_time(produced, {1: 12.0}, 10.0) is None
    assert recovery_time(produced, {0: 9.5}, 10.0) is None


def test_report_line_gives_the_duplicate_share() -> None:
    report = ChaosReport(
        "kill",
        inputs=400,
        missing=0,
        duplicates=6,
        recovery=None,
        worst_latency=2.5,
        maps_converged=True,
    )
    assert report.duplicate_share == 0.015
    assert "6 duplicates (1.50%)" in report.line() and "recovery n/a" in report.line()


def test_report_line_names_the_workers_that_exited_by_themselves() -> None:
    report = ChaosReport(
        "kill",
        inputs=400,
        missing=0,
        duplicates=0,
        recovery=None,
        worst_latency=2.5,
        maps_converged=True,
        exited=("p1 (exit code 1)",),
    )
    assert report.line().endswith("; exited by themselves: p1 (exit code 1)")
