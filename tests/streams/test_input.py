"""Reading urls.raw input and writing dead letters (streams.messages)."""

import base64

import orjson
import pytest

from streams.messages import BadInput, DeadLetter, Source, decode_input
from tests.streams.support import assert_valid

LIMIT = 1024 * 1024


def reason_of(value: bytes | None) -> str:
    with pytest.raises(BadInput) as caught:
        decode_input(value, LIMIT)
    return caught.value.reason


def test_plain_text_url_is_parsed_and_stripped() -> None:
    raw = decode_input(b"  http://Shop.Example/p?id=1&utm_source=x\n", LIMIT)
    assert raw.text == "http://Shop.Example/p?id=1&utm_source=x"
    assert raw.url.host == "shop.example"
    assert raw.meta is None
    assert_valid("urls-raw", raw.text)


def test_json_envelope_carries_other_fields_as_meta() -> None:
    value = orjson.dumps({"url": "https://a.example/?b=2&a=1", "crawl": 7, "tags": ["x"]})
    raw = decode_input(value, LIMIT)
    assert raw.url.pattern == "/?a&b"
    assert raw.meta == {"crawl": 7, "tags": ["x"]}
    assert_valid("urls-raw", orjson.loads(value))


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, "null value"),
        (b"   ", "empty message"),
        (b"\xff\xfehttp://a.example/", "not valid UTF-8 (byte 0)"),
        (b"just some words", "invalid URL: not a parsable URL"),
        (b"ftp://files.example/x?y=1", "invalid URL: scheme 'ftp' is not http or https"),
        (b"javascript:alert(1)", "invalid URL: scheme 'javascript' is not http or https"),
        (b"http://a.example/\x01?x=1", "invalid URL: contains control characters"),
        (b'["http://a.example/"]', 'JSON list instead of an object with a "url"'),
        (b'"http://a.example/"', 'JSON str instead of an object with a "url"'),
        (b'{"link": "http://a.example/"}', 'JSON object without a "url" string'),
        (b'{"url": 42}', 'JSON object without a "url" string'),
        (b'{"url": "http://a.example/"', "not valid JSON"),
        (b'{"url": "http://a.example/\xff"}', "not valid UTF-8 in JSON"),
    ],
)
def test_bad_input_has_a_reason(value: bytes | None, reason: str) -> None:
    assert reason_of(value).startswith(reason)


def test_oversized_message_is_rejected_before_parsing() -> None:
    value = b"http://a.example/?q=" + b"x" * (3 * LIMIT)
    expected = f"message of {len(value)} bytes is larger than the {LIMIT}-byte limit"
    assert reason_of(value) == expected


def test_overlong_url_is_rejected_by_the_core() -> None:
    assert reason_of(b"http://a.example/?q=" + b"x" * 9000).startswith("invalid URL: longer than")


def test_dead_letter_keeps_the_original_bytes_and_source() -> None:
    value = b"\xff\x00 binary"
    record = orjson.loads(
        DeadLetter.of(
            "not valid UTF-8 (byte 0)",
            value,
            b"k",
            Source("urls.raw", 3, 41, 1700000000000),
            "canonicalize",
            1024,
        ).to_bytes()
    )
    assert_valid("urls-dlq", record)
    assert base64.b64decode(record["original"]) == value
    assert base64.b64decode(record["key"]) == b"k"
    assert (record["topic"], record["partition"], record["offset"]) == ("urls.raw", 3, 41)
    assert record["truncated"] is False and record["original_bytes"] == len(value)


def test_dead_letter_truncates_only_beyond_the_cap_and_says_so() -> None:
    value = b"y" * 5000
    record = orjson.loads(
        DeadLetter.of(
            "too large", value, None, Source("urls.raw", 0, 0), "canonicalize", 1000
        ).to_bytes()
    )
    assert_valid("urls-dlq", record)
    assert record["truncated"] is True and record["original_bytes"] == 5000
    assert base64.b64decode(record["original"]) == value[:1000]
    assert record["key"] is None
