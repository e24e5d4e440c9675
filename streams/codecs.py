"""Message formats of every topic; ``schemas/*.schema.json`` describe them.

Input on ``urls.raw`` is a URL as UTF-8 text, or a JSON object with a ``"url"`` string whose
other fields travel to the output as ``meta``. Everything that cannot be read becomes a
:class:`BadInput` with a short reason, and goes to the DLQ with the original bytes.
"""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass
from typing import Any

import orjson

from miqps.urls import InvalidURL, NormalizedURL, parse

JSON_STARTS = (ord("{"), ord("["), ord('"'))
WHITESPACE = b" \t\r\n"


class BadInput(Exception):
    """An input message that cannot be canonicalized; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class RawURL:
    text: str
    url: NormalizedURL
    meta: dict[str, Any] | None


def decode_input(value: bytes | None, max_bytes: int) -> RawURL:
    """Read one ``urls.raw`` message, or raise :class:`BadInput`."""
    if value is None:
        raise BadInput("null value")
    size = len(value)
    if size > max_bytes:
        raise BadInput(f"message of {size} bytes is larger than the {max_bytes}-byte limit")
    meta: dict[str, Any] | None = None
    body = value
    if not body or body[0] in WHITESPACE or body[-1] in WHITESPACE:
        body = value.strip(WHITESPACE)
        if not body:
            raise BadInput("empty message")
    if body[0] in JSON_STARTS:
        text, meta = _from_json(body)
    else:
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as error:
            raise BadInput(f"not valid UTF-8 (byte {error.start})") from None
    try:
        url = parse(text)
    except InvalidURL as error:
        raise BadInput(f"invalid URL: {error.reason}") from None
    return RawURL(text, url, meta)


def _from_json(body: bytes) -> tuple[str, dict[str, Any] | None]:
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        message = str(error)
        if "UTF-8" in message or "utf-8" in message:
            raise BadInput("not valid UTF-8 in JSON") from None
        raise BadInput(f"not valid JSON: {message.split(':')[0]}") from None
    if not isinstance(document, dict):
        raise BadInput(f"JSON {type(document).__name__} instead of an object with a \"url\"")
    url = document.get("url")
    if not isinstance(url, str):
        raise BadInput("JSON object without a \"url\" string")
    meta = {key: item for key, item in document.items() if key != "url"}
    return url.strip(), meta or None


def encode_output(
    text: str,
    canonical_url: str,
    domain: str,
    pattern: str,
    kept: list[str],
    dropped: list[str],
    status: str,
    map_version: int,
    meta: dict[str, Any] | None,
) -> bytes:
    return orjson.dumps({
        "url": text,
        "canonical_url": canonical_url,
        "domain": domain,
        "pattern": pattern,
        "kept": kept,
        "dropped": dropped,
        "status": status,
        "map_version": map_version,
        "meta": meta,
    })


@dataclass(frozen=True, slots=True)
class Source:
    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None = None


def encode_dead_letter(
    reason: str,
    value: bytes | None,
    key: bytes | None,
    source: Source,
    stage: str,
    max_original_bytes: int,
) -> bytes:
    """A DLQ record: why, where from, and the original bytes (base64) so nothing is lost."""
    original = value if value is not None else b""
    truncated = len(original) > max_original_bytes
    kept = original[:max_original_bytes] if truncated else original
    return orjson.dumps({
        "reason": reason,
        "stage": stage,
        "topic": source.topic,
        "partition": source.partition,
        "offset": source.offset,
        "timestamp_ms": source.timestamp_ms,
        "key": base64.b64encode(key).decode("ascii") if key is not None else None,
        "original": base64.b64encode(kept).decode("ascii"),
        "original_bytes": len(original),
        "truncated": truncated,
        "null_value": value is None,
        "dead_at": time.time(),
    })


def decode_document(value: bytes | None, what: str) -> dict[str, Any]:
    """An internal JSON message, or :class:`BadInput` naming what was expected."""
    if value is None:
        raise BadInput(f"null value instead of {what}")
    try:
        document = orjson.loads(value)
    except orjson.JSONDecodeError:
        raise BadInput(f"not valid JSON for {what}") from None
    if not isinstance(document, dict):
        raise BadInput(f"not a JSON object for {what}")
    return document
