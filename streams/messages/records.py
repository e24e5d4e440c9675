"""The record of every topic, one frozen type each; ``schemas/*.schema.json`` describe them.

Each type writes itself with ``to_bytes`` and reads itself back with ``from_bytes``, which
raises :class:`BadInput` (with a short reason) for anything that is not such a record.

Input on ``urls.raw`` is a URL as UTF-8 text, or a JSON object with a ``"url"`` string whose
other fields travel to the output as ``meta``. Everything that cannot be read becomes a
:class:`BadInput` and goes to the DLQ as a :class:`DeadLetter`, with the original bytes.

The maps topic carries :class:`miqps.maps.DomainMap` documents, which the core reads and
writes itself; the map history wraps them in :class:`MapVersion` records.
"""

from __future__ import annotations

import base64
import binascii
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Final, Literal, get_args

import orjson

from miqps.maps import DomainMap, GateVerdict, InvalidMap, parse_map, utc_now
from miqps.urls import InvalidURL, NormalizedURL, components, parse
from streams.messages.codec import BadInput, from_fields, load_json

JSON_STARTS = (ord("{"), ord("["), ord('"'))
WHITESPACE = b" \t\r\n"

# ---------------------------------------------------------------- urls.raw


@dataclass(frozen=True, slots=True)
class RawURL:
    """One ``urls.raw`` message: the URL as it came, parsed, and the envelope's other fields."""

    text: str
    url: NormalizedURL
    meta: dict[str, Any] | None

    def to_bytes(self) -> bytes:
        if self.meta is None:
            return self.text.encode("utf-8", "surrogatepass")
        return orjson.dumps({"url": self.text, **self.meta})

    @classmethod
    def from_bytes(cls, value: bytes | None, max_bytes: int) -> RawURL:
        """Read one ``urls.raw`` message of at most ``max_bytes``, or raise BadInput."""
        text, meta = input_text(value, max_bytes)
        try:
            url = parse(text)
        except InvalidURL as error:
            raise BadInput(f"invalid URL: {error.reason}") from None
        return cls(text, url, meta)


def input_text(value: bytes | None, max_bytes: int) -> tuple[str, dict[str, Any] | None]:
    """The URL text and the envelope's other fields of one ``urls.raw`` message of at most
    ``max_bytes``, or BadInput."""
    if value is None:
        raise BadInput("null value")
    size = len(value)
    if size > max_bytes:
        raise BadInput(f"message of {size} bytes is larger than the {max_bytes}-byte limit")
    body = value
    if not body or body[0] in WHITESPACE or body[-1] in WHITESPACE:
        body = value.strip(WHITESPACE)
        if not body:
            raise BadInput("empty message")
    if body[0] in JSON_STARTS:
        return _from_envelope(body)
    try:
        return body.decode("utf-8"), None
    except UnicodeDecodeError as error:
        raise BadInput(f"not valid UTF-8 (byte {error.start})") from None


def input_domain(value: bytes | None, max_bytes: int) -> str:
    """The domain of one ``urls.raw`` message's URL, or BadInput where
    :func:`decode_input` would raise it: only the URL's components are read (the query is
    not split), which is all that can fail."""
    text, _ = input_text(value, max_bytes)
    try:
        return components(text)[1]
    except InvalidURL as error:
        raise BadInput(f"invalid URL: {error.reason}") from None


def _from_envelope(body: bytes) -> tuple[str, dict[str, Any] | None]:
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        message = str(error)
        if "UTF-8" in message or "utf-8" in message:
            raise BadInput("not valid UTF-8 in JSON") from None
        raise BadInput(f"not valid JSON: {message.split(':')[0]}") from None
    if not isinstance(document, dict):
        raise BadInput(f'JSON {type(document).__name__} instead of an object with a "url"')
    url = document.get("url")
    if not isinstance(url, str):
        raise BadInput('JSON object without a "url" string')
    meta = {key: item for key, item in document.items() if key != "url"}
    return url.strip(), meta or None


def decode_input(value: bytes | None, max_bytes: int) -> RawURL:
    """Read one ``urls.raw`` message, or raise :class:`BadInput`."""
    return RawURL.from_bytes(value, max_bytes)


# ---------------------------------------------------------------- urls.canonical


@dataclass(frozen=True, slots=True)
class CanonicalOutput:
    """One ``urls.canonical`` record per valid input, keyed by ``canonical_url``."""

    url: str
    canonical_url: str
    domain: str
    pattern: str
    kept: tuple[str, ...]
    dropped: tuple[str, ...]
    status: Literal["learned", "provisional"]
    map_version: int
    meta: dict[str, Any] | None

    def to_bytes(self) -> bytes:
        return self.encode(
            self.url,
            self.canonical_url,
            self.domain,
            self.pattern,
            self.kept,
            self.dropped,
            self.status,
            self.map_version,
            self.meta,
        )

    @staticmethod
    def encode(
        url: str,
        canonical_url: str,
        domain: str,
        pattern: str,
        kept: tuple[str, ...],
        dropped: tuple[str, ...],
        status: str,
        map_version: int,
        meta: dict[str, Any] | None,
    ) -> bytes:
        """The bytes of the record of these fields, without building it: once per input,
        this costs a third of building a frozen record and writing it
        (``python -m bench.messages_encode``)."""
        return orjson.dumps(
            {
                "url": url,
                "canonical_url": canonical_url,
                "domain": domain,
                "pattern": pattern,
                "kept": kept,
                "dropped": dropped,
                "status": status,
                "map_version": map_version,
                "meta": meta,
            }
        )

    @classmethod
    def from_bytes(cls, value: bytes | None) -> CanonicalOutput:
        return from_fields(cls, load_json(value, "a canonical output"), "a canonical output")


# ---------------------------------------------------------------- miqps.pattern-samples


@dataclass(frozen=True, slots=True)
class UrlSample:
    """A URL that brings a new parameter value of its pattern."""

    kind: ClassVar[str] = "url"
    domain: str
    pattern: str
    url: str
    count: int
    basis: str


@dataclass(frozen=True, slots=True)
class CountSample:
    """How many more URLs a pattern had since the last count."""

    kind: ClassVar[str] = "count"
    domain: str
    pattern: str
    count: int
    basis: str


@dataclass(frozen=True, slots=True)
class DueSample:
    """A reminder that a path shape's rare-pattern time limit has passed."""

    kind: ClassVar[str] = "due"
    domain: str
    shape: str


Sample = UrlSample | CountSample | DueSample
SAMPLE_TYPES: dict[str, type[Sample]] = {
    kind.kind: kind for kind in (UrlSample, CountSample, DueSample)
}


def sample_to_bytes(sample: Sample) -> bytes:
    """One item of a pack, as :meth:`SamplePack.from_items` joins them."""
    return orjson.dumps({"kind": sample.kind, **_as_dict(sample)})


def _as_dict(record: Any) -> dict[str, Any]:
    return {item.name: getattr(record, item.name) for item in fields(record)}


def read_sample(item: Any) -> Sample:
    """One item of a ``miqps.pattern-samples`` array, or :class:`BadInput`."""
    if not isinstance(item, dict) or item.get("kind") not in SAMPLE_TYPES:
        raise BadInput("pattern sample without a known kind")
    kind = item["kind"]
    body = {key: value for key, value in item.items() if key != "kind"}
    sample = from_fields(SAMPLE_TYPES[kind], body, f"a {kind} pattern sample")
    if not sample.domain:
        raise BadInput("pattern sample with an empty domain")
    return sample


def read_sample_items(value: bytes | None) -> list[Any]:
    """The items of a ``miqps.pattern-samples`` message, each still to be read with
    :func:`read_sample` or :func:`read_observation` (so that one bad item spoils only
    itself)."""
    items = load_json(value, "pattern samples")
    if not isinstance(items, list):
        raise BadInput("pattern samples that are not a JSON array")
    return items


@dataclass(frozen=True, slots=True)
class SamplePack:
    """A ``miqps.pattern-samples`` message: samples of domains of one partition."""

    samples: tuple[Sample, ...]

    @staticmethod
    def from_items(items: list[bytes]) -> bytes:
        """A pack of items already written by :func:`sample_to_bytes`."""
        return b"[" + b",".join(items) + b"]"

    def to_bytes(self) -> bytes:
        return self.from_items([sample_to_bytes(sample) for sample in self.samples])

    @classmethod
    def from_bytes(cls, value: bytes | None) -> SamplePack:
        return cls(tuple(read_sample(item) for item in read_sample_items(value)))


# ---------------------------------------------------------------- miqps.probe-requests


RequestReason = Literal["enough-samples", "time-limit", "reverify", "retry", "audit"]
AUDIT: Final = "audit"
"""The reason of a request to audit one URL of a learned pattern (:mod:`miqps.audit`)."""


@dataclass(frozen=True, slots=True)
class RequestedPattern:
    """Why one pattern of a probe request is asked for."""

    reason: RequestReason
    basis: str
    urls_seen: int
    first_seen: float


@dataclass(frozen=True, slots=True)
class ProbeRequest:
    """Patterns of one domain and path shape to learn, keyed by domain, with the shape's
    pool of sample URLs; or, with the reason ``audit``, one URL of a learned pattern whose
    dropped parameters are to be re-tested on its item."""

    domain: str
    shape: str
    patterns: dict[str, RequestedPattern]
    urls: tuple[str, ...]
    requested_at: float

    def to_bytes(self) -> bytes:
        return orjson.dumps(self)

    @classmethod
    def from_bytes(cls, value: bytes | None) -> ProbeRequest:
        request = from_fields(cls, load_json(value, "a probe request"), "a probe request")
        if not (
            request.domain and request.shape.startswith("/") and request.patterns and request.urls
        ):
            raise BadInput("a probe request without a domain, a shape, patterns or URLs")
        return request


# ---------------------------------------------------------------- miqps.map-updates


@dataclass(frozen=True, slots=True)
class MapUpdateRecord:
    """The audit record of one pattern of an accepted or rejected update of a domain's map.

    ``evidence`` and ``verification`` are the map's own documents
    (:meth:`miqps.maps.ParamEvidence.to_json`, :meth:`miqps.maps.Verification.to_json`).
    """

    domain: str
    pattern: str
    accepted: bool
    reason: str
    request_reason: str
    version_before: int
    version_after: int | None
    kept_before: tuple[str, ...] | None
    dropped_before: tuple[str, ...] | None
    kept_after: tuple[str, ...] | None
    dropped_after: tuple[str, ...] | None
    flipped_to_dropped: tuple[str, ...]
    evidence: dict[str, dict[str, Any]]
    verification: dict[str, Any] | None
    urls_seen: int
    fetches: int
    at: str
    observed: int
    """Pages the run took from observations (``miqps.observations``) instead of fetching
    them, beside its ``fetches``."""

    def to_bytes(self) -> bytes:
        return orjson.dumps(self)

    @classmethod
    def from_bytes(cls, value: bytes | None) -> MapUpdateRecord:
        return from_fields(cls, load_json(value, "a map update"), "a map update")

    @classmethod
    def decided(
        cls,
        pattern: str,
        request_reason: str,
        before: DomainMap | None,
        after: DomainMap,
        verdict: GateVerdict,
        fetches: int,
        observed: int = 0,
    ) -> MapUpdateRecord:
        """The record of a pattern an update decided, accepted or rejected by the gate."""
        new = after.patterns[pattern]
        version_before, kept_before, dropped_before = _before(before, pattern)
        return cls(
            after.domain,
            pattern,
            verdict.accepted,
            verdict.reason,
            request_reason,
            version_before=version_before,
            kept_before=kept_before,
            dropped_before=dropped_before,
            version_after=after.version if verdict.accepted else None,
            kept_after=tuple(sorted(new.kept)),
            dropped_after=tuple(sorted(new.dropped)),
            flipped_to_dropped=tuple(
                sorted(name for key, name in verdict.flipped if key == pattern)
            ),
            evidence={name: new.params[name].to_json() for name in sorted(new.params)},
            verification=new.verification.to_json(),
            urls_seen=new.urls_seen,
            fetches=fetches,
            at=utc_now(),
            observed=observed,
        )

    @classmethod
    def undecided(
        cls,
        domain: str,
        pattern: str,
        request_reason: str,
        urls_seen: int,
        reason: str,
        before: DomainMap | None,
        fetches: int,
        observed: int = 0,
    ) -> MapUpdateRecord:
        """The record of a pattern an update leaves without a decision, and why."""
        version_before, kept_before, dropped_before = _before(before, pattern)
        return cls(
            domain,
            pattern,
            False,
            reason,
            request_reason,
            version_before=version_before,
            kept_before=kept_before,
            dropped_before=dropped_before,
            version_after=None,
            kept_after=None,
            dropped_after=None,
            flipped_to_dropped=(),
            evidence={},
            verification=None,
            urls_seen=urls_seen,
            fetches=fetches,
            at=utc_now(),
            observed=observed,
        )


def _before(
    before: DomainMap | None, pattern: str
) -> tuple[int, tuple[str, ...] | None, tuple[str, ...] | None]:
    """An audit record's version_before, kept_before and dropped_before."""
    old = before.patterns.get(pattern) if before is not None else None
    if old is None:
        return (before.version if before is not None else 0), None, None
    assert before is not None
    return before.version, tuple(sorted(old.kept)), tuple(sorted(old.dropped))


# ---------------------------------------------------------------- urls.dlq


@dataclass(frozen=True, slots=True)
class Source:
    """Where a message came from."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None = None

    HEADER: ClassVar[str] = "miqps-source"
    """The header in which the repartition hop says where a record of its topic was read
    (:mod:`streams.front.repartition`), so that a dead letter names the original input."""

    def to_header(self) -> bytes:
        return orjson.dumps([self.topic, self.partition, self.offset, self.timestamp_ms])

    @classmethod
    def from_headers(
        cls,
        headers: Sequence[tuple[str, str | bytes | None]] | Mapping[str, str | bytes | None] | None,
    ) -> Source | None:
        """The source a :attr:`HEADER` among ``headers`` names, if any is readable."""
        pairs = headers.items() if isinstance(headers, Mapping) else headers or ()
        for name, value in pairs:
            if name != cls.HEADER or value is None:
                continue
            try:
                topic, partition, offset, timestamp_ms = orjson.loads(value)
            except (orjson.JSONDecodeError, TypeError, ValueError):
                return None
            if (
                isinstance(topic, str)
                and isinstance(partition, int)
                and isinstance(offset, int)
                and (timestamp_ms is None or isinstance(timestamp_ms, int))
            ):
                return cls(topic, partition, offset, timestamp_ms)
            return None
        return None


Stage = Literal["canonicalize", "pattern-stats", "probe"]


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A ``urls.dlq`` record: why, where from, and the original bytes (base64) so nothing
    is lost; keyed by the original key."""

    reason: str
    stage: Stage
    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None
    key: str | None
    original: str
    original_bytes: int
    truncated: bool
    null_value: bool
    dead_at: float

    @classmethod
    def of(
        cls,
        reason: str,
        value: bytes | None,
        key: bytes | None,
        source: Source,
        stage: Stage,
        max_original_bytes: int,
        now: float | None = None,
    ) -> DeadLetter:
        """The record of a message, keeping at most ``max_original_bytes`` of its value."""
        original = value if value is not None else b""
        truncated = len(original) > max_original_bytes
        kept = original[:max_original_bytes] if truncated else original
        return cls(
            reason=reason,
            stage=stage,
            topic=source.topic,
            partition=source.partition,
            offset=source.offset,
            timestamp_ms=source.timestamp_ms,
            key=base64.b64encode(key).decode("ascii") if key is not None else None,
            original=base64.b64encode(kept).decode("ascii"),
            original_bytes=len(original),
            truncated=truncated,
            null_value=value is None,
            dead_at=time.time() if now is None else now,
        )

    def original_value(self) -> bytes | None:
        """The original value (its beginning only if ``truncated``); None for a tombstone."""
        return None if self.null_value else base64.b64decode(self.original, validate=True)

    def original_key(self) -> bytes | None:
        return None if self.key is None else base64.b64decode(self.key, validate=True)

    def to_bytes(self) -> bytes:
        return orjson.dumps(self)

    @classmethod
    def from_bytes(cls, value: bytes | None) -> DeadLetter:
        record = from_fields(cls, load_json(value, "a dead letter"), "a dead letter")
        try:
            record.original_value()
            record.original_key()
        except binascii.Error:
            raise BadInput("a dead letter whose original or key is not base64") from None
        return record


# ---------------------------------------------------------------- miqps.map-history


ProducedBy = Literal["stream-probe", "reverify", "rollback", "freeze", "unfreeze", "publish"]
PRODUCERS: tuple[ProducedBy, ...] = get_args(ProducedBy)


@dataclass(frozen=True, slots=True)
class MapVersion:
    """A ``miqps.map-history`` record: one published version of a domain's map, whole, with
    what produced it, a ``note`` (an operator's reason) and when it was published; keyed by
    domain."""

    domain: str
    version: int
    produced_by: ProducedBy
    note: str
    at: str
    map: dict[str, Any]

    @classmethod
    def of(cls, domain_map: DomainMap, produced_by: ProducedBy, note: str = "") -> MapVersion:
        return cls(
            domain_map.domain,
            domain_map.version,
            produced_by,
            note,
            utc_now(),
            domain_map.to_json(),
        )

    def domain_map(self) -> DomainMap:
        return DomainMap.from_json(self.map)

    def to_bytes(self) -> bytes:
        return orjson.dumps(self)

    @classmethod
    def from_bytes(cls, value: bytes | None) -> MapVersion:
        record = from_fields(cls, load_json(value, "a map version"), "a map version")
        try:
            domain_map = parse_map(orjson.dumps(record.map), key=record.domain)
        except InvalidMap as error:
            raise BadInput(f"a map version whose map is {error}") from None
        if domain_map.version != record.version:
            raise BadInput(f"a map version {record.version} holding version {domain_map.version}")
        return record
