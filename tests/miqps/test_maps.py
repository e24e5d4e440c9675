import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from miqps.cli import main
from miqps.maps import (
    RULES,
    DomainMap,
    InvalidMap,
    Layer,
    ParamEvidence,
    PatternDecision,
    Verification,
    anomaly_gate,
    merge_update,
    parse_map,
    read_maps,
    write_maps,
)
from testkit.schemas import map_schema

SCHEMA = map_schema()


def decision(kept: set[str], dropped: set[str]) -> PatternDecision:
    params = {n: ParamEvidence("keep", Layer.LEARNED, 3, 3, 0, 0) for n in kept}
    params |= {n: ParamEvidence("drop", Layer.LEARNED, 6, 0, 6, 0) for n in dropped}
    return PatternDecision(
        frozenset(kept),
        frozenset(dropped),
        params,
        Verification(2, 0, 0, []),
        "2026-12-02T00:00:00Z",
        10,
    )


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
    old = a_map(
        4,
        {
            "/p/*?id&v": decision({"id", "v"}, set()),
            "/s?page&q": decision({"page", "q"}, set()),
        },
    )
    broken_site = a_map(
        0,
        {
            "/p/*?id&v": decision(set(), {"id", "v"}),
            "/s?page&q": decision({"q"}, {"page"}),
        },
    )
    verdict = anomaly_gate(old, merge_update(old, broken_site), 0.5)
    assert not verdict.accepted
    assert len(verdict.flipped) == 3
    assert "3 of 4" in verdict.reason


def test_anomaly_gate_accepts_a_small_drift() -> None:
    old = a_map(
        1, {"/p/*?id&v": decision({"id", "v"}, set()), "/s?page&q": decision({"page", "q"}, set())}
    )
    drift = a_map(0, {"/p/*?id&v": decision({"id"}, {"v"})})
    verdict = anomaly_gate(old, merge_update(old, drift), 0.5)
    assert verdict.accepted
    assert verdict.flipped == (("/p/*?id&v", "v"),)


def test_anomaly_gate_takes_a_parameter_kept_for_lack_of_evidence_as_a_first_decision() -> None:
    """Parameters kept only because their samples were too few, then dropped once the
    evidence came, were never decided: no flip while those kept on evidence hold. When
    those flip too, every kept parameter counts, as for a site that broke."""
    undecided = decision({"id", "ref", "sid"}, set())
    for name in ("ref", "sid"):
        undecided.params[name] = ParamEvidence("keep", Layer.INSUFFICIENT, 1, 0, 1, 0)
    old = a_map(2, {"/p?id&ref&sid": undecided})
    learned = a_map(0, {"/p?id&ref&sid": decision({"id"}, {"ref", "sid"})})
    verdict = anomaly_gate(old, merge_update(old, learned), 0.5)
    assert verdict.accepted, verdict.reason
    assert verdict.flipped == () and verdict.kept_before == 1
    broken = a_map(0, {"/p?id&ref&sid": decision(set(), {"id", "ref", "sid"})})
    verdict = anomaly_gate(old, merge_update(old, broken), 0.5)
    assert not verdict.accepted
    assert len(verdict.flipped) == 3 and verdict.kept_before == 3


# Loading maps from outside: every line is validated, and a bad one is named, not guessed.

PRODUCT_PAGES = "/p?id&itemid&utm_source"


def product_map(domain: str = "shop.example", version: int = 1) -> DomainMap:
    return DomainMap(
        domain,
        version,
        "2026-12-02T00:00:00Z",
        {PRODUCT_PAGES: decision({"id", "itemid"}, {"utm_source"})},
    )


def maps_file(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "maps.jsonl"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def tampered(change: Callable[[dict[str, Any]], object]) -> str:
    document = product_map().to_json()
    change(document)
    return json.dumps(document)


def set_pattern_field(name: str, value: object) -> Callable[[dict[str, Any]], object]:
    return lambda document: document["patterns"][PRODUCT_PAGES].__setitem__(name, value)


BROKEN_LINES = {
    "an array": ("[]", "schema"),
    "null": ("null", "schema"),
    "a string": ('"shop.example"', "schema"),
    "patterns as a list": (
        tampered(lambda d: d.__setitem__("patterns", [PRODUCT_PAGES])),
        "schema",
    ),
    "an infinite version": (
        tampered(lambda d: d.__setitem__("version", 1)).replace('"version": 1', '"version": 1e999'),
        "json",
    ),
    "a fractional version": (tampered(lambda d: d.__setitem__("version", 1.5)), "schema"),
    "kept as one string": (tampered(set_pattern_field("kept", "itemid")), "schema"),
    "nested 200,000 deep": ("[" * 200_000 + "]" * 200_000, "json"),
    "not UTF-8": ('{"domain": "caf\udce9"}', "json"),
    "a name neither kept nor dropped": (
        tampered(set_pattern_field("kept", ["itemid"])),
        "pattern names",
    ),
    "a name both kept and dropped": (
        tampered(set_pattern_field("dropped", ["id", "utm_source"])),
        "pattern names",
    ),
}


@pytest.mark.parametrize("name", BROKEN_LINES)
def test_a_broken_line_is_an_error_naming_the_file_the_line_and_the_rule(
    tmp_path: Path, name: str
) -> None:
    line, rule = BROKEN_LINES[name]
    path = tmp_path / "maps.jsonl"
    path.write_bytes(
        f"{product_map('ok.example').dumps()}\n{line}\n".encode("utf-8", "surrogateescape")
    )
    with pytest.raises(ValueError, match=r"maps\.jsonl:2: ") as raised:
        read_maps(path)
    assert f"({rule})" in str(raised.value)
    assert len(str(raised.value)) < 400 + len(str(path))


def test_a_second_line_for_a_domain_is_an_error_naming_the_first(tmp_path: Path) -> None:
    path = maps_file(tmp_path, product_map(version=1).dumps(), product_map(version=2).dumps())
    with pytest.raises(ValueError, match=r"maps.jsonl:2: .*one line per domain.*line 1"):
        read_maps(path)


def test_a_map_relabelled_with_another_domain_does_not_replace_that_domains_map(
    tmp_path: Path,
) -> None:
    relabelled = product_map("other.example", version=9).to_json()
    relabelled["domain"] = "shop.example"
    path = maps_file(tmp_path, product_map().dumps(), json.dumps(relabelled))
    with pytest.raises(ValueError, match=r"maps.jsonl:2: .*one line per domain"):
        read_maps(path)
    assert parse_map(product_map().dumps(), key="shop.example").version == 1
    with pytest.raises(InvalidMap, match=r"\(domain key\).*'shop.example' filed under"):
        parse_map(json.dumps(relabelled), key="other.example")


def test_skipping_invalid_lines_reports_each_and_keeps_every_valid_map(tmp_path: Path) -> None:
    path = maps_file(
        tmp_path,
        product_map("a.example").dumps(),
        "null",
        product_map("twice.example", 1).dumps(),
        product_map("b.example").dumps(),
        product_map("twice.example", 2).dumps(),
    )
    skipped: list[InvalidMap] = []
    maps = read_maps(path, skipped.append)
    assert sorted(maps) == ["a.example", "b.example"]
    assert [(error.where, error.rule) for error in skipped] == [
        (f"{path}:2", "schema"),
        (f"{path}:5", "one line per domain"),
    ]


def test_matrix_parameters_in_a_pattern_stay_valid(tmp_path: Path) -> None:
    matrix = DomainMap(
        "shop.example",
        1,
        "2026-12-02T00:00:00Z",
        {
            "/p/*?;jsessionid&id": decision({"id"}, {";jsessionid"}),
        },
    )
    jsonschema.validate(matrix.to_json(), SCHEMA)
    assert read_maps(maps_file(tmp_path, matrix.dumps()))["shop.example"] == matrix


def test_kept_as_a_string_never_merges_two_products(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = maps_file(tmp_path, tampered(set_pattern_field("kept", "itemid")))
    products = ["https://shop.example/p?id=7&itemid=1", "https://shop.example/p?id=7&itemid=2"]
    assert main(["canonicalize", "--maps", str(path), *products]) == 2
    stderr = capsys.readouterr().err
    assert f"{path}:1: not a MIQPS map (schema)" in stderr
    assert "kept" in stderr
    assert "Traceback" not in stderr
    assert main(["canonicalize", "--skip-invalid", "--maps", str(path), *products]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == products
    assert f"{path}:1" in captured.err
    assert "1 invalid map lines skipped, 0 maps read" in captured.err


def test_the_command_line_names_the_broken_line_and_exits_non_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = maps_file(tmp_path, product_map("a.example").dumps(), "[" * 200_000)
    assert main(["canonicalize", "--maps", str(path), "https://a.example/"]) == 2
    stderr = capsys.readouterr().err
    assert f"{path}:2: not a MIQPS map (json): depth limit exceeded" in stderr
    assert "--skip-invalid" in stderr


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("this is garbage", "not JSON (corrupted?): unexpected 'this is garbage' at column 1"),
        (
            product_map("b.example").dumps()[:500],
            "not JSON (truncated?): the line ends at column 500",
        ),
        (product_map("b.example").dumps()[:-1], "not JSON (truncated?)"),
    ],
    ids=["garbage", "cut inside a string", "cut at the last brace"],
)
def test_a_line_that_is_not_json_says_so_with_the_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, expected: str
) -> None:
    path = maps_file(tmp_path, product_map("a.example").dumps(), line)
    assert main(["canonicalize", "--maps", str(path), "https://a.example/"]) == 2
    stderr = capsys.readouterr().err
    assert f"{path}:2: not a MIQPS map (json): {expected}" in stderr
    assert "expected 'true'" not in stderr and "control character" not in stderr


def test_learn_with_skip_invalid_keeps_the_previous_file_before_rewriting_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = maps_file(tmp_path, product_map("a.example").dumps(), "{broken")
    previous = out.read_bytes()
    urls = tmp_path / "urls.txt"
    urls.write_text("")
    assert main(["learn", "--urls", str(urls), "--out", str(out), "--no-progress"]) == 2
    assert out.read_bytes() == previous
    assert f"{out}:2: not a MIQPS map (json)" in capsys.readouterr().err
    assert (
        main(["learn", "--urls", str(urls), "--out", str(out), "--no-progress", "--skip-invalid"])
        == 0
    )
    assert out.with_name("maps.jsonl.prev").read_bytes() == previous
    assert list(read_maps(out)) == ["a.example"]


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(
    path=st.lists(
        st.sampled_from(
            [
                "patterns",
                PRODUCT_PAGES,
                "kept",
                "params",
                "id",
                "verification",
                "decided_at",
                "domain",
                "version",
                "restored",
                "default_values",
                0,
            ]
        ),
        min_size=1,
        max_size=4,
    ),
    value=JSON_VALUES,
)
def test_any_tampering_is_either_a_map_of_exact_types_or_an_invalid_map(
    path: list[str | int], value: object
) -> None:
    document: Any = product_map().to_json()
    target = document
    for step in path[:-1]:
        if isinstance(target, dict) and step in target:
            target = target[step]
    if isinstance(target, dict):
        target[path[-1]] = value
    try:
        domain_map = parse_map(json.dumps(document))
    except InvalidMap as error:
        assert error.rule in RULES
        return
    for pattern in domain_map.patterns.values():
        assert all(isinstance(name, str) for name in pattern.kept | pattern.dropped)
        assert isinstance(domain_map.version, int)


def test_a_parameter_with_an_empty_name_is_accounted_for(tmp_path: Path) -> None:
    maps = [
        DomainMap(
            "empty-name.example",
            1,
            "2026-12-02T00:00:00Z",
            {"/*?": decision({""}, set()), "/a?&id": decision({"id"}, {""})},
        ),
        DomainMap("no-names.example", 1, "2026-12-02T00:00:00Z", {"/*?": decision(set(), set())}),
    ]
    assert sorted(read_maps(maps_file(tmp_path, *(m.dumps() for m in maps)))) == [
        "empty-name.example",
        "no-names.example",
    ]


def test_undecided_patterns_round_trip_and_a_map_without_them_still_loads(tmp_path: Path) -> None:
    original = a_map(2, {"/p/*?id&utm_source": decision({"id"}, {"utm_source"})})
    original.undecided = {"/account/*?id": "disallowed"}
    jsonschema.validate(original.to_json(), SCHEMA)
    path = tmp_path / "maps.jsonl"
    write_maps(path, [original])
    assert read_maps(path)["shop.example"].undecided == {"/account/*?id": "disallowed"}
    older = original.to_json()
    del older["undecided"]
    assert parse_map(json.dumps(older)).undecided == {}
    assert "undecided" not in a_map(1, {}).to_json(), "absent when there is none"


def test_a_merge_keeps_undecided_records_until_the_pattern_is_decided() -> None:
    old = a_map(1, {"/p/*?id": decision({"id"}, set())})
    old.undecided = {"/account/*?id": "disallowed", "/q/*?id": "failed"}
    learned = a_map(0, {"/q/*?id": decision({"id"}, set())})
    learned.undecided = {"/account/*?id": "robots-unreachable"}
    merged = merge_update(old, learned)
    assert merged.undecided == {"/account/*?id": "robots-unreachable"}
    assert set(merged.patterns) == {"/p/*?id", "/q/*?id"}
