"""Every topic record of streams.messages.records against its JSON Schema, both ways."""

from __future__ import annotations

import base64
import json
from dataclasses import fields
from typing import Any, get_args

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from miqps.maps import DomainMap, Layer, ParamEvidence, PatternDecision, Verification
from streams.agents.shape_stats import ENOUGH_SAMPLES, RETRY, REVERIFY, TIME_LIMIT
from streams.messages import (
    AUDIT,
    SAMPLE_TYPES,
    BadInput,
    CanonicalOutput,
    CountSample,
    DeadLetter,
    DueSample,
    MapUpdateRecord,
    MapVersion,
    ProbeRequest,
    RawURL,
    RequestedPattern,
    RequestReason,
    SamplePack,
    Source,
    UrlSample,
    decode_input,
    input_domain,
)
from testkit.schemas import schema
from tests.data import PEER_URL_CASES, WPT_URLTESTDATA
from tests.streams.support import assert_valid

names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
param_names = st.lists(st.from_regex(r"[a-z_]{1,8}", fullmatch=True), unique=True, max_size=4)
counts = st.integers(min_value=0, max_value=2**40)
patterns = st.from_regex(r"/[a-z*/]{0,8}\?[a-z&]{0,12}", fullmatch=True)
domains = st.from_regex(r"[a-z]{1,10}\.example", fullmatch=True)
timestamps = st.floats(min_value=0, max_value=4e9, allow_nan=False)
# Integers as orjson reads them from an input envelope (larger ones become floats there).
json_integers = st.integers(min_value=-(2**63), max_value=2**64 - 1)
meta = st.none() | st.dictionaries(
    st.text(max_size=5), json_integers | st.text(max_size=5), min_size=1, max_size=3
)

outputs = st.builds(
    CanonicalOutput,
    url=names,
    canonical_url=names,
    domain=domains,
    pattern=patterns,
    kept=param_names.map(tuple),
    dropped=param_names.map(tuple),
    status=st.sampled_from(["learned", "provisional"]),
    map_version=counts,
    meta=meta,
)
requested = st.builds(
    RequestedPattern,
    reason=st.sampled_from(["enough-samples", "time-limit", "reverify", "retry"]),
    basis=names,
    urls_seen=counts,
    first_seen=timestamps,
)
requests = st.builds(
    ProbeRequest,
    domain=domains,
    shape=st.just("/p/*"),
    patterns=st.dictionaries(patterns, requested, min_size=1, max_size=3),
    urls=st.lists(names, min_size=1, max_size=3).map(tuple),
    requested_at=timestamps,
)
samples = st.one_of(
    st.builds(UrlSample, domain=domains, pattern=patterns, url=names, count=counts, basis=names),
    st.builds(CountSample, domain=domains, pattern=patterns, count=counts, basis=names),
    st.builds(DueSample, domain=domains, shape=st.just("/p")),
)
packs = st.builds(SamplePack, st.lists(samples, min_size=1, max_size=4).map(tuple))
dead_letters = st.builds(
    DeadLetter.of,
    reason=names.filter(bool),
    value=st.none() | st.binary(max_size=40),
    key=st.none() | st.binary(max_size=8),
    source=st.builds(
        Source, topic=names, partition=counts, offset=counts, timestamp_ms=st.none() | counts
    ),
    stage=st.sampled_from(["canonicalize", "pattern-stats", "probe"]),
    max_original_bytes=st.integers(min_value=0, max_value=50),
)


def evidence(decision: str) -> dict[str, Any]:
    return ParamEvidence(decision, Layer.LEARNED, 6, 1, 5, 0, ["lang=en"]).to_json()


updates = st.builds(
    MapUpdateRecord,
    domain=domains,
    pattern=patterns,
    accepted=st.booleans(),
    reason=names,
    request_reason=names,
    version_before=counts,
    version_after=st.none() | st.integers(min_value=1, max_value=10**6),
    kept_before=st.none() | param_names.map(tuple),
    dropped_before=st.none() | param_names.map(tuple),
    kept_after=st.none() | param_names.map(tuple),
    dropped_after=st.none() | param_names.map(tuple),
    flipped_to_dropped=param_names.map(tuple),
    evidence=st.dictionaries(
        st.sampled_from(["id", "ref"]), st.sampled_from(["keep", "drop"]).map(evidence), max_size=2
    ),
    verification=st.none() | st.just(Verification(2, 0, 1, ["id"]).to_json()),
    urls_seen=counts,
    fetches=counts,
    observed=counts,
    at=st.just("2026-12-03T08:00:00Z"),
)


def domain_map(domain: str, version: int, frozen: bool) -> DomainMap:
    decision = PatternDecision(
        frozenset({"id"}),
        frozenset({"ref"}),
        {
            "id": ParamEvidence("keep", Layer.LEARNED, 6, 6, 0),
            "ref": ParamEvidence("drop", Layer.LEARNED, 6, 0, 6),
        },
        Verification(3),
        "2026-12-03T08:00:00Z",
    )
    return DomainMap(domain, version, "2026-12-03T08:00:00Z", {"/p?id&ref": decision}, frozen)


versions = st.builds(
    MapVersion.of,
    st.builds(domain_map, domains, st.integers(min_value=1, max_value=10**6), st.booleans()),
    st.sampled_from(["stream-probe", "reverify", "rollback", "freeze", "unfreeze", "publish"]),
    names,
)

RECORDS: dict[str, tuple[Any, st.SearchStrategy[Any]]] = {
    "urls-canonical": (CanonicalOutput, outputs),
    "probe-request": (ProbeRequest, requests),
    "pattern-sample": (SamplePack, packs),
    "map-update": (MapUpdateRecord, updates),
    "urls-dlq": (DeadLetter, dead_letters),
    "map-history": (MapVersion, versions),
}


@pytest.mark.parametrize("schema", sorted(RECORDS))
def test_every_record_round_trips_through_its_schema(schema: str) -> None:
    record_type, strategy = RECORDS[schema]

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(strategy)
    def round_trip(record: Any) -> None:
        value = record.to_bytes()
        assert_valid(schema, orjson.loads(value))
        assert record_type.from_bytes(value) == record

    round_trip()


def schema_of(name: str) -> dict[str, Any]:
    return schema(name)


@pytest.mark.parametrize(
    ("schema", "record_type"),
    [
        ("urls-canonical", CanonicalOutput),
        ("probe-request", ProbeRequest),
        ("map-update", MapUpdateRecord),
        ("urls-dlq", DeadLetter),
        ("map-history", MapVersion),
    ],
)
def test_record_fields_are_the_schemas_properties(schema: str, record_type: type) -> None:
    document = schema_of(schema)
    names_ = [item.name for item in fields(record_type)]
    assert names_ == document["required"]
    assert set(names_) == set(document["properties"])


def test_every_reason_the_pattern_stats_processor_gives_is_one_the_schema_allows() -> None:
    """Those of the pattern-stats processor, and the front's audit."""
    reasons = schema_of("probe-request")["properties"]["patterns"]["additionalProperties"]
    allowed = reasons["properties"]["reason"]["enum"]
    assert sorted(get_args(RequestReason)) == sorted(allowed)
    assert sorted(allowed) == sorted([ENOUGH_SAMPLES, RETRY, REVERIFY, TIME_LIMIT, AUDIT])


def test_each_sample_kind_has_the_fields_its_schema_requires() -> None:
    sample = schema_of("pattern-sample")["$defs"]["sample"]
    allowed = set(sample["properties"]) - {"kind"}
    for rule in sample["allOf"]:
        kind = rule["if"]["properties"]["kind"]["const"]
        sample_type = SAMPLE_TYPES[kind]
        names_ = {item.name for item in fields(sample_type)}
        assert names_ >= set(rule["then"]["required"]) and names_ <= allowed
        assert sample_type.kind == kind


def test_raw_url_round_trips_as_text_and_as_envelope() -> None:
    for value in (b"http://a.example/p?id=1", b'{"url":"http://a.example/p?id=1","crawl":7}'):
        raw = RawURL.from_bytes(value, 1024)
        assert_valid("urls-raw", raw.text if raw.meta is None else orjson.loads(value))
        assert RawURL.from_bytes(raw.to_bytes(), 1024) == raw


def test_dead_letter_gives_back_the_original_bytes() -> None:
    record = DeadLetter.from_bytes(
        DeadLetter.of(
            "bad", b"\xff\x00", b"k", Source("urls.raw", 1, 2), "canonicalize", 100
        ).to_bytes()
    )
    assert (record.original_value(), record.original_key()) == (b"\xff\x00", b"k")
    tombstone = DeadLetter.of(
        "null value", None, None, Source("urls.raw", 0, 0), "canonicalize", 100
    )
    assert tombstone.original_value() is None and tombstone.null_value


def test_bad_probe_request_and_dead_letter_are_bad_input() -> None:
    request = orjson.loads(
        ProbeRequest(
            "a.example",
            "/p",
            {"/p?id": RequestedPattern("retry", "", 1, 0.0)},
            ("http://a.example/p?id=1",),
            1.0,
        ).to_bytes()
    )
    with pytest.raises(BadInput, match="probe request without a domain, a shape"):
        ProbeRequest.from_bytes(orjson.dumps({**request, "urls": []}))
    request["patterns"]["/p?id"]["reason"] = "whim"
    with pytest.raises(BadInput, match="whose reason is not"):
        ProbeRequest.from_bytes(orjson.dumps(request))
    letter = orjson.loads(
        DeadLetter.of("bad", b"x", None, Source("t", 0, 0), "probe", 10).to_bytes()
    )
    with pytest.raises(BadInput, match="not base64"):
        DeadLetter.from_bytes(orjson.dumps({**letter, "original": "#"}))
    assert base64.b64decode(letter["original"]) == b"x"


def test_a_map_version_must_hold_a_valid_map_of_its_domain_and_version() -> None:
    record = orjson.loads(MapVersion.of(domain_map("a.example", 2, False), "rollback").to_bytes())
    with pytest.raises(BadInput, match="filed under"):
        MapVersion.from_bytes(orjson.dumps({**record, "domain": "b.example"}))
    with pytest.raises(BadInput, match="holding version 2"):
        MapVersion.from_bytes(orjson.dumps({**record, "version": 3}))
    with pytest.raises(BadInput, match="not a MIQPS map"):
        MapVersion.from_bytes(orjson.dumps({**record, "map": {**record["map"], "version": 0}}))
    with pytest.raises(BadInput, match="produced_by"):
        MapVersion.from_bytes(orjson.dumps({**record, "produced_by": "someone"}))


def _input_cases() -> list[bytes]:
    """Every input and expected href of the WPT URL corpus and the peer suites, as text
    and in a JSON envelope, with a few messages that are not URLs at all."""
    texts: list[str] = []
    for case in json.loads(WPT_URLTESTDATA.read_text(encoding="utf-8")):
        if isinstance(case, dict):
            texts += [text for text in (case.get("input"), case.get("href")) if text]
    for line in PEER_URL_CASES.read_text(encoding="utf-8").splitlines():
        case = json.loads(line)
        texts += [text for text in (case["input"], case.get("expected")) if text]
    values = [text.encode("utf-8", "surrogatepass") for text in texts]
    values += [orjson.dumps({"url": text, "n": 1}) for text in texts if text.isprintable()]
    return [*values, b"", b"  ", b"\xff\xfe", b"[1]", b'{"url": 7}', b"x" * 2000]


def test_the_hops_domain_is_the_fronts_and_fails_where_the_front_fails() -> None:
    """The repartition hop reads only a message's domain (:func:`input_domain`): it must be
    the domain the front reads, and bad input must be bad for both, or a URL would be
    keyed where its front holds no map."""
    compared = failed = 0
    for value in _input_cases():
        try:
            domain: str | BadInput = input_domain(value, 1024)
        except BadInput as error:
            domain = error
        try:
            expected: str | BadInput = decode_input(value, 1024).url.host
        except BadInput as error:
            expected = error
        if isinstance(expected, BadInput):
            assert isinstance(domain, BadInput) and domain.reason == expected.reason, value
            failed += 1
        else:
            assert domain == expected, value
        compared += 1
    assert compared > 1500 and failed > 100, (compared, failed)
