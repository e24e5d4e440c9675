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

import re
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from streams.kafka import ensure_topics
from streams.localbroker import LocalBroker
from streams.lograte import DEFAULT_INTERVAL
from streams.settings import Settings
from streams.tools import TopicReader, WorkerProcess, isolated_settings, produce

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

STOP_TIMEOUT = 10.0
LOG_LINE = re.compile(r"^\[([^]]+)\] \[(\d+)\] \[(WARNING|ERROR|CRITICAL)\] (.*)$")
SUPPRESSED_NOTE = re.compile(r" \[\d+ more like this in the last \d+s\]")


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.2)


def inputs(count: int) -> list[bytes]:
    return [orjson.dumps({"url": f"https://d{n % 7}.example/p?id={n}&utm_source=s{n % 3}",
                          "seq": n}) for n in range(count)]


def seqs(reader: TopicReader) -> set[int]:
    reader.poll(0.3)
    return {orjson.loads(value)["meta"]["seq"] for _, value, _ in reader.records
            if value is not None}


def outage_settings(broker: LocalBroker, label: str, state: Path) -> Settings:
    base = Settings.from_env({"KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap})
    return isolated_settings(base, label, state, partitions=2)


def worker(settings: Settings, log: Path) -> WorkerProcess:
    return WorkerProcess(settings, "canonicalize,probe", log,
                         {"MIQPS_STOP_TIMEOUT": str(STOP_TIMEOUT)})


def sigterm_and_time(process: WorkerProcess, limit: float) -> tuple[int | None, float]:
    """Send SIGTERM, wait up to ``limit`` s; (exit code or None if still alive, seconds)."""
    assert process.process is not None
    began = time.monotonic()
    process.process.send_signal(signal.SIGTERM)
    try:
        code = process.process.wait(limit)
    except subprocess.TimeoutExpired:
        code = None
    elapsed = time.monotonic() - began
    process.kill()
    return code, elapsed


def worst_repeats(log_text: str) -> tuple[int, str]:
    """The most times one warning or error (digits masked, per process) was written."""
    counts: Counter[tuple[str, str, str]] = Counter()
    for line in log_text.splitlines():
        if line.startswith("%"):  # librdkafka writing to stderr by itself
            counts[("librdkafka", "stderr", re.sub(r"\d+", "#", line[:120]))] += 1
            continue
        match = LOG_LINE.match(line)
        if match:
            message = SUPPRESSED_NOTE.sub("", match[4])
            counts[(match[2], match[3], re.sub(r"\d+", "#", message))] += 1
    if not counts:
        return 0, ""
    key, count = counts.most_common(1)[0]
    return count, " ".join(key)


def test_sigterm_with_the_broker_gone_stops_in_time_and_loses_nothing(
    private_broker: LocalBroker, tmp_path: Path
) -> None:
    settings = outage_settings(private_broker, "sigterm", tmp_path / "state")
    ensure_topics(settings)
    stream = inputs(30_000)
    first = worker(settings, tmp_path / "first.log").start()
    outputs = TopicReader(settings, settings.topics.canonical)
    try:
        wait_until(lambda: "Worker ready" in first.log_text(), 90, "the worker to start")
        produce(settings, settings.topics.raw, stream)
        wait_until(lambda: len(seqs(outputs)) > 0, 60, "the first outputs")
        private_broker.stop()
        outage_began = time.monotonic()
        time.sleep(3.0)
        code, elapsed = sigterm_and_time(first, STOP_TIMEOUT + 20.0)
        outage = time.monotonic() - outage_began
        log = first.log_text()
        assert code == 0 and elapsed <= STOP_TIMEOUT, (code, elapsed, log[-3000:])
        assert re.search(r"consumed inputs have no committed offset and will be delivered "
                         r"again|Every consumed input has its offset committed", log), log[-3000:]
        repeats, message = worst_repeats(log)
        assert repeats <= outage / DEFAULT_INTERVAL + 2, (repeats, message)

        private_broker.start()
        second = worker(settings, tmp_path / "second.log").start()
        try:
            wait_until(lambda: seqs(outputs) == set(range(len(stream))), 180,
                       "every input to have an output after the outage")
        finally:
            second.stop()
    finally:
        private_broker.start()
        first.kill()
        outputs.close()


def test_a_worker_started_during_an_outage_waits_then_processes_everything(
    private_broker: LocalBroker, tmp_path: Path
) -> None:
    settings = outage_settings(private_broker, "late", tmp_path / "state")
    ensure_topics(settings)
    stream = inputs(2000)
    private_broker.stop()
    quitter = worker(settings, tmp_path / "quitter.log").start()
    waiter = worker(settings, tmp_path / "waiter.log").start()
    try:
        wait_until(lambda: "waiting for Kafka at" in quitter.log_text(), 60,
                   "the first worker to say it waits")
        code, elapsed = sigterm_and_time(quitter, STOP_TIMEOUT + 20.0)
        assert code == 0 and elapsed <= STOP_TIMEOUT, (code, elapsed, quitter.log_text())
        assert "stopped while waiting for Kafka" in quitter.log_text()

        wait_until(lambda: "waiting for Kafka at" in waiter.log_text(), 60,
                   "the second worker to say it waits")
        assert waiter.alive(), waiter.log_text()[-3000:]
        private_broker.start()
        # The broker goes away again just as the worker starts its consumers.
        wait_until(lambda: "stops within" in waiter.log_text(), 90, "the worker to start")
        private_broker.stop()
        time.sleep(5.0)
        private_broker.start()
        produce(settings, settings.topics.raw, stream)
        with TopicReader(settings, settings.topics.canonical) as outputs:
            wait_until(lambda: seqs(outputs) == set(range(len(stream))), 180,
                       "every input to have an output")
        assert waiter.alive(), waiter.log_text()[-3000:]
    finally:
        private_broker.start()
        quitter.kill()
        waiter.stop()
