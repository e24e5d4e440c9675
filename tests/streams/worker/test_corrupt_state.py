"""A worker whose state directory was left corrupt (a crash, a full disk) starts all the
same, on the real broker: its table stores that do not open are removed and restored from
their changelogs, its live-maps stores are emptied at every start anyway, and it
canonicalizes what comes next. Before, Faust crashed the worker at every start."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from streams.kafka.admin import ensure_topics
from streams.settings import Settings
from testkit.tools import TopicReader, WorkerProcess, delete_topics, isolated_settings, produce

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]


def wait_for(reader: TopicReader, count: int, worker: WorkerProcess) -> None:
    deadline = time.monotonic() + 90
    while len(reader.records) < count:
        assert worker.alive() and time.monotonic() < deadline, worker.log_digest()
        reader.poll(0.5)


def test_a_worker_restarts_on_corrupt_stores(bootstrap: str, tmp_path: Path) -> None:
    settings = isolated_settings(
        Settings.from_env({"KAFKA_BOOTSTRAP_SERVERS": bootstrap}),
        "corrupt",
        tmp_path / "state",
        partitions=2,
    )
    ensure_topics(settings)
    urls = [f"https://s{i % 7}.example/p/{i}?id={i}&utm_source=x".encode() for i in range(200)]
    outputs = TopicReader(settings, settings.topics.canonical)
    try:
        produce(settings, settings.topics.raw, urls[:100])
        first = WorkerProcess(settings, "canonicalize", tmp_path / "first.log").start()
        wait_for(outputs, 100, first)
        deadline = time.monotonic() + 60
        while not (tables := sorted(settings.state_dir.glob("*/tables/*.db/CURRENT"))):
            assert time.monotonic() < deadline, first.log_digest()
            time.sleep(0.5)
        assert first.stop() == 0, first.log_digest()
        stores = sorted(settings.state_dir.rglob("CURRENT"))
        tables = [path.parent for path in tables]
        for path in stores:
            path.write_bytes(b"garbage")

        second = WorkerProcess(settings, "canonicalize", tmp_path / "second.log").start()
        produce(settings, settings.topics.raw, urls[100:])
        wait_for(outputs, 200, second)
        time.sleep(5)  # the pattern-stats agent has its partitions, stores opened
        log = second.log_text()
        assert second.alive() and "Crashed" not in log, second.log_digest()
        removed = next(
            (line for line in log.splitlines() if "table stores that do not open" in line), ""
        )
        assert all(f"{table} (Corruption" in removed for table in tables), second.log_digest()
        assert second.stop() == 0, second.log_digest()
    finally:
        outputs.close()
        delete_topics(settings)
