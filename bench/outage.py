"""Outage benchmark: a worker through a long broker outage, and SIGTERM with the broker gone.

    .venv/bin/python -m bench.outage [--outage 60] [--urls 20000] [--stop-timeout 30]

Starts a private broker (free ports, temporary home, jars from the repository's Maven
cache; the shared broker is never touched), then:

1. start-up during an outage: the broker is stopped, a worker started, and the broker
   started again ``--outage`` seconds later; ``--urls`` inputs are produced and the time
   until every one has an output is measured (nothing may be lost);
2. SIGTERM with the broker gone: with ``--urls`` more inputs flowing, the broker is
   stopped, the worker sent SIGTERM and the time until it exits measured against its stop
   timeout; then the broker and a fresh worker come back and every input must have an
   output (what the first worker had not committed is delivered again).

Both phases print how often the most repeated warning or error was written.
"""

from __future__ import annotations

import argparse
import logging
import re
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from streams.kafka.admin import ensure_topics
from streams.kafka.lograte import rate_limit_handlers
from streams.settings import Settings
from testkit.localbroker import LocalBroker
from testkit.outages import (
    log_problems,
    numbered_inputs,
    output_seqs,
    reported_uncommitted,
    sigterm_and_time,
)
from testkit.tools import TopicReader, WorkerProcess, isolated_settings, produce


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    began = time.monotonic()
    while not condition():
        if time.monotonic() - began > timeout:
            raise SystemExit(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.2)


def worst_repeat(log_text: str) -> str:
    problems = log_problems(log_text)
    if not problems:
        return "no warnings or errors"
    message, count = problems.most_common(1)[0]
    return f"{count}x, {sum(problems.values())} warning/error lines in all: {message[:120]}"


def run(outage: float, urls: int, stop_timeout: float, workdir: Path) -> int:
    failures = 0
    with LocalBroker(workdir / "kafka") as broker:
        base = Settings.from_env({"KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap})
        settings = isolated_settings(base, "outage", workdir / "state", partitions=4)
        ensure_topics(settings)
        env = {"MIQPS_STOP_TIMEOUT": str(stop_timeout)}

        broker.stop()
        worker = WorkerProcess(settings, "canonicalize,probe", workdir / "first.log", env).start()
        time.sleep(outage)
        alive_through_outage = worker.alive()
        log_during_outage = worker.log_text()
        broker.start()
        back = time.monotonic()
        produce(settings, settings.topics.raw, numbered_inputs(urls))
        outputs = TopicReader(settings, settings.topics.canonical)
        wanted = set(range(urls))
        wait_until(lambda: output_seqs(outputs) >= wanted, 600, "first outputs")
        drained = time.monotonic() - back
        lost = len(wanted - output_seqs(outputs))
        first_phase_outputs = len(outputs.records)
        print(
            f"start-up during a {outage:g}s outage: alive throughout {alive_through_outage}; "
            f"{urls} inputs all out {drained:.1f}s after the broker came back; lost {lost}, "
            f"written twice {first_phase_outputs - urls}"
        )
        waited = re.findall(r"waiting for Kafka at \S+ \((\d+)s so far", log_during_outage)
        print(
            f"  log during the outage: 'waiting for Kafka' at {', '.join(waited)} s; "
            f"worst repeat {worst_repeat(log_during_outage)}"
        )
        failures += int(not alive_through_outage or lost > 0)

        second_batch = numbered_inputs(urls, start=urls)
        produce(settings, settings.topics.raw, second_batch)
        wait_until(lambda: len(output_seqs(outputs)) > urls, 120, "second-batch outputs")
        broker.stop()
        down = time.monotonic()
        time.sleep(3.0)
        code, elapsed = sigterm_and_time(worker, stop_timeout + 60)
        stop_log = worker.log_text()[len(log_during_outage) :]
        print(
            f"SIGTERM with the broker gone: exit code {code} after {elapsed:.1f}s; "
            f"bound {stop_timeout:g}s (ratio {elapsed / stop_timeout:.2f})"
        )
        print(
            f"  log over {time.monotonic() - down:.0f}s of outage and stop: worst repeat "
            f"{worst_repeat(stop_log)}"
        )
        uncommitted = reported_uncommitted(stop_log)
        print(f"  canonicalizer: {uncommitted} consumed inputs without a committed offset")
        failures += int(code is None or elapsed > stop_timeout)

        broker.start()
        back = time.monotonic()
        restarted = WorkerProcess(
            settings, "canonicalize,probe", workdir / "second.log", env
        ).start()
        wanted = set(range(2 * urls))
        try:
            wait_until(lambda: output_seqs(outputs) >= wanted, 600, "every output")
        finally:
            restarted.stop()
        redelivered = len(outputs.records) - first_phase_outputs - urls
        print(
            f"after the restart: all {2 * urls} inputs out "
            f"{time.monotonic() - back:.1f}s after the broker came back; lost "
            f"{len(wanted - output_seqs(outputs))}; {redelivered} of the second {urls} "
            f"written twice (at least once; the canonicalizer had {uncommitted} uncommitted)"
        )
        outputs.close()
    return 1 if failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--outage", type=float, default=60.0, help="seconds the broker is gone")
    parser.add_argument("--urls", type=int, default=20_000, help="inputs per phase")
    parser.add_argument("--stop-timeout", type=float, default=30.0)
    parser.add_argument(
        "--workdir",
        type=Path,
        help="keep the broker, state and worker logs here (default: a "
        "temporary directory, removed at the end)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="bench: %(name)s: %(message)s")
    rate_limit_handlers()
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
        return run(args.outage, args.urls, args.stop_timeout, args.workdir)
    with tempfile.TemporaryDirectory(prefix="miqps-outage-") as workdir:
        return run(args.outage, args.urls, args.stop_timeout, Path(workdir))


if __name__ == "__main__":
    raise SystemExit(main())
