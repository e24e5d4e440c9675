"""A worker whose state directory's disk fills up stops with one clear line and exit code
74, on the real broker, and loses nothing: started again with room, it emits every input.

The state directory is a tmpfs of 1 MiB mounted for the test (which needs root, as CI and
the development machine have; elsewhere the test is skipped, saying why). The maps
published fill it: the live-maps stores of both processes and the table stores write to it.
"""

from __future__ import annotations

import random
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from streams.kafka.admin import ensure_topics
from streams.settings import Settings
from streams.worker.lifecycle import DISK_FULL_EXIT_CODE
from testkit.tools import TopicReader, WorkerProcess, delete_topics, isolated_settings, produce
from testkit.urlgen import build_maps, generate
from tests.streams.maps.test_live_store_worker import publish

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "small"
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_a_full_disk_stops_the_worker_clearly_and_loses_nothing(
    bootstrap: str, tmp_path: Path, small_disk: Path
) -> None:
    settings = isolated_settings(
        Settings.from_env({"KAFKA_BOOTSTRAP_SERVERS": bootstrap}),
        "fulldisk",
        small_disk / "state",
        partitions=2,
    )
    ensure_topics(settings)
    urls, sites = generate(3_000, seed=5)
    maps = build_maps(sites, random.Random(6))
    assert sum(len(m.dumps()) for m in maps) > 1024 * 1024, "the maps must not fit"
    inputs = urls[:500]
    outputs = TopicReader(settings, settings.topics.canonical)
    try:
        full = WorkerProcess(settings, "canonicalize", tmp_path / "full.log").start()
        publish(settings, maps)
        produce(settings, settings.topics.raw, (url.encode() for url in inputs))
        deadline = time.monotonic() + 120
        while full.alive():
            assert time.monotonic() < deadline, full.log_digest()
            time.sleep(0.5)
        code = full.stop()
        log = full.log_text()
        assert code == DISK_FULL_EXIT_CODE, full.log_digest()
        reported = [line for line in log.splitlines() if "worker: the disk is full" in line]
        assert len(reported) == 1, full.log_digest()
        assert "No space left on device" in reported[0] and "Nothing is lost" in reported[0]
        assert str(settings.state_dir) in reported[0]
        assert "failed on a bug" not in log, "a full disk is not a bug of ours"

        roomy = settings.with_overrides(state_dir=tmp_path / "state")
        again = WorkerProcess(roomy, "canonicalize", tmp_path / "again.log").start()
        seen: set[str] = set()
        deadline = time.monotonic() + 120
        while not set(inputs) <= seen:
            assert again.alive() and time.monotonic() < deadline, again.log_digest()
            outputs.poll(0.5)
            seen = {orjson.loads(record or b"")["url"] for _, record, _ in outputs.records}
        assert again.stop() == 0, again.log_digest()
    finally:
        outputs.close()
        delete_topics(settings)
