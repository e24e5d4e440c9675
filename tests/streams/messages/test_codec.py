"""Reading JSON into typed records (streams.messages.codec): each wrong field gives a
BadInput whose reason names the field and the type it must have."""

from __future__ import annotations

import orjson
import pytest

from streams.messages import BadInput, CanonicalOutput, ProbeRequest, RequestedPattern

GOOD_OUTPUT = CanonicalOutput(
    "http://a.example/?id=1",
    "http://a.example/?id=1",
    "a.example",
    "/?id",
    ("id",),
    (),
    "learned",
    2,
    None,
).to_bytes()


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, "null value instead of a canonical output"),
        (b"{", "not valid JSON for a canonical output"),
        (b"[]", "not a JSON object for a canonical output"),
        (
            GOOD_OUTPUT.replace(b'"meta":null', b'"meta":null,"x":1'),
            "a canonical output with unknown fields x",
        ),
        (GOOD_OUTPUT.replace(b',"meta":null', b""), "a canonical output without meta"),
        (
            GOOD_OUTPUT.replace(b'"map_version":2', b'"map_version":"2"'),
            "a canonical output whose map_version is not of type int",
        ),
        (
            GOOD_OUTPUT.replace(b'"map_version":2', b'"map_version":true'),
            "a canonical output whose map_version is not of type int",
        ),
        (
            GOOD_OUTPUT.replace(b'"kept":["id"]', b'"kept":[1]'),
            "a canonical output whose kept is not of type tuple[str, ...]",
        ),
        (
            GOOD_OUTPUT.replace(b'"learned"', b'"maybe"'),
            "a canonical output whose status is not of type Literal['learned', 'provisional']",
        ),
    ],
)
def test_bad_canonical_output_is_bad_input_with_a_reason(value: bytes | None, reason: str) -> None:
    with pytest.raises(BadInput) as caught:
        CanonicalOutput.from_bytes(value)
    assert caught.value.reason == reason


def test_a_field_of_records_is_named_without_the_records_module() -> None:
    request = orjson.loads(
        ProbeRequest(
            "a.example",
            "/p",
            {"/p?id": RequestedPattern("retry", "", 1, 0.0)},
            ("http://a.example/p?id=1",),
            1.0,
        ).to_bytes()
    )
    with pytest.raises(BadInput) as caught:
        ProbeRequest.from_bytes(orjson.dumps({**request, "patterns": []}))
    assert caught.value.reason == (
        "a probe request whose patterns is not of type dict[str, RequestedPattern]"
    )
