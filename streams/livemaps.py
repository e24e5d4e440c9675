"""The current MIQPS maps of every domain, compiled for the per-URL path.

The canonical form is the core's (``miqps.canonical.DomainRules``): a learned pattern keeps
its kept parameters plus allowlisted ones, less confirmed default values and what the
cold-start prior drops for lack of evidence; an unlearned pattern keeps everything except
what the prior drops; rules are re-applied until they stop changing the URL
(``miqps.canonical.settle``). This module only precomputes the rules per pattern, because
every URL passes through here, and adds what the stream needs: the decision's age for
re-verification.
"""

from __future__ import annotations

import threading
from calendar import timegm
from dataclasses import dataclass
from time import strptime
from typing import NamedTuple

import orjson

from miqps.canonical import DomainRules, StaticLayers, settle
from miqps.maps import DomainMap
from miqps.urls import NormalizedURL

PROVISIONAL = "provisional"
LEARNED = "learned"


def timestamp_seconds(text: str) -> float:
    """Seconds since the epoch of a map timestamp (``2026-12-02T10:00:00Z``); 0 if unreadable."""
    try:
        return float(timegm(strptime(text, "%Y-%m-%dT%H:%M:%SZ")))
    except (ValueError, OverflowError):
        return 0.0


@dataclass(frozen=True, slots=True)
class PatternRule:
    keep: frozenset[str]
    kept: list[str]
    dropped: list[str]
    default_pairs: frozenset[str]
    decided_at: str
    reverify_at: float


class CompiledMap:
    """The rules of one domain; the map itself is kept as its JSON document, which takes a
    fraction of the memory of the object graph and is only needed to merge an update."""

    __slots__ = ("document", "domain_rules", "rules", "version")

    def __init__(self, domain_map: DomainMap, layers: StaticLayers, use_prior: bool,
                 reverify_after: float, document: bytes | None = None) -> None:
        self.document = document if document is not None else domain_map.dumps().encode()
        self.version = domain_map.version
        rules = DomainRules(domain_map, layers, use_prior)
        self.domain_rules = rules
        self.rules: dict[str, PatternRule] = {}
        for key, decision in domain_map.patterns.items():
            names = decision.kept | decision.dropped
            keep = rules.keep[key]
            self.rules[key] = PatternRule(
                keep=keep,
                kept=sorted(keep),
                dropped=sorted(names - keep),
                default_pairs=rules.default_pairs.get(key, frozenset()),
                decided_at=decision.decided_at,
                reverify_at=timestamp_seconds(decision.decided_at) + reverify_after,
            )


class Canonical(NamedTuple):
    canonical_url: str
    pattern: str
    kept: list[str]
    dropped: list[str]
    status: str
    map_version: int
    rule: PatternRule | None


class LiveMaps:
    """Thread-safe enough for one writer (the map feed) and many readers: every change is
    one dict assignment, which the interpreter makes atomic."""

    def __init__(self, reverify_after: float, layers: StaticLayers | None = None,
                 *, use_prior: bool = True) -> None:
        self.layers = layers or StaticLayers.default()
        self.reverify_after = reverify_after
        self.use_prior = use_prior
        self._maps: dict[str, CompiledMap] = {}
        self._lock = threading.Lock()

    def apply(self, domain_map: DomainMap, document: bytes | None = None) -> bool:
        """Install ``domain_map`` (whose JSON is ``document``, if at hand) unless an equal or
        newer version is live already."""
        with self._lock:
            current = self._maps.get(domain_map.domain)
            if current is not None and current.version >= domain_map.version:
                return False
            self._maps[domain_map.domain] = CompiledMap(
                domain_map, self.layers, self.use_prior, self.reverify_after, document
            )
            return True

    def remove(self, domain: str) -> None:
        with self._lock:
            self._maps.pop(domain, None)

    def get(self, domain: str) -> CompiledMap | None:
        return self._maps.get(domain)

    def map_for(self, domain: str) -> DomainMap | None:
        compiled = self._maps.get(domain)
        if compiled is None:
            return None
        return DomainMap.from_json(orjson.loads(compiled.document))

    def __len__(self) -> int:
        return len(self._maps)

    def domains(self) -> list[str]:
        return list(self._maps)

    def canonicalize(self, url: NormalizedURL) -> Canonical:
        compiled = self._maps.get(url.host)
        version = compiled.version if compiled is not None else 0
        domain_rules = compiled.domain_rules if compiled is not None else None
        rounds = settle(url, domain_rules, self.layers, self.use_prior)
        pattern = rounds[0].pattern
        keep = rounds[-1].keep
        rule = compiled.rules.get(pattern) if compiled is not None else None
        status = PROVISIONAL if rule is None else LEARNED
        names = url.names
        if rule is not None and keep == rule.keep:
            return Canonical(url.with_only(keep), pattern, rule.kept, rule.dropped, status,
                             version, rule)
        return Canonical(url.with_only(keep), pattern, sorted(keep), sorted(names - keep),
                         status, version, rule)
