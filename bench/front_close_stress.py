"""Stress of the front's rebalance and close paths, on the real broker.

    .venv/bin/python -m bench.front_close_stress [--runs 50] [--hard-limit 240] [--test NODEID]

Runs one pytest node again and again, each run in a process of its own, and prints each
run's time and outcome. By default the node is the stuck-front test of
tests/streams/front/test_loop.py: a front stuck in a call loses its partitions to another
member (a rebalance), and when the call returns both fronts stop and close their clients
(the close of a member the group has already expelled is where librdkafka's
``rd_kafka_assign`` could block for ever while holding the GIL).

A run that does not end within ``--hard-limit`` seconds is killed and counted as a freeze
(the suite's own hard deadline, tests/conftest.py, usually ends it first, with every
thread's stack, and is counted as a freeze too). Needs the broker of scripts/test
(``KAFKA_BOOTSTRAP_SERVERS``, default 127.0.0.1:9092).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STUCK_FRONT_TEST = (
    "tests/streams/front/test_loop.py::"
    "test_a_stuck_front_says_where_and_loses_its_partitions_to_the_other_member"
)
DEADLINE_REPORT_MARK = "passed its hard deadline"


def run_once(test: str, hard_limit: float, report: Path) -> tuple[str, float]:
    """(outcome, seconds) of one pytest run of ``test``: passed, failed or frozen."""
    report.unlink(missing_ok=True)
    env = {**os.environ, "MIQPS_TEST_DEADLINE_REPORT": str(report)}
    started = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test],
            cwd=REPO,
            env=env,
            capture_output=True,
            timeout=hard_limit,
        )
    except subprocess.TimeoutExpired:
        return "frozen (killed)", time.monotonic() - started
    took = time.monotonic() - started
    if report.exists() and DEADLINE_REPORT_MARK in report.read_text("utf-8", "replace"):
        return "frozen (hard deadline)", took
    if done.returncode != 0:
        tail = done.stdout.decode("utf-8", "replace").strip().splitlines()[-1:]
        return f"failed: {' '.join(tail)}", took
    return "passed", took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--hard-limit", type=float, default=240.0)
    parser.add_argument("--test", default=STUCK_FRONT_TEST)
    args = parser.parse_args()
    report = Path(f"/tmp/miqps-front-close-stress-{os.getpid()}.txt")
    durations: list[float] = []
    outcomes: dict[str, int] = {}
    for number in range(1, args.runs + 1):
        outcome, took = run_once(args.test, args.hard_limit, report)
        durations.append(took)
        kind = outcome.split(":")[0].split(" (")[0]
        outcomes[kind] = outcomes.get(kind, 0) + 1
        print(f"run {number:3d}: {took:6.1f}s  {outcome}", flush=True)
        if kind == "frozen" and report.exists():
            print(report.read_text("utf-8", "replace")[-4000:], flush=True)
    print(
        f"\n{args.runs} runs of {args.test}: "
        + ", ".join(f"{count} {kind}" for kind, count in sorted(outcomes.items()))
        + f"; seconds per run: median {statistics.median(durations):.1f}, "
        f"max {max(durations):.1f}, total {sum(durations):.0f}"
    )


if __name__ == "__main__":
    main()
