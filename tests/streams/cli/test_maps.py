"""``miqps maps``: the current maps, and an operator's history, rollback, freeze, unfreeze
and publish, run through ``miqps.cli.main`` on the real broker."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from miqps.cli import main
from miqps.maps import DomainMap, write_maps
from streams.kafka.admin import ensure_topics
from streams.messages import MapVersion
from streams.settings import Settings
from testkit.tools import (
    TopicReader,
    committed_in_transactions,
    delete_topics,
    isolated_settings,
)
from tests.streams.maps.test_history import (
    DOMAIN,
    PATTERN,
    a_map,
    current_map,
    maps_command,
    maps_file,
)
from tests.streams.support import assert_valid

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def settings(bootstrap: str, tmp_path: Path) -> Iterator[Settings]:
    base = Settings.from_env({"KAFKA_BOOTSTRAP_SERVERS": bootstrap})
    isolated = isolated_settings(base, "history", tmp_path / "state", partitions=2)
    ensure_topics(isolated)
    yield isolated
    delete_topics(isolated)


@pytest.mark.kafka
@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_history_rollback_freeze_and_their_errors_through_the_commands(
    settings: Settings,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    guarantee: str,
) -> None:
    monkeypatch.setenv("MIQPS_PROCESSING_GUARANTEE", guarantee)
    for number, keep_ref in ((1, False), (2, True)):
        code, out, err = maps_command(
            settings,
            capsys,
            "publish",
            maps_file(tmp_path / f"v{number}.jsonl", a_map(7, keep_ref)),
            "--reason",
            "seed",
        )
        assert (code, out) == (0, f"drift.test: version {number} published\n"), err

    code, out, err = maps_command(settings, capsys, "history", DOMAIN)
    assert code == 0, err
    lines = [re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "AT", line) for line in out.splitlines()]
    assert lines == [
        "v1  AT  publish  1 patterns  (v1.jsonl: seed)",
        "    /p?id&ref: added (keeps id; drops ref)",
        "v2  AT  publish  1 patterns  (v2.jsonl: seed)",
        "    /p?id&ref: now keeps ref",
    ]

    updates = TopicReader(settings, settings.topics.map_updates)
    history = TopicReader(settings, settings.topics.map_history)
    try:
        code, out, err = maps_command(
            settings, capsys, "rollback", DOMAIN, "--to", "1", "--reason", "ref was noise after all"
        )
        assert code == 0, err
        assert out.startswith(
            "drift.test: version 3 published (rollback to version 1: ref "
            "was noise after all; not frozen; 1 patterns changed)"
        )
        live = current_map(settings)
        assert live.version == 3 and live.patterns == a_map(1, False).patterns
        assert updates.wait_for(1, 20) and history.wait_for(3, 20)
        [(_, audit_value, _)] = updates.records
        audit = orjson.loads(audit_value or b"")
        assert_valid("map-update", audit)
        assert audit["request_reason"] == "rollback" and audit["accepted"]
        assert audit["reason"].startswith("operator's rollback to version 1")
        assert (audit["version_before"], audit["version_after"]) == (2, 3)
        assert audit["flipped_to_dropped"] == ["ref"]
        records = [MapVersion.from_bytes(value) for _, value, _ in history.records]
        assert [(r.version, r.produced_by) for r in records] == [
            (1, "publish"),
            (2, "publish"),
            (3, "rollback"),
        ]
    finally:
        updates.close()
        history.close()

    code, out, err = maps_command(settings, capsys, "freeze", DOMAIN)
    assert (code, current_map(settings).frozen) == (0, True), err
    assert "version 4 published (freeze; frozen" in out
    code, out, err = maps_command(settings, capsys, "history", DOMAIN, "--json")
    rows = [orjson.loads(line) for line in out.splitlines()]
    assert [(row["version"], row["frozen"], row["changes"]) for row in rows[-2:]] == [
        (
            3,
            False,
            [
                {
                    "pattern": PATTERN,
                    "change": "changed",
                    "now_kept": [],
                    "now_dropped": ["ref"],
                    "text": "/p?id&ref: now drops ref",
                }
            ],
        ),
        (4, True, []),
    ]
    code, out, err = maps_command(settings, capsys, "freeze", DOMAIN)
    assert (code, out) == (0, "drift.test: version 4 is frozen already; nothing published\n")
    code, out, err = maps_command(settings, capsys, "unfreeze", DOMAIN)
    assert (code, current_map(settings).version, current_map(settings).frozen) == (0, 5, False)

    code, out, err = maps_command(settings, capsys, "rollback", DOMAIN, "--to", "9")
    assert (code, out) == (1, "")
    assert "drift.test has no kept version 9 (kept: 1, 2, 3, 4, 5)" in err
    code, out, err = maps_command(settings, capsys, "history", "nowhere.example")
    assert code == 1 and "unknown domain nowhere.example" in err
    assert "Traceback" not in err

    published = (settings.topics.maps, settings.topics.map_history, settings.topics.map_updates)
    in_transactions = [committed_in_transactions(settings, topic) for topic in published]
    assert in_transactions == [guarantee == "exactly_once"] * 3, in_transactions


@pytest.mark.slow  # the client's timeout
def test_a_broker_that_does_not_answer_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    for command in (["history", DOMAIN], ["rollback", DOMAIN, "--to", "1"]):
        code = main(["maps", *command, "--bootstrap-servers", "127.0.0.1:1", "--timeout", "2"])
        err = capsys.readouterr().err
        assert code == 3, err
        assert f"miqps maps {command[0]}: Kafka at 127.0.0.1:1:" in err
        assert "Traceback" not in err


@pytest.mark.kafka
def test_maps_prints_the_current_map_of_each_domain(
    settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for number, keep_ref in ((1, False), (2, True)):
        path = maps_file(tmp_path / f"v{number}.jsonl", a_map(7, keep_ref))
        assert maps_command(settings, capsys, "publish", path)[0] == 0
    code, out, err = maps_command(settings, capsys)
    assert code == 0, err
    [line] = out.splitlines()
    assert DomainMap.from_json(orjson.loads(line)) == current_map(settings)
    assert current_map(settings).version == 2
    assert maps_command(settings, capsys, " DRIFT.test. ")[:2] == (0, out)
    code, out, err = maps_command(settings, capsys, "nowhere.example")
    assert (code, out, err) == (1, "", "miqps maps: no map for nowhere.example\n")


@pytest.mark.kafka
@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_publish_takes_a_file_in_batches_after_each_domain_s_current_version(
    settings: Settings,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    guarantee: str,
) -> None:
    """A file of more domains than one scan of the topics and one batch take: each domain
    gets the version after its current one (a frozen one stays frozen; one whose map was
    removed follows its newest kept version), once, in domain order."""
    from streams.cli import maps as maps_cli
    from streams.kafka.clients import read_compacted
    from streams.maps.history import ProducerSink, publish_map

    monkeypatch.setenv("MIQPS_PROCESSING_GUARANTEE", guarantee)
    monkeypatch.setattr(maps_cli, "PUBLISH_SCAN_DOMAINS", 3)
    monkeypatch.setattr(maps_cli, "PUBLISH_BATCH_DOMAINS", 2)
    domains = [f"d{number}.test" for number in range(7)]
    at = "2026-12-01T00:00:00Z"
    sink = ProducerSink(settings)
    dropping, keeping = a_map(1, keep_ref=False).patterns, a_map(1, keep_ref=True).patterns

    async def seed() -> None:
        for domain_map in (
            DomainMap("d1.test", 4, at, dropping),
            DomainMap("d2.test", 2, at, dropping, frozen=True),
            DomainMap("d5.test", 9, at, dropping),
        ):
            await publish_map(sink, settings.topics, domain_map, "publish")

    asyncio.run(seed())
    sink.producer.produce(settings.topics.maps, None, b"d5.test")  # removed: history remains
    sink.flush(20)
    file = tmp_path / "many.jsonl"
    write_maps(file, [DomainMap(domain, 1, at, keeping) for domain in domains])
    code, out, err = maps_command(settings, capsys, "publish", str(file))
    assert code == 0, err
    expected = {domain: 1 for domain in domains} | {"d1.test": 5, "d2.test": 3, "d5.test": 10}
    assert out.splitlines() == [f"{d}: version {expected[d]} published" for d in domains]
    published: dict[str, list[DomainMap]] = {}
    for key, value in read_compacted(settings, settings.topics.maps):
        if value is not None and key is not None:
            published.setdefault(key.decode(), []).append(DomainMap.from_json(orjson.loads(value)))
    newest = {domain: maps[-1] for domain, maps in published.items()}
    assert {d: newest[d].version for d in domains} == expected
    assert [d for d in domains if newest[d].frozen] == ["d2.test"]
    assert all(newest[d].patterns == keeping for d in domains)
    seeded = {"d1.test", "d2.test", "d5.test"}
    assert {d: len(maps) for d, maps in published.items()} == {
        d: 2 if d in seeded else 1 for d in domains
    }


@pytest.mark.kafka
def test_publish_refuses_a_file_with_a_bad_line_and_publishes_nothing(
    settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from streams.kafka.clients import read_compacted

    file = tmp_path / "bad.jsonl"
    file.write_text(a_map(1, keep_ref=True).dumps() + "\n" + '{"domain": "x.test"\n')
    code, out, err = maps_command(settings, capsys, "publish", str(file))
    assert code == 1 and out == ""
    assert f"{file}:2: not a MIQPS map (json)" in err
    assert list(read_compacted(settings, settings.topics.maps)) == []
