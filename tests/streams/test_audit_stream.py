"""Audits in the stream, on the real broker: a worker process, a loopback store, real topics."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest

from miqps.maps import parse_map
from simweb.store import serve_store, store_host, store_urls, wrong_map
from streams.kafka.admin import ensure_topics
from streams.kafka.clients import read_compacted
from streams.settings import Settings
from testkit.tools import TopicReader, WorkerProcess, delete_topics, isolated_settings, produce
from tests.streams.support import assert_valid

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(360)]


@pytest.fixture
def store_proxy() -> Iterator[str]:
    yield from serve_store()


@pytest.fixture
def settings(bootstrap: str, store_proxy: str, tmp_path: Path) -> Iterator[Settings]:
    base = Settings.from_env({"KAFKA_BOOTSTRAP_SERVERS": bootstrap})
    isolated = isolated_settings(
        base,
        "audit",
        tmp_path / "state",
        proxy=store_proxy,
        partitions=2,
        probe_rate_per_host=200.0,
    )
    yield isolated
    delete_topics(isolated)


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.5)


def test_a_wrongly_dropped_parameter_is_restored_by_an_audit_and_published(
    settings: Settings, tmp_path: Path
) -> None:
    host = store_host(7, 5)  # size changes 5% of the products
    wrong = wrong_map(host)
    ensure_topics(settings)
    produce(settings, settings.topics.maps, [wrong.dumps().encode()], [host.encode()])
    urls = store_urls(host, 20_000, 4000, seed=7)
    worker = WorkerProcess(settings, "canonicalize,probe", tmp_path / "worker.log").start()
    updates = TopicReader(settings, settings.topics.map_updates)
    history = TopicReader(settings, settings.topics.map_history)

    def audit_records(poll: bool = True) -> list[dict[str, object]]:
        if poll:
            updates.poll(0.5)
        records = [orjson.loads(value) for _, value, _ in updates.records if value is not None]
        return [record for record in records if record["request_reason"] == "audit"]

    try:
        produce(settings, settings.topics.raw, [url.url.encode() for url in urls])
        wait_until(lambda: bool(audit_records()), 240, "an audit's map update")
        assert worker.alive(), worker.log_text()[-3000:]
        wait_until(lambda: history.wait_for(1, 0.5), 30, "the map history")
    finally:
        worker.stop()
        updates.poll(0.5)
        updates.close()
        history.poll(0.5)
        history.close()

    records = audit_records(poll=False)
    for record in records:
        assert_valid("map-update", record)
        assert record["accepted"] is True
        assert record["version_after"] == wrong.version + 1
        assert "size" in record["kept_after"]  # type: ignore[operator]
        assert record["flipped_to_dropped"] == []
    assert {record["pattern"] for record in records} == {"/product?id&ref&size", "/product?id&size"}
    versions = [orjson.loads(value) for _, value, _ in history.records if value is not None]
    restored = [version for version in versions if version["version"] == wrong.version + 1]
    assert restored and restored[0]["note"] == "audit"
    live = {
        key: parse_map(value)
        for key, value in read_compacted(settings, settings.topics.maps)
        if key is not None and value is not None
    }[host.encode()]
    assert live.version == wrong.version + 1
    assert live.patterns["/product?id&ref&size"].kept == {"id", "size"}
    assert live.patterns["/product?id&ref&size"].dropped == {"ref"}
