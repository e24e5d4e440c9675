"""A worker whose state directory was left corrupt (a crash, a full disk) starts all the
same, on the real broker: its table stores that do not open are removed and restored from
their changelogs, its live-map stores that do not open are removed and built again from the
maps topic (one warning each), and it canonicalizes what comes next, with the maps. Before,
Faust crashed the worker at every start."""

from __future__ import annotations

import random
import time
from pathlib import Path

import orjson
import pytest

from streams.kafka.admin import ensure_topics
from streams.maps.live import LIVE_MAPS_FOLDER
from streams.settings import Settings
from testkit.tools import TopicReader, WorkerProcess, delete_topics, isolated_settings, produce
from testkit.urlgen import build_maps, generate
from tests.streams.maps.test_live_store_worker import publish

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
    _, sites = generate(2_000, seed=5)
    maps = build_maps(sites[:4], random.Random(5))
    publish(settings, maps)
    # Per mapped domain, a URL of its first pattern's shape: canonicalized with its map.
    mapped = {
        m.domain: f"http://{m.domain}{next(iter(m.patterns)).split('?')[0].replace('*', '1')}"
        for m in maps
    }
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

        live_stores = [
            settings.state_dir / LIVE_MAPS_FOLDER / process for process in ("front", "worker")
        ]
        assert all(store / "CURRENT" in stores for store in live_stores), stores

        second = WorkerProcess(settings, "canonicalize", tmp_path / "second.log").start()
        produce(settings, settings.topics.raw, urls[100:])
        produce(settings, settings.topics.raw, (url.encode() for url in mapped.values()))
        wait_for(outputs, 200 + len(mapped), second)
        time.sleep(5)  # the pattern-stats agent has its partitions, stores opened
        log = second.log_text()
        assert second.alive() and "Crashed" not in log, second.log_digest()
        removed = next(
            (line for line in log.splitlines() if "table stores that do not open" in line), ""
        )
        assert all(f"{table} (Corruption" in removed for table in tables), second.log_digest()
        for store in live_stores:
            warned = [
                line
                for line in log.splitlines()
                if f"live maps: the store in {store} does not open (Corruption" in line
            ]
            assert len(warned) == 1 and "[WARNING]" in warned[0], second.log_digest()
        documents = [orjson.loads(record or b"") for _, record, _ in outputs.records]
        versions = {d["domain"]: d["map_version"] for d in documents if d["url"] in mapped.values()}
        assert versions == {m.domain: m.version for m in maps}, second.log_digest()
        assert second.stop() == 0, second.log_digest()
    finally:
        outputs.close()
        delete_topics(settings)
