"""Scaling benchmark: one canonicalizer worker against two, and each against the raw
confluent-kafka passthrough, all in the same run.

    .venv/bin/python -m bench.scaling [--urls 300000] [--partitions 4] [--workers 1,2]

Needs the local broker (scripts/kafka-local start; KAFKA_BOOTSTRAP_SERVERS for another).
``--urls`` URLs whose every pattern is already learned (bench/stream_throughput.py's
synthetic URLs and maps) are produced once to ``urls.raw``. A consume->produce passthrough
copies them (the baseline), then for each worker count a group of that many
``miqps worker --agents canonicalize`` processes, with an app id and output topic of its
own, canonicalizes all of them. A group's rate is counted from the moment every one of its
canonicalizers holds partitions (start-up excluded, later rebalances included) to the
last output. Reports URLs/s per group, per worker, per worker against the passthrough
(target >= 0.15) and the speed-up of N workers over one, with the machine's core count:
processes on the same cores share them, so the speed-up is bounded by what is free.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path

from confluent_kafka import Consumer

from bench.stream_throughput import high_watermarks, learned_inputs, passthrough
from streams.kafka.admin import consumer_config, ensure_topics
from streams.settings import Settings
from testkit.tools import WorkerProcess, delete_topics, isolated_settings

ASSIGNED = re.compile(r"canonicalizer: \w+ partitions \[[\d, ]*\]; holds \[([\d, ]*)\]")
TARGET_RATIO = 0.15


def holds_partitions(worker: WorkerProcess) -> bool:
    """Whether the worker's canonicalizer holds at least one partition."""
    assignments = ASSIGNED.findall(worker.log_text())
    return bool(assignments and assignments[-1].strip())


def group_rate(
    settings: Settings, workers: int, expected: int, root: Path, timeout: float
) -> float:
    """URLs/s of ``workers`` canonicalizer processes sharing one group, from the moment all
    of them hold partitions to the last output. The group's topics are named after
    ``settings``' app id, so deleting those at the end deletes them too."""
    group = replace(
        settings,
        app_id=f"{settings.app_id}-w{workers}",
        topics=replace(settings.topics, canonical=f"{settings.topics.canonical}.w{workers}"),
    )
    ensure_topics(group)
    processes = [
        WorkerProcess(
            group.with_overrides(state_dir=root / f"w{workers}-{n}"),
            "canonicalize",
            root / f"w{workers}-{n}.log",
        )
        for n in range(workers)
    ]
    watch = Consumer(consumer_config(group, f"bench-watch-{uuid.uuid4().hex}"))
    try:
        for process in processes:
            process.start()
        deadline = time.monotonic() + timeout
        joined: tuple[float, int] | None = None
        while True:
            count = high_watermarks(watch, group.topics.canonical)
            now = time.perf_counter()
            if joined is None and all(holds_partitions(p) for p in processes):
                joined = (now, count)
            if count >= expected:
                break
            if time.monotonic() > deadline or not all(p.alive() for p in processes):
                raise RuntimeError(f"{count} of {expected} outputs; logs in {root}")
            time.sleep(0.05)
    finally:
        watch.close()
        for process in processes:
            process.stop()
    assert joined is not None
    started, at_start = joined
    return (expected - at_start) / (now - started)


def run(args: argparse.Namespace, root: Path) -> int:
    settings = isolated_settings(
        Settings.from_env(), "bench-scale", root / "state", partitions=args.partitions
    )
    try:
        urls, _, copy_topic = learned_inputs(settings, args.urls, args.domains)
        print(
            f"{len(urls)} learned URLs over {args.partitions} partitions; "
            f"{os.cpu_count()} cores; logs in {root}",
            flush=True,
        )
        baseline = passthrough(
            settings, settings.topics.raw, copy_topic, len(urls), settings.batch_size
        )
        print(f"  confluent-kafka passthrough: {baseline:10,.0f} msgs/s", flush=True)
        rates: dict[int, float] = {}
        for workers in args.workers:
            rate = group_rate(settings, workers, len(urls), root, args.timeout)
            rates[workers] = rate
            per_worker = rate / workers
            speed_up = f"; {rate / rates[1]:.2f}x one worker" if 1 in rates and workers > 1 else ""
            print(
                f"  {workers} canonicalizer worker(s): {rate:10,.0f} URLs/s, "
                f"{per_worker:,.0f} per worker = {per_worker / baseline:.3f} x passthrough "
                f"(target >= {TARGET_RATIO}){speed_up}",
                flush=True,
            )
        worst = min(rate / workers for workers, rate in rates.items()) / baseline
        return 0 if worst >= TARGET_RATIO else 1
    finally:
        delete_topics(settings)


def worker_counts(text: str) -> list[int]:
    counts = [int(part) for part in text.split(",") if part.strip()]
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"worker counts must be positive, got {text!r}")
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.scaling",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--urls", type=int, default=300_000)
    parser.add_argument("--domains", type=int, default=5_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument(
        "--workers",
        type=worker_counts,
        default=[1, 2],
        help="comma-separated worker counts (default 1,2)",
    )
    parser.add_argument("--timeout", type=float, default=1200.0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="miqps-scaling-") as root:
        return run(args, Path(root))


if __name__ == "__main__":
    sys.exit(main())
