"""Canonicalization with the static and learned layers.

A parameter is kept if any layer keeps it: a platform allowlist, the learned non-neutral
set, or the conservative default for anything unlearned. The cold-start prior may drop
``utm_*``, ``gclid``, ``fbclid`` and ``msclkid`` in unlearned patterns only, and never a
parameter that the domain's learned evidence keeps.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from miqps.maps import DomainMap, Layer
from miqps.urls import NormalizedURL, path_shape, pattern_key


@dataclass(frozen=True, slots=True)
class StaticLayers:
    allowlist: frozenset[str]
    prior_exact: frozenset[str]
    prior_prefixes: tuple[str, ...]

    @classmethod
    def default(cls) -> StaticLayers:
        text = resources.files("miqps").joinpath("data/static_layers.json").read_text("utf-8")
        data: dict[str, Any] = json.loads(text)
        allowlist = frozenset(name for names in data["allowlists"].values() for name in names)
        return cls(
            allowlist=allowlist,
            prior_exact=frozenset(data["prior_drop_exact"]),
            prior_prefixes=tuple(data["prior_drop_prefixes"]),
        )

    def prior_drops(self, name: str) -> bool:
        return name in self.prior_exact or name.startswith(self.prior_prefixes)


@dataclass(frozen=True, slots=True)
class Decision:
    url: str
    canonical_url: str
    domain: str
    pattern: str
    kept: tuple[str, ...]
    dropped: tuple[str, ...]
    layers: dict[str, str]
    status: str
    map_version: int

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "canonical_url": self.canonical_url,
            "domain": self.domain,
            "pattern": self.pattern,
            "kept": list(self.kept),
            "dropped": list(self.dropped),
            "layers": self.layers,
            "status": self.status,
            "map_version": self.map_version,
        }


class _CompiledDomain:
    """One domain's map reduced to what the per-URL path needs."""

    __slots__ = ("learned_keep", "map", "patterns", "version")

    def __init__(self, domain_map: DomainMap, allowlist: frozenset[str]) -> None:
        self.map = domain_map
        self.version = domain_map.version
        self.patterns: dict[str, frozenset[str]] = {
            key: decision.kept | (allowlist & (decision.kept | decision.dropped))
            for key, decision in domain_map.patterns.items()
        }
        self.learned_keep = frozenset(
            name
            for decision in domain_map.patterns.values()
            for name, evidence in decision.params.items()
            if evidence.decision == "keep" and evidence.layer == Layer.LEARNED
        )


class Canonicalizer:
    """Turns normalized URLs into canonical ones, given the current maps.

    Maps can be replaced at any time with :meth:`update`; the per-URL path reads one dict.
    """

    def __init__(self, layers: StaticLayers | None = None, *, use_prior: bool = True) -> None:
        self.layers = layers or StaticLayers.default()
        self.use_prior = use_prior
        self._domains: dict[str, _CompiledDomain] = {}

    def update(self, domain_map: DomainMap) -> None:
        self._domains[domain_map.domain] = _CompiledDomain(domain_map, self.layers.allowlist)

    def load(self, maps: Mapping[str, DomainMap]) -> None:
        for domain_map in maps.values():
            self.update(domain_map)

    def map_for(self, domain: str) -> DomainMap | None:
        compiled = self._domains.get(domain)
        return compiled.map if compiled else None

    def canonical_url(self, url: NormalizedURL) -> str:
        if not url.pairs:
            return url.url
        compiled = self._domains.get(url.host)
        if compiled is not None:
            kept = compiled.patterns.get(url.pattern)
            if kept is not None:
                return url.with_only(kept)
        return url.with_only(self._unlearned_keep(url, compiled))

    def _unlearned_keep(self, url: NormalizedURL, compiled: _CompiledDomain | None) -> set[str]:
        names = url.names
        if not self.use_prior:
            return set(names)
        learned_keep = compiled.learned_keep if compiled else frozenset()
        return {
            name
            for name in names
            if not self.layers.prior_drops(name)
            or name in learned_keep
            or name in self.layers.allowlist
        }

    def decide(self, url: NormalizedURL, original: str | None = None) -> Decision:
        """The canonical URL with the layer that decided each parameter."""
        names = sorted(url.names)
        pattern = pattern_key(path_shape(url.path), names)
        compiled = self._domains.get(url.host)
        decision = compiled.map.patterns.get(pattern) if compiled else None
        layers: dict[str, str] = {}
        if compiled is not None and decision is not None:
            kept = set(compiled.patterns[pattern])
            for name in names:
                if name in self.layers.allowlist:
                    layers[name] = Layer.ALLOWLIST
                elif name in decision.params:
                    layers[name] = decision.params[name].layer
                else:
                    layers[name] = Layer.UNLEARNED
            status = "learned"
        else:
            kept = self._unlearned_keep(url, compiled)
            for name in names:
                if name in self.layers.allowlist:
                    layers[name] = Layer.ALLOWLIST
                elif name in kept:
                    layers[name] = Layer.UNLEARNED
                else:
                    layers[name] = Layer.PRIOR
            status = "provisional"
        return Decision(
            url=original if original is not None else url.url,
            canonical_url=url.with_only(kept),
            domain=url.host,
            pattern=pattern,
            kept=tuple(name for name in names if name in kept),
            dropped=tuple(name for name in names if name not in kept),
            layers={name: str(layer) for name, layer in layers.items()},
            status=status,
            map_version=compiled.version if compiled else 0,
        )
