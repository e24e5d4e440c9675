"""Stream benchmark: one canonicalizer worker at least once and exactly once, beside a plain
consume->produce passthrough, from one run.

    .venv/bin/python -m bench.guarantee_throughput [--urls 200000] [--rounds 2]

Needs the local broker (scripts/kafka-local start). Each measurement has topics of its own
holding the same ``--urls`` synthetic URLs, with maps for every pattern published first
(as in ``bench.stream_throughput``). The passthrough copies them once; then, ``--rounds``
times in turn, one ``miqps worker --agents canonicalize`` canonicalizes them with
``MIQPS_PROCESSING_GUARANTEE=at_least_once`` and one with ``exactly_once`` (at the default
commit intervals: 1 s and 100 ms). URLs/s are counted from the first output to the last
(start-up excluded; the transaction markers, one per partition and commit, are a few
hundred of the counted offsets). Prints each figure, the best of each guarantee, and the
ratios: exactly once / at least once (target >= 0.8) and worker / passthrough.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from bench.stream_throughput import (
    CREATED,
    isolated_settings,
    learned_inputs,
    passthrough,
    wait_outputs,
)
from streams.settings import Settings
from testkit.tools import WorkerProcess, delete_topics

GUARANTEES = ("at_least_once", "exactly_once")
TARGET_RATIO = 0.8


def worker_rate(
    base: Settings, guarantee: str, label: str, args: argparse.Namespace, root: Path
) -> float:
    settings = isolated_settings(
        base, label, root / label, partitions=args.partitions
    ).with_overrides(processing_guarantee=guarantee)
    urls, _, _ = learned_inputs(settings, args.urls, args.domains)
    worker = WorkerProcess(settings, "canonicalize", root / f"{label}.log").start()
    try:
        first, at_first, last = wait_outputs(
            settings, settings.topics.canonical, len(urls), args.timeout, worker
        )
    finally:
        worker.stop()
    return (len(urls) - at_first) / (last - first)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.guarantee_throughput",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--urls", type=int, default=200_000)
    parser.add_argument("--domains", type=int, default=5_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900.0)
    args = parser.parse_args(argv)
    base = Settings.from_env()
    root = Path(tempfile.mkdtemp(prefix="miqps-bench-"))
    print(f"worker logs in {root}", flush=True)
    try:
        settings = isolated_settings(
            base, "bench-gt-pass", root / "pass", partitions=args.partitions
        )
        urls, _, copy_topic = learned_inputs(settings, args.urls, args.domains)
        rate_pass = passthrough(
            settings, settings.topics.raw, copy_topic, len(urls), settings.batch_size
        )
        print(f"confluent-kafka passthrough: {rate_pass:10,.0f} msgs/s", flush=True)
        rates: dict[str, list[float]] = {guarantee: [] for guarantee in GUARANTEES}
        for round_number in range(args.rounds):
            for guarantee in GUARANTEES:
                label = f"bench-gt-{guarantee.replace('_', '-')}-{round_number}"
                rate = worker_rate(base, guarantee, label, args, root)
                rates[guarantee].append(rate)
                print(f"{guarantee:>13} worker:      {rate:10,.0f} URLs/s", flush=True)
        best = {guarantee: max(found) for guarantee, found in rates.items()}
        ratio = best["exactly_once"] / best["at_least_once"]
        print(
            f"best: at least once {best['at_least_once']:,.0f} URLs/s "
            f"({best['at_least_once'] / rate_pass:.2f}x passthrough), exactly once "
            f"{best['exactly_once']:,.0f} URLs/s ({best['exactly_once'] / rate_pass:.2f}x "
            f"passthrough); exactly once / at least once {ratio:.2f} (target >= {TARGET_RATIO})",
            flush=True,
        )
    finally:
        for created in CREATED:
            delete_topics(created)
    return 0


if __name__ == "__main__":
    sys.exit(main())
