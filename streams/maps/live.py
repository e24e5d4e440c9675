"""The current MIQPS maps of every domain, for the stream workers.

The canonical form and the decision are the core's: :class:`miqps.canonical.Canonicalizer`
compiles each map once and decides every URL (:meth:`~miqps.canonical.Canonicalizer.decide`).
This module holds one canonicalizer per process and adds what only the stream needs: which
map version is live, and when each learned pattern's decision is due for re-verification.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from miqps.canonical import Canonicalizer, Decision, StaticLayers
from miqps.maps import DomainMap, timestamp_seconds
from miqps.urls import NormalizedURL


class Decide(Protocol):
    def __call__(self, url: NormalizedURL, original: str | None = None) -> Decision: ...


@dataclass(frozen=True, slots=True)
class PatternRule:
    """When a learned pattern was decided, and when its decision is due to be checked again."""

    decided_at: str
    reverify_at: float


@dataclass(frozen=True, slots=True)
class HeldMaps:
    """How many domains a process holds something of in memory."""

    compiled: int
    """Maps compiled in the canonicalizer."""
    live: int
    """:class:`LiveMap` records (version and re-verification times)."""


@dataclass(frozen=True, slots=True)
class LiveMap:
    """What the stream knows of one domain's live map beside its compiled rules."""

    version: int
    rules: Mapping[str, PatternRule]
    updated_at: float = 0.0
    """The map's ``updated_at``, in seconds since the epoch (0 if it has none)."""


class LiveMaps:
    """One writer (the map feed) and any number of readers: :meth:`apply` and :meth:`remove`
    hold a lock, and every change a reader can see is one dict assignment, which the
    interpreter makes atomic.

    ``canonicalizer`` is where the maps are installed; by default a new one, which keeps
    each map as its JSON document (see :meth:`~miqps.canonical.Canonicalizer.update`).
    Passing the API's own :class:`~miqps.canonical.Canonicalizer` makes the map feed keep
    it current, with maps kept as objects so that its ``explain`` stays fast.
    """

    def __init__(
        self,
        reverify_after: float,
        layers: StaticLayers | None = None,
        *,
        use_prior: bool = True,
        canonicalizer: Canonicalizer | None = None,
    ) -> None:
        self._compact = canonicalizer is None
        self.canonicalizer = canonicalizer or Canonicalizer(layers, use_prior=use_prior)
        self.reverify_after = reverify_after
        self._maps: dict[str, LiveMap] = {}
        self._lock = threading.Lock()
        # The core's decision without the per-parameter layers: a partial, since every URL
        # of the stream passes through it. Pass the input's text as ``original`` where it is
        # at hand: building it again from the parsed URL costs a fifth of the decision.
        self.decide: Decide = partial(self.canonicalizer.decide, with_layers=False)

    @property
    def layers(self) -> StaticLayers:
        return self.canonicalizer.layers

    def apply(self, domain_map: DomainMap, document: bytes | None = None) -> bool:
        """Install ``domain_map`` (whose JSON is ``document``, if at hand) unless a newer
        version, or the same map, is live already.

        Two probe workers can both publish version N+1 of a domain during a rebalance. The
        later record wins, as the topic's compaction keeps it: every worker reads the same
        order, so all of them end on the map the topic keeps."""
        with self._lock:
            current = self._maps.get(domain_map.domain)
            if current is not None and (
                current.version > domain_map.version
                or (
                    current.version == domain_map.version
                    and self.canonicalizer.map_for(domain_map.domain) == domain_map
                )
            ):
                return False
            if self._compact:
                document = document if document is not None else domain_map.dumps().encode()
                self.canonicalizer.update(domain_map, document)
            else:
                self.canonicalizer.update(domain_map)
            self._maps[domain_map.domain] = LiveMap(
                domain_map.version,
                {
                    key: PatternRule(
                        decision.decided_at,
                        timestamp_seconds(decision.decided_at) + self.reverify_after,
                    )
                    for key, decision in domain_map.patterns.items()
                },
                timestamp_seconds(domain_map.updated_at),
            )
            return True

    def remove(self, domain: str) -> None:
        with self._lock:
            self._maps.pop(domain, None)
            self.canonicalizer.forget(domain)

    def get(self, domain: str) -> LiveMap | None:
        return self._maps.get(domain)

    def map_for(self, domain: str) -> DomainMap | None:
        return self.canonicalizer.map_for(domain)

    def __len__(self) -> int:
        return len(self._maps)

    def held(self) -> HeldMaps:
        """What this process holds in memory, as of now (safe from any thread)."""
        return HeldMaps(self.canonicalizer.maps_held, len(self._maps))

    def live(self) -> list[LiveMap]:
        """Every live map, as of now (safe to call from any thread)."""
        return list(self._maps.values())

    def needs_learning(self, domain: str, pattern: str, basis: str) -> bool:
        """Whether the live map still lacks what a sample of ``pattern`` asks for: a
        decision (``basis`` empty), or the re-verification of the decision made at
        ``basis``."""
        live = self._maps.get(domain)
        rule = live.rules.get(pattern) if live is not None else None
        if rule is None:
            return True
        return bool(basis) and rule.decided_at == basis

    def due_for_reverification(self, decision: Decision, now: float) -> str | None:
        """The ``decided_at`` of a learned decision whose re-verification time has come
        (``now`` in seconds since the epoch), else None."""
        live = self._maps.get(decision.domain)
        rule = live.rules.get(decision.pattern) if live is not None else None
        if rule is None or rule.reverify_at > now:
            return None
        return rule.decided_at
