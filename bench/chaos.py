"""Chaos benchmark: faults on a private 3-broker cluster while numbered inputs flow.

    .venv/bin/python -m bench.chaos [--rate 300] [--storm 60] [--broker-down 20]
        [--guarantee at_least_once|exactly_once]

Starts a private cluster (``scripts/kafka-local --brokers 3`` on free ports, replication
factor 3, ``min.insync.replicas`` 2; the shared broker is never touched), the simulated web,
two canonicalizer workers and one probing worker (subprocesses, topics replicated 3 times),
then, with ``--rate`` inputs a second flowing all along:

1. kill -9 of the probing worker while it learns, restarted after ``--worker-down`` s;
2. kill -9 of a canonicalizer worker, restarted after ``--worker-down`` s;
3. kill -9 of the broker leading the inputs' first partition, restarted after
   ``--broker-down`` s;
4. a rebalance storm: for ``--storm`` s a worker joins every ``--every`` s (canonicalizer
   and probing in turn) and, beyond two, the oldest leaves.

Each reports inputs, outputs missing (must be 0), duplicates (share of inputs; target
<= 5%), recovery time (from the fault until every input produced before it has an output
and a later input has one too; target <= 30 s after a broker kill), the worst
input-to-output time, and whether every site has a map afterwards. Exits 1 if an output
is missing or the maps did not converge.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from collections.abc import Callable
from pathlib import Path

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

DUPLICATES_TARGET = 0.05
BROKER_RECOVERY_TARGET = 30.0


def run(args: argparse.Namespace, workdir: Path) -> list[ChaosReport]:
    after = Timing(before=5.0, down=args.worker_down, after=args.after)
    reports: list[ChaosReport] = []
    with (
        LocalBroker(workdir / "kafka", brokers=3) as cluster,
        ChaosRig(
            cluster,
            workdir,
            "bench-chaos",
            rate=args.rate,
            partitions=args.partitions,
            guarantee=args.guarantee,
        ) as rig,
    ):
        rig.start_pipeline(300.0)
        print(
            f"cluster {cluster.bootstrap}; {args.guarantee}; {args.rate:g} inputs/s over "
            f"{args.partitions} partitions; logs in {workdir}",
            flush=True,
        )
        scenarios: list[Callable[[], ChaosReport]] = [
            lambda: kill_worker_scenario(rig, "p1", PROBE, after),
            lambda: kill_worker_scenario(rig, "c1", CANONICALIZE, after),
            lambda: kill_broker_scenario(rig, Timing(down=args.broker_down, after=args.after)),
            lambda: rebalance_storm(
                rig, Timing(down=args.storm, after=args.after), every=args.every
            ),
        ]
        for scenario in scenarios:
            report = scenario()
            print(report.line(), flush=True)
            reports.append(report)
    return reports


def verdict(reports: list[ChaosReport]) -> int:
    inputs = sum(report.inputs for report in reports)
    duplicates = sum(report.duplicates for report in reports)
    missing = sum(report.missing for report in reports)
    print(
        f"in all: {inputs} inputs, {missing} missing (must be 0), {duplicates} duplicates "
        f"({duplicates / max(1, inputs):.2%}; target <= {DUPLICATES_TARGET:.0%})"
    )
    for report in reports:
        if report.scenario.startswith("kill -9 broker"):
            recovery = "never" if report.recovery is None else f"{report.recovery:.1f}s"
            print(f"broker kill: recovery {recovery} (target <= {BROKER_RECOVERY_TARGET:g}s)")
    failed = missing > 0 or not all(report.maps_converged for report in reports)
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--rate", type=float, default=300.0, help="inputs per second")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument(
        "--guarantee",
        choices=("at_least_once", "exactly_once"),
        default="at_least_once",
        help="the workers' MIQPS_PROCESSING_GUARANTEE; the outputs are read read_committed",
    )
    parser.add_argument(
        "--worker-down", type=float, default=5.0, help="seconds before a killed worker is restarted"
    )
    parser.add_argument(
        "--broker-down",
        type=float,
        default=20.0,
        help="seconds before the killed broker is restarted",
    )
    parser.add_argument("--storm", type=float, default=60.0, help="seconds of rebalance storm")
    parser.add_argument(
        "--every", type=float, default=5.0, help="seconds between joins in the storm"
    )
    parser.add_argument(
        "--after", type=float, default=20.0, help="seconds the inputs flow on after each fault"
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        help="keep the cluster, state and worker logs here (default: a "
        "temporary directory, removed at the end)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="bench: %(name)s: %(message)s")
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
        return verdict(run(args, args.workdir))
    with tempfile.TemporaryDirectory(prefix="miqps-chaos-") as workdir:
        return verdict(run(args, Path(workdir)))


if __name__ == "__main__":
    raise SystemExit(main())
