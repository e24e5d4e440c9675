"""The MIQPS map: per domain and versioned, pattern -> parameters kept and dropped, with evidence.

The document format is ``schemas/miqps-map.schema.json``; ``miqps learn`` writes it one map
per line and the stream processor publishes the same document to ``miqps.maps``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

SCHEMA_ID = "miqps.map/1"


class Layer(StrEnum):
    """Which layer decided a parameter's fate."""

    ALLOWLIST = "allowlist"
    LEARNED = "learned"
    INSUFFICIENT = "insufficient-evidence"
    DOMAIN = "learned-domain"
    VERIFICATION = "verification"
    PRIOR = "prior"
    UNLEARNED = "unlearned"


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(slots=True)
class ParamEvidence:
    """What probing showed about one parameter; ``samples`` counts distinct values tried."""

    decision: str = "keep"
    layer: Layer = Layer.INSUFFICIENT
    samples: int = 0
    changed: int = 0
    unchanged: int = 0
    inconclusive: int = 0
    default_values: list[str] = field(default_factory=list)

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
        }
        if self.default_values:
            document["default_values"] = self.default_values
        return document

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ParamEvidence:
        return cls(
            decision=str(data["decision"]),
            layer=Layer(data["layer"]),
            samples=int(data["samples"]),
            changed=int(data["changed"]),
            unchanged=int(data["unchanged"]),
            inconclusive=int(data["inconclusive"]),
            default_values=[str(v) for v in data.get("default_values", ())],
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
    def from_json(cls, data: Mapping[str, Any]) -> Verification:
        return cls(
            samples=int(data["samples"]),
            changed=int(data["changed"]),
            inconclusive=int(data["inconclusive"]),
            restored=list(data["restored"]),
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
    def from_json(cls, data: Mapping[str, Any]) -> PatternDecision:
        return cls(
            kept=frozenset(data["kept"]),
            dropped=frozenset(data["dropped"]),
            params={k: ParamEvidence.from_json(v) for k, v in data["params"].items()},
            verification=Verification.from_json(data["verification"]),
            decided_at=str(data["decided_at"]),
            urls_seen=int(data.get("urls_seen", 0)),
        )


@dataclass(slots=True)
class DomainMap:
    domain: str
    version: int = 0
    updated_at: str = ""
    patterns: dict[str, PatternDecision] = field(default_factory=dict)

    def kept_pairs(self) -> set[tuple[str, str]]:
        return {(key, name) for key, dec in self.patterns.items() for name in dec.kept}

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA_ID,
            "domain": self.domain,
            "version": self.version,
            "updated_at": self.updated_at,
            "patterns": {key: self.patterns[key].to_json() for key in sorted(self.patterns)},
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DomainMap:
        if data.get("schema") != SCHEMA_ID:
            raise ValueError(f"not a {SCHEMA_ID} document")
        return cls(
            domain=str(data["domain"]),
            version=int(data["version"]),
            updated_at=str(data["updated_at"]),
            patterns={k: PatternDecision.from_json(v) for k, v in data["patterns"].items()},
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
    """
    if old is None:
        return GateVerdict(True, "first map for the domain", (), 0)
    kept_before = old.kept_pairs()
    flipped = tuple(
        sorted(
            (key, name)
            for key, name in kept_before
            if key in new.patterns and name in new.patterns[key].dropped
        )
    )
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
    return GateVerdict(True, f"flips {len(flipped)} of {len(kept_before)} kept", flipped,
                       len(kept_before))


def merge_update(old: DomainMap | None, learned: DomainMap) -> DomainMap:
    """The next version: the old map's patterns, overridden by the newly learned ones."""
    patterns = dict(old.patterns) if old else {}
    patterns.update(learned.patterns)
    return DomainMap(
        domain=learned.domain,
        version=(old.version if old else 0) + 1,
        updated_at=utc_now(),
        patterns=patterns,
    )


def read_maps(path: Path) -> dict[str, DomainMap]:
    maps: dict[str, DomainMap] = {}
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                domain_map = DomainMap.from_json(json.loads(line))
            except (ValueError, KeyError, TypeError) as error:
                raise ValueError(f"{path}:{number}: not a MIQPS map: {error}") from error
            maps[domain_map.domain] = domain_map
    return maps


def write_maps(path: Path, maps: Iterable[DomainMap]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        for domain_map in sorted(maps, key=lambda m: m.domain):
            handle.write(domain_map.dumps() + "\n")
    tmp.replace(path)
