"""The MIQPS map: per domain and versioned, pattern -> parameters kept and dropped, with evidence.

The document format is ``miqps/data/miqps-map.schema.json``; ``miqps learn`` writes it one map
per line and the stream processor publishes the same document to ``miqps.maps``.
"""

from __future__ import annotations

import json
import os
from calendar import timegm
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from functools import cache, lru_cache
from importlib import resources
from pathlib import Path
from time import strptime
from typing import TYPE_CHECKING, Any, NamedTuple

import jsonschema_rs
import orjson

from miqps.native import compiled_map_walks

if TYPE_CHECKING:  # jsonschema only explains a failure: imported when one happens
    from jsonschema import TypeChecker
    from jsonschema.protocols import Validator

SCHEMA_ID = "miqps.map/1"


class Interner:
    """What a map keeps of each string and set of names it reads: here the objects as they
    are; :class:`SharedValues` keeps one object per distinct value instead."""

    def text(self, text: str) -> str:
        return text

    def names(self, names: Iterable[str]) -> frozenset[str]:
        return frozenset(names)


class SharedValues(Interner):
    """One object per distinct string and set of names, for a whole maps file: the names,
    timestamps and kept and dropped sets repeated across patterns are then stored once.
    (Only immutable values: the evidence objects stay one per parameter.)"""

    def __init__(self) -> None:
        self._texts: dict[str, str] = {}
        self._name_sets: dict[frozenset[str], frozenset[str]] = {}

    def text(self, text: str) -> str:
        return self._texts.setdefault(text, text)

    def names(self, names: Iterable[str]) -> frozenset[str]:
        name_set = frozenset(map(self.text, names))
        return self._name_sets.setdefault(name_set, name_set)


AS_READ = Interner()


class Layer(StrEnum):
    """Which layer decided a parameter's fate."""

    ALLOWLIST = "allowlist"
    LEARNED = "learned"
    INSUFFICIENT = "insufficient-evidence"
    DOMAIN = "learned-domain"
    VERIFICATION = "verification"
    PRIOR = "prior"
    UNLEARNED = "unlearned"


KEPT_WITHOUT_EVIDENCE = frozenset({Layer.INSUFFICIENT, Layer.PRIOR, Layer.UNLEARNED})
"""Layers that keep a parameter for want of a decision."""


_LAYERS = {str(layer): layer for layer in Layer}


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@lru_cache(maxsize=4096)
def timestamp_seconds(text: str) -> float:
    """Seconds since the epoch of a map timestamp (``2026-12-02T10:00:00Z``); 0 if unreadable.
    Remembered: the patterns of a map mostly share a few times, and ``strptime`` took a
    quarter of reading a map."""
    try:
        return float(timegm(strptime(text, "%Y-%m-%dT%H:%M:%SZ")))
    except (ValueError, OverflowError):
        return 0.0


@dataclass(slots=True)
class ParamEvidence:
    """What probing showed about one parameter: ``samples`` tests, their outcomes, and
    ``items``, the distinct items (paths and values of the other kept parameters) with a
    conclusive outcome: a dropped parameter left that many items unchanged."""

    decision: str = "keep"
    layer: Layer = Layer.INSUFFICIENT
    samples: int = 0
    changed: int = 0
    unchanged: int = 0
    inconclusive: int = 0
    default_values: list[str] = field(default_factory=list)
    items: int = 0

    @property
    def conclusive(self) -> int:
        return self.changed + self.unchanged

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "decision": self.decision,
            "layer": str(self.layer),
            "samples": self.samples,
            "changed": self.changed,
            "unchanged": self.unchanged,
            "inconclusive": self.inconclusive,
            "items": self.items,
        }
        if self.default_values:
            document["default_values"] = self.default_values
        return document

    @classmethod
    def from_json(cls, data: Mapping[str, Any], interner: Interner = AS_READ) -> ParamEvidence:
        # By position, and the layer by a dict: a map holds hundreds of these, and a
        # canonicalizer reading maps on demand decodes one whenever a domain's first URL comes.
        values = data.get("default_values")
        return cls(
            interner.text(str(data["decision"])),
            _LAYERS[data["layer"]],
            int(data["samples"]),
            int(data["changed"]),
            int(data["unchanged"]),
            int(data["inconclusive"]),
            [interner.text(str(v)) for v in values] if values else [],
            int(data.get("items", 0)),
        )


@dataclass(slots=True)
class Verification:
    """The final canonical form checked against original URLs, all drops applied at once."""

    samples: int = 0
    changed: int = 0
    inconclusive: int = 0
    restored: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "changed": self.changed,
            "inconclusive": self.inconclusive,
            "restored": sorted(self.restored),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], interner: Interner = AS_READ) -> Verification:
        return cls(
            samples=int(data["samples"]),
            changed=int(data["changed"]),
            inconclusive=int(data["inconclusive"]),
            restored=[interner.text(name) for name in data["restored"]],
        )


@dataclass(slots=True)
class PatternDecision:
    kept: frozenset[str]
    dropped: frozenset[str]
    params: dict[str, ParamEvidence]
    verification: Verification
    decided_at: str
    urls_seen: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "kept": sorted(self.kept),
            "dropped": sorted(self.dropped),
            "decided_at": self.decided_at,
            "urls_seen": self.urls_seen,
            "params": {name: self.params[name].to_json() for name in sorted(self.params)},
            "verification": self.verification.to_json(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], interner: Interner = AS_READ) -> PatternDecision:
        return cls(
            kept=interner.names(data["kept"]),
            dropped=interner.names(data["dropped"]),
            params={
                interner.text(name): ParamEvidence.from_json(evidence, interner)
                for name, evidence in data["params"].items()
            },
            verification=Verification.from_json(data["verification"], interner),
            decided_at=interner.text(str(data["decided_at"])),
            urls_seen=int(data.get("urls_seen", 0)),
        )


class DecisionSummary(NamedTuple):
    """A pattern's decision without its evidence: what an audit request names of it."""

    kept: frozenset[str]
    dropped: frozenset[str]
    decided_at: str
    urls_seen: int


def dropping_summaries(patterns: Mapping[str, Any]) -> dict[str, DecisionSummary]:
    """The summary of each decision in ``patterns`` (a map document's ``patterns``, as JSON
    or as :class:`PatternDecision`) that drops a parameter, without reading its evidence."""
    summaries = {}
    for key, decision in patterns.items():
        if isinstance(decision, PatternDecision):
            if decision.dropped:
                summaries[key] = DecisionSummary(
                    decision.kept, decision.dropped, decision.decided_at, decision.urls_seen
                )
        elif decision["dropped"]:
            summaries[key] = DecisionSummary(
                frozenset(decision["kept"]),
                frozenset(decision["dropped"]),
                str(decision["decided_at"]),
                int(decision.get("urls_seen", 0)),
            )
    return summaries


@dataclass(slots=True)
class DomainMap:
    domain: str
    version: int = 0
    updated_at: str = ""
    patterns: dict[str, PatternDecision] = field(default_factory=dict)
    frozen: bool = False
    undecided: dict[str, str] = field(default_factory=dict)
    """Patterns asked for that got no decision, each with its cause (an
    :class:`~miqps.update.Undecided` name): every parameter of them is kept, as for any
    pattern the map lacks."""

    def kept_pairs(self) -> set[tuple[str, str]]:
        return {(key, name) for key, dec in self.patterns.items() for name in dec.kept}

    def kept_on_evidence(self) -> set[tuple[str, str]]:
        """The kept (pattern, parameter) pairs that evidence or a rule kept: not those
        kept only for lack of evidence (or by the cold-start prior, or unlearned)."""
        return {
            (key, name)
            for key, dec in self.patterns.items()
            for name in dec.kept
            if name not in dec.params or dec.params[name].layer not in KEPT_WITHOUT_EVIDENCE
        }

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "schema": SCHEMA_ID,
            "domain": self.domain,
            "version": self.version,
            "updated_at": self.updated_at,
            "patterns": {key: self.patterns[key].to_json() for key in sorted(self.patterns)},
        }
        if self.frozen:
            document["frozen"] = True
        if self.undecided:
            document["undecided"] = {key: self.undecided[key] for key in sorted(self.undecided)}
        return document

    def dumps(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any], interner: Interner = AS_READ) -> DomainMap:
        """The map of a document this program wrote; for one from outside, use
        :func:`parse_map`, which validates it first."""
        if data.get("schema") != SCHEMA_ID:
            raise ValueError(f"not a {SCHEMA_ID} document")
        return cls(
            domain=str(data["domain"]),
            version=int(data["version"]),
            updated_at=interner.text(str(data["updated_at"])),
            patterns={
                key: PatternDecision.from_json(decision, interner)
                for key, decision in data["patterns"].items()
            },
            frozen=data.get("frozen") is True,
            undecided={
                key: interner.text(str(cause)) for key, cause in data.get("undecided", {}).items()
            },
        )


@dataclass(frozen=True, slots=True)
class GateVerdict:
    accepted: bool
    reason: str
    flipped: tuple[tuple[str, str], ...]
    kept_before: int


def anomaly_gate(old: DomainMap | None, new: DomainMap, max_flip_share: float) -> GateVerdict:
    """Reject an update that flips more than ``max_flip_share`` of the kept parameters to dropped.

    A site that starts answering every URL with one error or bot-wall page makes every
    parameter look neutral; this gate stops such an update from merging the whole site.

    A parameter kept only for lack of evidence, then dropped once the evidence came, is a
    first decision, not a flip, as long as the parameters kept *on evidence* hold: fewer
    than half ``max_flip_share`` of them flip. When more do, the site itself may have
    changed, and every kept parameter counts, as it always did (a site that starts
    ignoring its queries flips about half of those kept on evidence, and the ones kept
    for lack of it too).
    """
    if old is None:
        return GateVerdict(True, "first map for the domain", (), 0)

    def dropped_now(pairs: set[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
        return tuple(
            sorted(
                (key, name)
                for key, name in pairs
                if key in new.patterns and name in new.patterns[key].dropped
            )
        )

    kept_before = old.kept_on_evidence()
    flipped = dropped_now(kept_before)
    if not kept_before or len(flipped) > len(kept_before) * max_flip_share / 2:
        kept_before = old.kept_pairs()
        flipped = dropped_now(kept_before)
    if not kept_before:
        return GateVerdict(True, "no kept parameters before", flipped, 0)
    share = len(flipped) / len(kept_before)
    if share > max_flip_share:
        return GateVerdict(
            False,
            f"flips {len(flipped)} of {len(kept_before)} kept parameters to dropped "
            f"({share:.0%} > {max_flip_share:.0%})",
            flipped,
            len(kept_before),
        )
    return GateVerdict(
        True, f"flips {len(flipped)} of {len(kept_before)} kept", flipped, len(kept_before)
    )


def merge_update(old: DomainMap | None, learned: DomainMap) -> DomainMap:
    """The next version: the old map's patterns, overridden by the newly learned ones; a
    frozen map stays frozen. The undecided patterns of both, newest cause first, less any
    pattern that has a decision."""
    patterns = dict(old.patterns) if old else {}
    patterns.update(learned.patterns)
    undecided = {**(old.undecided if old else {}), **learned.undecided}
    return DomainMap(
        domain=learned.domain,
        version=(old.version if old else 0) + 1,
        updated_at=utc_now(),
        patterns=patterns,
        frozen=old.frozen if old else False,
        undecided={key: cause for key, cause in undecided.items() if key not in patterns},
    )


class InvalidMap(ValueError):
    """A map document that breaks a rule: ``where`` it was (``file:line``, or a topic,
    partition and offset), which ``rule`` (see :data:`RULES`) and what exactly."""

    def __init__(self, rule: str, detail: str, where: str = "") -> None:
        super().__init__(rule, detail, where)
        self.rule = rule
        self.detail = detail
        self.where = where

    def at(self, where: str) -> InvalidMap:
        return InvalidMap(self.rule, self.detail, where)

    def __str__(self) -> str:
        prefix = f"{self.where}: " if self.where else ""
        return f"{prefix}not a MIQPS map ({self.rule}): {self.detail}"


RULES = {
    "json": "one JSON document of at most 1024 levels, finite numbers, in UTF-8",
    "schema": "the JSON Schema miqps/data/miqps-map.schema.json, integers exactly integers",
    "pattern names": "every parameter of a pattern's key is either kept or dropped, not both",
    "domain key": "the map's domain is the key it is filed under",
    "one line per domain": "a maps file has at most one line per domain",
}
MAX_DETAIL = 200


def _exact_integer(checker: TypeChecker, instance: object) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


@cache
def _schema() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(
        resources.files("miqps").joinpath("data/miqps-map.schema.json").read_text("utf-8")
    )
    return document


@cache
def _schema_validator() -> jsonschema_rs.Validator:
    # jsonschema-rs checks the maps of the canonicalize benchmark 20 times faster than
    # fastjsonschema's generated code (15 ms against 312 ms for 200 maps, 11,344 patterns).
    return jsonschema_rs.validator_for(_schema())


def satisfies_schema(document: Any, raw: bytes | str | None = None) -> bool:
    """Whether ``document`` is valid against the map schema, with integers exactly integers
    (the schema has no fractional numbers, so a float anywhere is refused). Given the
    ``raw`` text it was parsed from, floats are looked for only when the text could hold
    one."""
    if not _schema_validator().is_valid(document):
        return False
    if raw is not None:
        walks = compiled_map_walks()
        may_hold_fraction = _may_hold_fraction if walks is None else walks.may_hold_fraction
        if not may_hold_fraction(raw if isinstance(raw, bytes) else raw.encode("utf-8", "replace")):
            return True
    return not _holds_float(document)


_DIGITS_AS_ZERO_EXPONENTS_AS_DOT = bytes.maketrans(b"123456789eE", b"000000000..")
_BLANKS = frozenset(b" \t\r\n")
_VALUE_STARTS = frozenset(b":[,")


def _may_hold_fraction(raw: bytes) -> bool:
    """Whether the JSON text ``raw`` may hold a number with a fraction or an exponent: a
    digit then ``.``, ``e`` or ``E``, where the digits before it start a value (after
    ``:``, ``[`` or ``,``, blanks and a minus sign). A string such as ``"shop0.example"``
    is looked at and passed over; a string that only looks like a value (``"a,1.5"``)
    says yes, and the document is then walked. (A regular expression took a sixth of
    checking a map.)"""
    text = raw.translate(_DIGITS_AS_ZERO_EXPONENTS_AS_DOT)
    at = text.find(b"0.")
    while at != -1:
        start = at
        while start > 0 and text[start - 1] == 0x30:  # the digits before
            start -= 1
        if start > 0 and text[start - 1] == 0x2D:  # a minus sign
            start -= 1
        while start > 0 and text[start - 1] in _BLANKS:
            start -= 1
        if start == 0 or text[start - 1] in _VALUE_STARTS:
            return True
        at = text.find(b"0.", at + 1)
    return False


def _holds_float(value: Any) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, dict):
        return any(_holds_float(item) for item in value.values())
    if isinstance(value, list):
        return any(_holds_float(item) for item in value)
    return False


@cache
def _validator() -> Validator:
    """The map schema's validator, for its messages; ``1.0`` is not an integer here (JSON
    Schema says it is)."""
    from jsonschema import Draft202012Validator, validators

    schema = _schema()
    strict_types = Draft202012Validator.TYPE_CHECKER.redefine("integer", _exact_integer)
    # The stubs of ``extend`` are untyped; it returns a validator class.
    strict: type[Validator] = validators.extend(  # type: ignore[no-untyped-call]
        Draft202012Validator, type_checker=strict_types
    )
    return strict(schema)


def _shorten(text: str) -> str:
    return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 1] + "…"


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "a string" if isinstance(value, str) else "an array"


# What the JSON parser says when the text is JSON that breaks a rule, rather than no JSON.
_JSON_RULE_MESSAGES = ("depth limit", "UTF-8", "infinity", "surrogate")


def _not_json(raw: bytes | str, error: orjson.JSONDecodeError) -> str:
    """What a user can act on: a line that ends inside its JSON value was cut short, any
    other syntax error shows what stands where JSON was expected."""
    if any(part in error.msg for part in _JSON_RULE_MESSAGES):
        return _shorten(str(error))
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    content = text.rstrip()
    if not content:
        return "not JSON: the line is empty"
    if error.pos >= len(content):
        return f"not JSON (truncated?): the line ends at column {len(content)}, inside a value"
    found = content[error.pos : error.pos + 24]
    return _shorten(f"not JSON (corrupted?): unexpected {found!r} at column {error.pos + 1}")


def parse_map(raw: bytes | str, key: str | None = None, interner: Interner = AS_READ) -> DomainMap:
    """The map in ``raw``, one JSON document, after checking every rule of :data:`RULES`
    but "one line per domain" (which needs the whole file: :func:`read_maps` checks it);
    ``key`` is the domain it is filed under, if any. Raises :class:`InvalidMap` (without
    ``where``).

    Every consumer of maps from outside the process (files, the maps topic) reads them
    through here, or through :func:`check_map` when it keeps the document rather than
    the map (:mod:`miqps.mapstore`)."""
    return DomainMap.from_json(check_map(raw, key), interner)


def check_map(raw: bytes | str, key: str | None = None) -> dict[str, Any]:
    """The JSON document in ``raw`` once :func:`parse_map`'s rules are checked; raises
    :class:`InvalidMap` as it does."""
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise InvalidMap("json", _not_json(raw, error)) from None
    if not isinstance(document, dict):
        raise InvalidMap("schema", f"{_json_type(document)} instead of an object")
    if not satisfies_schema(document, raw):
        raise InvalidMap("schema", _schema_message(document))
    walks = compiled_map_walks()
    patterns = document["patterns"]
    wrong = (
        _pattern_with_wrong_names(patterns)
        if walks is None
        else walks.pattern_with_wrong_names(patterns)
    )
    if wrong is not None:
        kept, dropped = set(patterns[wrong]["kept"]), set(patterns[wrong]["dropped"])
        raise InvalidMap(
            "pattern names",
            _shorten(
                f"pattern {wrong!r} has the parameters {sorted(_names_of(wrong))} but keeps "
                f"{sorted(kept)} and drops {sorted(dropped)}"
            ),
        )
    if key is not None and document["domain"] != key:
        raise InvalidMap(
            "domain key", _shorten(f"a map of {document['domain']!r} filed under {key!r}")
        )
    return document


def _names_of(pattern: str) -> set[str]:
    return set(pattern.partition("?")[2].split("&"))  # "/p?" has one name, "", or none


def _pattern_with_wrong_names(patterns: dict[str, Any]) -> str | None:
    """The first of ``patterns`` whose kept and dropped names are not its key's names (each
    name once: kept or dropped), None if every one is."""
    for pattern, decision in patterns.items():
        kept, dropped = set(decision["kept"]), set(decision["dropped"])
        names = _names_of(pattern)
        if kept & dropped or (kept | dropped != names and (kept or dropped or names != {""})):
            return str(pattern)
    return None


def _schema_message(document: dict[str, Any]) -> str:
    from jsonschema.exceptions import best_match

    broken = best_match(_validator().iter_errors(document))
    if broken is None:
        return "fails the schema"
    message = broken.message
    if len(message) > MAX_DETAIL // 2:  # the message quotes the instance: say what failed
        message = f"fails {broken.validator!r}: {broken.validator_value!r}"
    return _shorten(f"{broken.json_path}: {message}")


def read_maps(
    path: Path, on_invalid: Callable[[InvalidMap], None] | None = None
) -> dict[str, DomainMap]:
    """Every map of a maps file, one per line, read and validated line by line.

    The first line that breaks a rule raises :class:`InvalidMap` naming ``file:line``;
    with ``on_invalid``, it is passed there instead and skipped. A domain on more than one
    line is then skipped entirely: no line of it can be trusted over another, and no map
    means every parameter of the domain is kept.
    """
    maps: dict[str, DomainMap] = {}
    first_line: dict[str, int] = {}
    ambiguous: set[str] = set()
    shared = SharedValues()
    with path.open("rb") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                domain_map = parse_map(line, interner=shared)
            except InvalidMap as error:
                refuse(error.at(where), on_invalid)
                continue
            domain = domain_map.domain
            seen_at = first_line.setdefault(domain, number)
            if seen_at != number:
                ambiguous.add(domain)
                refuse(repeated_domain(domain, seen_at, where), on_invalid)
                continue
            maps[domain] = domain_map
    for domain in ambiguous:
        del maps[domain]
    return maps


def repeated_domain(domain: str, first_line: int, where: str) -> InvalidMap:
    """The rule "one line per domain", broken at ``where``."""
    return InvalidMap(
        "one line per domain",
        _shorten(f"{domain!r} already has a map on line {first_line}; skipping uses neither line"),
        where,
    )


def refuse(error: InvalidMap, on_invalid: Callable[[InvalidMap], None] | None) -> None:
    """Raise ``error``, or with ``on_invalid`` hand it there (the line is skipped)."""
    if on_invalid is None:
        raise error
    on_invalid(error)


def write_maps(path: Path, maps: Iterable[DomainMap]) -> None:
    """Write ``maps`` to ``path`` whole: to a temporary file, synced, then renamed over it,
    so a reader (or a process stopped mid-write) sees the old file or the new one."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        for domain_map in sorted(maps, key=lambda m: m.domain):
            handle.write(domain_map.dumps() + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    tmp.replace(path)
