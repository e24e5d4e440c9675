"""Map history, rollback and freeze: a real worker applying the ``miqps maps`` commands live,
on the real broker; and the publishing path's pure parts. The commands themselves are tested
in tests/streams/cli/test_maps.py."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest

from miqps.cli import main
from miqps.maps import DomainMap, Layer, ParamEvidence, PatternDecision, Verification, write_maps
from streams.kafka.admin import ensure_topics, topic_specs
from streams.kafka.clients import read_compacted
from streams.maps.history import (
    History,
    Publication,
    history_rows,
    probe_producer,
    publish_map,
)
from streams.messages import FROZEN, MapUpdateRecord, MapVersion
from streams.settings import LearningPolicy, Settings, Topics
from testkit.tools import TopicReader, WorkerProcess, delete_topics, isolated_settings, produce
from tests.streams.conftest import DriftingSite
from tests.streams.support import assert_valid

DOMAIN = "drift.test"
PATTERN = "/p?id&ref"


def a_map(version: int, keep_ref: bool, decided_at: str = "2026-12-01T00:00:00Z") -> DomainMap:
    kept, dropped = ({"id", "ref"}, set()) if keep_ref else ({"id"}, {"ref"})
    params = {
        "id": ParamEvidence("keep", Layer.LEARNED, 6, 6, 0),
        "ref": ParamEvidence(
            "keep" if keep_ref else "drop",
            Layer.LEARNED,
            6,
            6 if keep_ref else 0,
            0 if keep_ref else 6,
        ),
    }
    decision = PatternDecision(
        frozenset(kept), frozenset(dropped), params, Verification(3), decided_at
    )
    return DomainMap(DOMAIN, version, decided_at, {PATTERN: decision})


async def test_a_map_is_published_with_its_history_record_first() -> None:
    sink, topics = Publication(), Topics.with_prefix("t.")
    await publish_map(sink, topics, a_map(4, False), "reverify", "reverify")
    [(history_topic, key, record), (maps_topic, map_key, document)] = sink.records
    assert (history_topic, maps_topic, key, map_key) == (
        "t.miqps.map-history",
        "t.miqps.maps",
        b"drift.test",
        b"drift.test",
    )
    version = MapVersion.from_bytes(record)
    assert_valid("map-history", orjson.loads(record))
    assert (version.version, version.produced_by) == (4, "reverify")
    assert version.domain_map() == DomainMap.from_json(orjson.loads(document)) == a_map(4, False)


def test_history_rows_diff_only_consecutive_versions() -> None:
    history = History(
        DOMAIN,
        [
            MapVersion.of(a_map(number, keep_ref), "publish")
            for number, keep_ref in ((2, False), (3, True), (5, False))
        ],
    )
    rows = history_rows(history)
    assert [row["changes"] for row in rows] == [
        None,
        [
            {
                "pattern": PATTERN,
                "change": "changed",
                "now_kept": ["ref"],
                "now_dropped": [],
                "text": "/p?id&ref: now keeps ref",
            }
        ],
        None,
    ]
    assert history.newest() == a_map(5, False)


def test_a_probe_update_is_a_reverify_only_when_every_accepted_pattern_was_one() -> None:
    def audit(reason: str, accepted: bool = True) -> MapUpdateRecord:
        return replace(
            MapUpdateRecord.undecided(DOMAIN, PATTERN, reason, 0, "", None, 0), accepted=accepted
        )

    assert probe_producer([audit("reverify"), audit("pooled", False)]) == ("reverify", "reverify")
    assert probe_producer([audit("reverify"), audit("enough-samples")]) == (
        "stream-probe",
        "enough-samples, reverify",
    )


def test_the_history_topic_keeps_versions_for_the_retention_set() -> None:
    def retention(days: float) -> str:
        settings = Settings().with_overrides(map_history_retention_days=days)
        [spec] = [spec for spec in topic_specs(settings) if spec.name == "miqps.map-history"]
        assert spec.config["cleanup.policy"] == "delete"
        return spec.config["retention.ms"]

    assert retention(90) == str(90 * 24 * 3600 * 1000)
    assert retention(0) == "-1"


def maps_command(
    settings: Settings, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    code = main(
        [
            "maps",
            *args,
            "--bootstrap-servers",
            settings.bootstrap_servers,
            "--topic-prefix",
            settings.app_id + ".",
            "--timeout",
            "20",
        ]
    )
    out, err = capsys.readouterr()
    return code, out, err


def maps_file(path: Path, domain_map: DomainMap) -> str:
    write_maps(path, [domain_map])
    return str(path)


def current_map(settings: Settings) -> DomainMap:
    maps = [
        value
        for key, value in read_compacted(settings, settings.topics.maps)
        if key == DOMAIN.encode() and value is not None
    ]
    return DomainMap.from_json(orjson.loads(maps[-1]))


@pytest.mark.kafka
@pytest.mark.timeout(300)
def test_a_worker_applies_a_rollback_live_and_learns_nothing_for_a_frozen_domain(
    bootstrap: str,
    drifting_web: tuple[DriftingSite, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, proxy = drifting_web
    base = Settings.from_env({"KAFKA_BOOTSTRAP_SERVERS": bootstrap})
    settings = isolated_settings(
        base,
        "rollback",
        tmp_path / "state",
        proxy=proxy,
        partitions=2,
        probe_rate_per_host=50.0,
        policy=LearningPolicy(rare_after=3.0, retry_after=60.0),
    )
    ensure_topics(settings)
    history = TopicReader(settings, settings.topics.map_history)
    updates = TopicReader(settings, settings.topics.map_updates)
    outputs = TopicReader(settings, settings.topics.canonical)
    worker = WorkerProcess(settings, "canonicalize,probe", tmp_path / "worker.log").start()

    def output_of(url: str, timeout: float = 30.0) -> dict[str, Any]:
        produce(settings, settings.topics.raw, [url.encode()])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            outputs.poll(0.2)
            for _, value, _ in outputs.records:
                document = orjson.loads(value or b"")
                if document["url"] == url:
                    return dict(document)
        raise AssertionError(f"no output for {url}: {worker.log_text()[-3000:]}")

    try:
        produce(
            settings,
            settings.topics.raw,
            [f"http://{DOMAIN}/p?id={n}&ref=r{n}".encode() for n in range(8)],
        )
        assert history.wait_for(1, 90), worker.log_text()[-3000:]
        learned = MapVersion.from_bytes(history.records[0][1])
        assert (learned.version, learned.produced_by) == (1, "stream-probe")
        assert learned.domain_map().patterns[PATTERN].dropped == {"ref"}

        # Decided now: a decision older than MIQPS_REVERIFY_AFTER would be reverified.
        published = a_map(1, True, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        assert (
            maps_command(
                settings, capsys, "publish", maps_file(tmp_path / "keep.jsonl", published)
            )[0]
            == 0
        )
        for attempt in range(60):
            kept = output_of(f"http://{DOMAIN}/p?id=1&ref=publish{attempt}")
            if kept["map_version"] == 2:
                break
            time.sleep(0.25)
        assert (kept["map_version"], kept["kept"]) == (2, ["id", "ref"])

        assert maps_command(settings, capsys, "rollback", DOMAIN, "--to", "1", "--freeze")[0] == 0
        for attempt in range(60):
            after = output_of(f"http://{DOMAIN}/p?id=1&ref=rollback{attempt}")
            if after["map_version"] == 3:
                break
            time.sleep(0.1)
        assert (after["map_version"], after["kept"], after["dropped"]) == (3, ["id"], ["ref"])

        produce(
            settings,
            settings.topics.raw,
            [f"http://{DOMAIN}/p?id={n}&lang=l{n}".encode() for n in range(8)],
        )

        def frozen_audits() -> list[dict[str, Any]]:
            updates.poll(0.3)
            return [
                document
                for _, value, _ in updates.records
                if (document := orjson.loads(value or b""))["reason"] == FROZEN
            ]

        deadline = time.monotonic() + 60
        while not frozen_audits() and time.monotonic() < deadline:
            pass
        [audit] = frozen_audits()
        assert_valid("map-update", audit)
        assert (audit["pattern"], audit["accepted"], audit["version_before"]) == (
            "/p?id&lang",
            False,
            3,
        )
        history.poll(1.0)
        assert [MapVersion.from_bytes(value).produced_by for _, value, _ in history.records] == [
            "stream-probe",
            "publish",
            "rollback",
        ]
        assert current_map(settings).version == 3
        assert worker.alive()
    finally:
        worker.stop()
        for reader in (history, updates, outputs):
            reader.close()
        delete_topics(settings)
