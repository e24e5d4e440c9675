import json
from pathlib import Path

import jsonschema

from miqps.maps import (
    DomainMap,
    Layer,
    ParamEvidence,
    PatternDecision,
    Verification,
    anomaly_gate,
    merge_update,
    read_maps,
    write_maps,
)

SCHEMA = json.loads(
    (Path(__file__).resolve().parents[2] / "schemas" / "miqps-map.schema.json").read_text()
)


def decision(kept: set[str], dropped: set[str]) -> PatternDecision:
    params = {n: ParamEvidence("keep", Layer.LEARNED, 3, 3, 0, 0) for n in kept}
    params |= {n: ParamEvidence("drop", Layer.LEARNED, 6, 0, 6, 0) for n in dropped}
    return PatternDecision(frozenset(kept), frozenset(dropped), params,
                           Verification(2, 0, 0, []), "2026-12-02T00:00:00Z", 10)


def a_map(version: int, patterns: dict[str, PatternDecision]) -> DomainMap:
    return DomainMap("shop.example", version, "2026-12-02T00:00:00Z", patterns)


def test_map_round_trips_through_jsonl_and_matches_the_schema(tmp_path: Path) -> None:
    original = a_map(3, {"/p/*?id&utm_source": decision({"id"}, {"utm_source"})})
    jsonschema.validate(original.to_json(), SCHEMA)
    path = tmp_path / "maps.jsonl"
    write_maps(path, [original])
    loaded = read_maps(path)["shop.example"]
    assert loaded.to_json() == original.to_json()


def test_schema_rejects_a_map_without_evidence() -> None:
    document = a_map(1, {"/p/*?id": decision({"id"}, set())}).to_json()
    del document["patterns"]["/p/*?id"]["params"]
    try:
        jsonschema.validate(document, SCHEMA)
    except jsonschema.ValidationError:
        return
    raise AssertionError("a map without evidence passed the schema")


def test_first_map_is_accepted_and_versions_increase() -> None:
    learned = a_map(0, {"/p/*?id&ref": decision({"id"}, {"ref"})})
    first = merge_update(None, learned)
    assert first.version == 1
    assert anomaly_gate(None, first, 0.5).accepted
    assert merge_update(first, learned).version == 2


def test_anomaly_gate_rejects_an_update_that_drops_most_kept_parameters() -> None:
    old = a_map(4, {
        "/p/*?id&v": decision({"id", "v"}, set()),
        "/s?page&q": decision({"page", "q"}, set()),
    })
    broken_site = a_map(0, {
        "/p/*?id&v": decision(set(), {"id", "v"}),
        "/s?page&q": decision({"q"}, {"page"}),
    })
    verdict = anomaly_gate(old, merge_update(old, broken_site), 0.5)
    assert not verdict.accepted
    assert len(verdict.flipped) == 3
    assert "3 of 4" in verdict.reason


def test_anomaly_gate_accepts_a_small_drift() -> None:
    old = a_map(1, {"/p/*?id&v": decision({"id", "v"}, set()),
                    "/s?page&q": decision({"page", "q"}, set())})
    drift = a_map(0, {"/p/*?id&v": decision({"id"}, {"v"})})
    verdict = anomaly_gate(old, merge_update(old, drift), 0.5)
    assert verdict.accepted
    assert verdict.flipped == (("/p/*?id&v", "v"),)
