"""MIQPS learning: which parameters of each pattern change the page.

Per domain:

1. URLs are grouped by pattern (path shape + sorted parameter names).
2. Evidence is *pooled* per path shape: tracking parameters appear in every combination,
   so patterns multiply while each holds few URLs. For each parameter, samples with
   distinct values of it are compared with and without it. Parameters are tested in
   groups: removing several at once and seeing the page unchanged is evidence for each of
   them; a changed group is split in halves until the changers are isolated.
3. A parameter is kept when the content changed in at least ``threshold`` of its
   conclusive samples, or when it has fewer than ``min_conclusive`` of them. Sampling
   stops as soon as the decision can no longer change.
4. Every pattern's final form is verified: samples are fetched with *all* dropped
   parameters removed at once. If the page changes, parameters are added back one at a
   time until it no longer does (``id`` and ``slug`` that each identify the page alone
   are never both dropped), or all of them are kept.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from miqps.canonical import StaticLayers
from miqps.maps import DomainMap, Layer, ParamEvidence, PatternDecision, Verification, utc_now
from miqps.prober import Outcome, PageProber
from miqps.urls import NormalizedURL, path_shape


@dataclass(frozen=True, slots=True)
class LearnConfig:
    """S, T, N and the verification budget. Defaults are measured, see README (Tuning)."""

    samples: int = 6
    threshold: float = 0.2
    min_conclusive: int = 3
    verify_samples: int = 2
    parallel_samples: int = 2
    seed: int = 0

    def __post_init__(self) -> None:
        if self.samples < 1 or self.min_conclusive < 1 or self.verify_samples < 1:
            raise ValueError("samples, min_conclusive and verify_samples must be at least 1")
        if self.min_conclusive > self.samples:
            raise ValueError("min_conclusive cannot exceed samples")
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError("threshold must be in (0, 1]")

    def verdict(self, changed: int, conclusive: int) -> tuple[str, Layer]:
        if conclusive < self.min_conclusive:
            return "keep", Layer.INSUFFICIENT
        if changed >= self.threshold * conclusive:
            return "keep", Layer.LEARNED
        return "drop", Layer.LEARNED

    def settled(self, evidence: ParamEvidence) -> bool:
        """True when no outcome of the remaining samples can change the decision."""
        remaining = self.samples - evidence.samples
        if remaining <= 0:
            return True
        base = evidence.changed, evidence.conclusive
        first = self.verdict(*base)[0]
        return all(
            self.verdict(base[0] + changed, base[1] + added)[0] == first
            for added in range(remaining + 1)
            for changed in range(added + 1)
        )


@dataclass(slots=True)
class DomainReport:
    domain: str
    patterns: int = 0
    kept: int = 0
    dropped: int = 0
    inconclusive: int = 0
    fetches: int = 0
    seconds: float = 0.0


@dataclass(slots=True)
class _ShapePool:
    shape: str
    template: str
    urls: list[NormalizedURL]
    evidence: dict[str, ParamEvidence] = field(default_factory=dict)


class Learner:
    def __init__(
        self,
        prober: PageProber,
        config: LearnConfig | None = None,
        layers: StaticLayers | None = None,
    ) -> None:
        self.prober = prober
        self.config = config or LearnConfig()
        self.layers = layers or StaticLayers.default()

    async def learn_domain(
        self, domain: str, urls: Iterable[NormalizedURL]
    ) -> tuple[DomainMap, DomainReport]:
        started = time.monotonic()
        fetches_before = self.prober.fetcher.stats.by_host[domain]
        distinct = {url.url: url for url in urls if url.host == domain and url.pairs}
        by_pattern: dict[str, list[NormalizedURL]] = defaultdict(list)
        by_shape: dict[str, list[NormalizedURL]] = defaultdict(list)
        for url in distinct.values():
            by_pattern[url.pattern].append(url)
            by_shape[path_shape(url.path)].append(url)
        pools = [
            _ShapePool(shape, f"{domain}{shape}", shape_urls)
            for shape, shape_urls in sorted(by_shape.items())
        ]
        await asyncio.gather(*(self._probe_pool(pool) for pool in pools))
        pooled = {pool.shape: pool.evidence for pool in pools}
        keys = sorted(by_pattern)
        decisions = await asyncio.gather(
            *(self._decide_pattern(domain, key, by_pattern[key], pooled) for key in keys)
        )
        domain_map = DomainMap(domain, 0, utc_now(), dict(zip(keys, decisions, strict=True)))
        report = DomainReport(
            domain=domain,
            patterns=len(keys),
            kept=sum(len(d.kept) for d in decisions),
            dropped=sum(len(d.dropped) for d in decisions),
            inconclusive=sum(e.inconclusive for pool in pools for e in pool.evidence.values())
            + sum(d.verification.inconclusive for d in decisions),
            fetches=self.prober.fetcher.stats.by_host[domain] - fetches_before,
            seconds=time.monotonic() - started,
        )
        return domain_map, report

    async def _probe_pool(self, pool: _ShapePool) -> None:
        config = self.config
        names = sorted({name for url in pool.urls for name in url.names})
        for name in names:
            pool.evidence[name] = ParamEvidence()
        open_names = {name for name in names if name not in self.layers.allowlist}
        seen: dict[str, set[str]] = {name: set() for name in names}
        candidates = list(pool.urls)
        random.Random(f"{config.seed}:{pool.template}").shuffle(candidates)
        while open_names:
            batch: list[tuple[NormalizedURL, list[str]]] = []
            for _ in range(config.parallel_samples):
                pick = self._pick_sample(candidates, open_names, seen, pool.evidence)
                if pick is None:
                    break
                url, group = pick
                for name in group:
                    seen[name].add(url.value_of(name))
                    pool.evidence[name].samples += 1
                batch.append(pick)
            if not batch:
                break
            results = await asyncio.gather(
                *(self._group_test(pool, url, group) for url, group in batch)
            )
            for outcomes in results:
                for name, outcome in outcomes.items():
                    _count(pool.evidence[name], outcome)
            open_names = {
                name for name in open_names if not config.settled(pool.evidence[name])
            }
            open_names &= {name for name in open_names if _has_unseen(candidates, name, seen)}
        for name, evidence in pool.evidence.items():
            if name in self.layers.allowlist:
                evidence.decision, evidence.layer = "keep", Layer.ALLOWLIST
            else:
                evidence.decision, evidence.layer = config.verdict(
                    evidence.changed, evidence.conclusive
                )

    def _pick_sample(
        self,
        candidates: Sequence[NormalizedURL],
        open_names: set[str],
        seen: dict[str, set[str]],
        evidence: dict[str, ParamEvidence],
    ) -> tuple[NormalizedURL, list[str]] | None:
        """The URL that brings a new value for the least-sampled open parameter, and
        for as many other open parameters as possible."""
        for target in sorted(open_names, key=lambda n: (evidence[n].samples, n)):
            best: tuple[int, NormalizedURL, list[str]] | None = None
            looked = 0
            for url in candidates:
                if target not in url.names or url.value_of(target) in seen[target]:
                    continue
                group = [
                    name
                    for name in sorted(url.names & open_names)
                    if url.value_of(name) not in seen[name]
                ]
                if best is None or len(group) > best[0]:
                    best = (len(group), url, group)
                looked += 1
                if looked >= 32:
                    break
            if best is not None:
                _, url, group = best
                group.sort(key=lambda n: (-_change_ratio(evidence[n]), n))
                return url, group
        return None

    async def _group_test(
        self, pool: _ShapePool, url: NormalizedURL, group: list[str]
    ) -> dict[str, Outcome]:
        outcome = await self.prober.compare(pool.template, url.url, url.without(group))
        if outcome is not Outcome.CHANGED or len(group) == 1:
            return dict.fromkeys(group, outcome)
        half = len(group) // 2
        first, second = await asyncio.gather(
            self._group_test(pool, url, group[:half]), self._group_test(pool, url, group[half:])
        )
        return first | second

    async def _decide_pattern(
        self,
        domain: str,
        key: str,
        urls: list[NormalizedURL],
        pooled: dict[str, dict[str, ParamEvidence]],
    ) -> PatternDecision:
        shape = path_shape(urls[0].path)
        template = f"{domain}{shape}"
        names = sorted(urls[0].names)
        evidence = {name: _copy(pooled[shape][name]) for name in names}
        kept = {name for name in names if evidence[name].decision == "keep"}
        verification = Verification()
        samples = sorted(urls, key=lambda u: u.url)
        random.Random(f"{self.config.seed}:{key}").shuffle(samples)
        samples.sort(key=lambda u: not self.prober.has_snapshot(u.url))
        for url in samples[: self.config.verify_samples]:
            dropped = [name for name in names if name not in kept]
            if not dropped:
                break
            outcome = await self.prober.compare(template, url.url, url.with_only(kept))
            if outcome is Outcome.INCONCLUSIVE:
                verification.inconclusive += 1
                continue
            verification.samples += 1
            if outcome is Outcome.CHANGED:
                verification.changed += 1
                restored = await self._repair(template, url, kept, dropped, evidence)
                kept.update(restored)
                verification.restored.extend(restored)
                for name in restored:
                    evidence[name].decision, evidence[name].layer = "keep", Layer.VERIFICATION
        if verification.samples == 0:
            for name in names:
                if name not in kept:
                    evidence[name].decision, evidence[name].layer = "keep", Layer.INSUFFICIENT
                    kept.add(name)
        return PatternDecision(
            kept=frozenset(kept),
            dropped=frozenset(names) - kept,
            params=evidence,
            verification=verification,
            decided_at=utc_now(),
            urls_seen=len(urls),
        )

    async def _repair(
        self,
        template: str,
        url: NormalizedURL,
        kept: set[str],
        dropped: list[str],
        evidence: dict[str, ParamEvidence],
    ) -> list[str]:
        """Add dropped parameters back one at a time until the page no longer changes."""
        order = sorted(dropped, key=lambda n: (-_change_ratio(evidence[n]), n))
        for name in order:
            outcome = await self.prober.compare(template, url.url, url.with_only(kept | {name}))
            if outcome is Outcome.UNCHANGED:
                return [name]
            if outcome is Outcome.INCONCLUSIVE:
                break
        return order


def _count(evidence: ParamEvidence, outcome: Outcome) -> None:
    if outcome is Outcome.CHANGED:
        evidence.changed += 1
    elif outcome is Outcome.UNCHANGED:
        evidence.unchanged += 1
    else:
        evidence.inconclusive += 1


def _change_ratio(evidence: ParamEvidence) -> float:
    return evidence.changed / evidence.conclusive if evidence.conclusive else 0.0


def _has_unseen(candidates: Sequence[NormalizedURL], name: str, seen: dict[str, set[str]]) -> bool:
    return any(name in url.names and url.value_of(name) not in seen[name] for url in candidates)


def _copy(evidence: ParamEvidence) -> ParamEvidence:
    return ParamEvidence(
        evidence.decision,
        evidence.layer,
        evidence.samples,
        evidence.changed,
        evidence.unchanged,
        evidence.inconclusive,
    )


def group_by_domain(urls: Iterable[NormalizedURL]) -> dict[str, list[NormalizedURL]]:
    grouped: dict[str, list[NormalizedURL]] = defaultdict(list)
    for url in urls:
        grouped[url.host].append(url)
    return grouped


async def learn_all(
    learner: Learner,
    urls: Iterable[NormalizedURL],
    on_domain_done: Callable[[DomainReport], None] | None = None,
) -> tuple[dict[str, DomainMap], list[DomainReport]]:
    """Learn every domain concurrently; per-host politeness is the fetcher's job."""
    maps: dict[str, DomainMap] = {}
    reports: list[DomainReport] = []

    async def one(domain: str, domain_urls: list[NormalizedURL]) -> None:
        domain_map, report = await learner.learn_domain(domain, domain_urls)
        maps[domain] = domain_map
        reports.append(report)
        if on_domain_done is not None:
            on_domain_done(report)

    await asyncio.gather(*(one(d, u) for d, u in sorted(group_by_domain(urls).items())))
    return maps, reports
