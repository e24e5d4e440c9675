"""Workers and broker outages, on a private broker that the tests stop and start (the
shared broker is never touched).

- SIGTERM with the broker gone ends a worker within its stop timeout; what it had not
  committed is delivered again to the next worker, so nothing is lost.
- A worker started during an outage waits, says so with backoff, stops at once if asked
  to, and processes its input once the broker is back, even if the broker goes away again
  while the worker starts.
- Repeated errors are rate-limited in the log.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from streams.kafka.admin import ensure_topics
from streams.kafka.lograte import DEFAULT_INTERVAL
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

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(600)]
# A worker restarted in place after the broker flapped goes through Faust's start-up again,
# which takes tens of seconds on a loaded 2-core machine: outputs get this long.
OUTPUT_WAIT = 360.0

STOP_TIMEOUT = 10.0


def wait_until(
    condition: Callable[[], bool], timeout: float, what: str, detail: Callable[[], str] = str
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}; {detail()}")
        time.sleep(0.2)


def stop_lines(log_text: str) -> list[str]:
    """The lines that say why a worker stopped or started again."""
    said = ("] Error: ", "Crashed reason", "stopped by", "Kafka became unreachable")
    return [line for line in log_text.splitlines() if any(words in line for words in said)]


def with_topics(broker: LocalBroker, label: str, state: Path) -> Settings:
    """Settings with topics of their own on ``broker``, created."""
    base = Settings.from_env({"KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap})
    settings = isolated_settings(base, label, state, partitions=2)
    ensure_topics(settings)
    return settings


def worker(settings: Settings, log: Path) -> WorkerProcess:
    return WorkerProcess(
        settings, "canonicalize,probe", log, {"MIQPS_STOP_TIMEOUT": str(STOP_TIMEOUT)}
    )


def test_sigterm_with_the_broker_gone_stops_in_time_and_loses_nothing(
    private_broker: LocalBroker, tmp_path: Path
) -> None:
    settings = with_topics(private_broker, "sigterm", tmp_path / "state")
    stream = numbered_inputs(30_000)
    first = worker(settings, tmp_path / "first.log").start()
    outputs = TopicReader(settings, settings.topics.canonical)
    try:
        wait_until(lambda: "Worker ready" in first.log_text(), 90, "the worker to start")
        produce(settings, settings.topics.raw, stream)
        wait_until(lambda: len(output_seqs(outputs)) > 0, 60, "the first outputs")
        private_broker.stop()
        outage_began = time.monotonic()
        time.sleep(3.0)
        code, elapsed = sigterm_and_time(first, STOP_TIMEOUT + 20.0)
        outage = time.monotonic() - outage_began
        log = first.log_text()
        assert code == 0 and elapsed <= STOP_TIMEOUT, (code, elapsed, log[-3000:])
        uncommitted = reported_uncommitted(log)
        assert uncommitted is not None, log[-3000:]
        [(message, repeats)] = log_problems(log).most_common(1)
        assert repeats <= outage / DEFAULT_INTERVAL + 2, (repeats, message)

        private_broker.start()
        second = worker(settings, tmp_path / "second.log").start()
        try:
            wait_until(
                lambda: output_seqs(outputs) == set(range(len(stream))),
                OUTPUT_WAIT,
                "every input to have an output after the outage",
                lambda: (
                    f"{len(stream) - len(output_seqs(outputs))} missing; "
                    f"log: {second.log_text()[-2000:]}"
                ),
            )
        finally:
            second.stop()
        outputs.poll(1.0)
        written_twice = len(outputs.records) - len(stream)
        assert written_twice <= uncommitted, (written_twice, uncommitted)
    finally:
        private_broker.start()
        first.kill()
        outputs.close()


def test_a_worker_started_during_an_outage_waits_then_processes_everything(
    private_broker: LocalBroker, tmp_path: Path
) -> None:
    settings = with_topics(private_broker, "late", tmp_path / "state")
    stream = numbered_inputs(2000)
    private_broker.stop()
    quitter = worker(settings, tmp_path / "quitter.log").start()
    waiter = worker(settings, tmp_path / "waiter.log").start()
    try:
        wait_until(
            lambda: "waiting for Kafka at" in quitter.log_text(),
            60,
            "the first worker to say it waits",
        )
        code, elapsed = sigterm_and_time(quitter, STOP_TIMEOUT + 20.0)
        assert code == 0 and elapsed <= STOP_TIMEOUT, (code, elapsed, quitter.log_text())
        assert "stopped while waiting for Kafka" in quitter.log_text()

        wait_until(
            lambda: "waiting for Kafka at" in waiter.log_text(),
            60,
            "the second worker to say it waits",
        )
        assert waiter.alive(), waiter.log_text()[-3000:]
        private_broker.start()
        # The broker goes away again just as the worker starts its consumers.
        wait_until(lambda: "stops within" in waiter.log_text(), 90, "the worker to start")
        private_broker.stop()
        time.sleep(5.0)
        private_broker.start()
        produce(settings, settings.topics.raw, stream)
        with TopicReader(settings, settings.topics.canonical) as outputs:
            wait_until(
                lambda: output_seqs(outputs) == set(range(len(stream))),
                OUTPUT_WAIT,
                "every input to have an output",
                lambda: (
                    f"{len(stream) - len(output_seqs(outputs))} missing; alive: "
                    f"{waiter.alive()}; why it stopped: {stop_lines(waiter.log_text())}; "
                    f"log: {waiter.log_text()[-2000:]}"
                ),
            )
        assert waiter.alive(), waiter.log_text()[-3000:]
    finally:
        private_broker.start()
        quitter.kill()
        waiter.stop()
