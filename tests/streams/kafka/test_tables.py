"""A table partition's RocksDB that does not open is removed before Faust starts, so that
Faust restores it from its changelog instead of crashing the worker at every start; a
sound store, and one locked by a running process, are kept as they are. Real RocksDB
(rocksdict), no Kafka: the worker's restart on such a store is tested in
tests/streams/worker/test_corrupt_state.py."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from rocksdict import Options, Rdict

from streams.kafka.tables import discard_corrupt_stores


def store(path: Path, **items: bytes) -> None:
    db = Rdict(str(path), Options(raw_mode=True))
    for key, value in items.items():
        db[key.encode()] = value
    db.close()


def test_only_the_stores_that_do_not_open_are_removed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store(tmp_path / "pattern-stats-0.db", a=b"1")
    store(tmp_path / "pattern-stats-1.db", b=b"2")
    store(tmp_path / "probe-demand-0.db", c=b"3")
    (tmp_path / "pattern-stats-1.db" / "CURRENT").write_bytes(b"garbage")
    for manifest in (tmp_path / "probe-demand-0.db").glob("MANIFEST-*"):
        manifest.write_bytes(manifest.read_bytes()[:10])
    (tmp_path / "pattern-stats-backups").mkdir()
    with caplog.at_level(logging.WARNING, "streams.kafka.tables"):
        removed = discard_corrupt_stores(tmp_path)
    assert removed == [tmp_path / "pattern-stats-1.db", tmp_path / "probe-demand-0.db"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "pattern-stats-0.db",
        "pattern-stats-backups",
    ]
    kept = Rdict(str(tmp_path / "pattern-stats-0.db"), Options(raw_mode=True))
    assert kept[b"a"] == b"1"
    kept.close()
    assert caplog.text.count("restored from their changelogs") == 1
    assert "pattern-stats-1.db (Corruption" in caplog.text
    assert "probe-demand-0.db (Corruption" in caplog.text


def test_a_store_open_in_a_running_process_is_left_alone(tmp_path: Path) -> None:
    store(tmp_path / "pattern-stats-0.db", a=b"1")
    running = Rdict(str(tmp_path / "pattern-stats-0.db"), Options(raw_mode=True))
    try:
        assert discard_corrupt_stores(tmp_path) == []
        assert running[b"a"] == b"1"
    finally:
        running.close()


def test_no_folder_no_store(tmp_path: Path) -> None:
    assert discard_corrupt_stores(tmp_path / "missing") == []
