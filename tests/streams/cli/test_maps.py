"""``miqps maps``: the current maps, and an operator's history, rollback, freeze, unfreeze
and publish, run through ``miqps.cli.main`` on the real broker."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from miqps.cli import main
from miqps.maps import DomainMap
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
