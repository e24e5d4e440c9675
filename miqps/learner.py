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
   stops as soon as the decision can no longer change. One exception for shapes too rare
   to reach ``min_conclusive``: a name that changed no page anywhere on the domain, was
   learned neutral under another shape and left this shape's pages unchanged is dropped
   here too (layer ``learned-domain``).
4. Every pattern's final form is verified: samples are fetched with *all* dropped
   parameters removed at once. If the page changes, parameters are added back one at a
   time until it no longer does (``id`` and ``slug`` that each identify the page alone
   are never both dropped), or all of them are kept.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from miqps.canonical import StaticLayers
from miqps.content import content_id
from miqps.maps import DomainMap, Layer, ParamEvidence, PatternDecision, Verification, utc_now
from miqps.prober import Comparison, Outcome, PageProber
from miqps.urls import NormalizedURL, path_shape

# A path no site serves a real page at: what a site answers there tells a bot wall (the same
# page as everywhere) from a site whose sampled URLs happen to be one page.
CONTRAST_PATH = "miqps-contrast-probe-8c1f0b7d"


@dataclass(frozen=True, slots=True)
class LearnConfig:
    """S, T, N and the verification budget. Defaults are measured, see README (Tuning)."""

    samples: int = 6
    threshold: float = 0.2
    min_conclusive: int = 3
    verify_samples: int = 1
    default_confirmations: int = 2
    default_candidates: int = 3
    default_min_share: float = 0.1
    parallel_samples: int = 2
    seed: int = 0

    def __post_init__(self) -> None:
        if self.samples < 1 or self.min_conclusive < 1 or self.verify_samples < 1:
            raise ValueError("samples, min_conclusive and verify_samples must be at least 1")
        if self.min_conclusive > self.samples:
            raise ValueError("min_conclusive cannot exceed samples")
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError("threshold must be in (0, 1]")

    def verdict(self, changed: int, conclusive: int, tried: int = 0) -> tuple[str, Layer]:
        """Keep or drop on ``changed`` of ``conclusive`` outcomes. Below ``min_conclusive``
        the parameter is kept, as *learned* content when it changed often enough that the
        rest of the budget (``samples - tried``, ``tried`` counting inconclusive ones too)
        could not make it a drop, else for insufficient evidence."""
        if conclusive < self.min_conclusive:
            possible = conclusive + max(0, self.samples - max(tried, conclusive))
            certain = changed >= self.threshold * possible
            return "keep", Layer.LEARNED if certain and changed else Layer.INSUFFICIENT
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
    verification_fetches: int = 0
    seconds: float = 0.0
    one_page: bool = False
    # Default values a page showed to matter, by path shape and name: what a map that still
    # lists them as defaults must withdraw.
    refuted_defaults: dict[str, dict[str, set[str]]] = field(default_factory=dict)


@dataclass(slots=True)
class _ShapePool:
    """Evidence pooled over every pattern of one path shape of a domain."""

    shape: str
    template: str
    urls: list[NormalizedURL]
    evidence: dict[str, ParamEvidence] = field(default_factory=dict)
    value_outcomes: dict[str, dict[str, Outcome]] = field(default_factory=dict)
    pattern_outcomes: dict[tuple[str, str], list[Outcome]] = field(default_factory=dict)
    carriers: Counter[str] = field(default_factory=Counter)
    defaults: dict[str, list[str]] = field(default_factory=dict)
    unchanged_removals: dict[str, set[frozenset[str]]] = field(default_factory=dict)
    covered_patterns: set[str] = field(default_factory=set)
    restore_contexts: list[tuple[str, frozenset[str]]] = field(default_factory=list)
    samples: list[_Sample] = field(default_factory=list)
    walled: bool = False
    refuted: dict[str, set[str]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Sample:
    """One parameter's outcome on one sampled URL."""

    name: str
    value: str
    pattern: str
    comparison: Comparison


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
        stats = self.prober.fetcher.stats
        fetches_before = stats.by_host[domain]
        distinct = {url.url: url for url in urls if url.host == domain and url.has_params}
        by_shape: dict[str, list[NormalizedURL]] = defaultdict(list)
        for url in distinct.values():
            by_shape[path_shape(url.path)].append(url)
        pools = [
            _ShapePool(shape, f"{domain}{shape}", shape_urls)
            for shape, shape_urls in sorted(by_shape.items())
        ]
        await asyncio.gather(*(self._probe_pool(pool) for pool in pools))
        one_page = await self._answers_one_page(pools)
        if one_page:
            _keep_everything(pools)
        else:
            await self._walled_shapes(pools)
            self._borrow_domain_evidence(pools)
        fetches_pooled = stats.by_host[domain]
        results = await asyncio.gather(*(self._decide_patterns(pool) for pool in pools))
        patterns = {key: decision for result in results for key, decision in result.items()}
        decisions = list(patterns.values())
        domain_map = DomainMap(domain, 0, utc_now(), dict(sorted(patterns.items())))
        report = DomainReport(
            domain=domain,
            patterns=len(decisions),
            kept=sum(len(d.kept) for d in decisions),
            dropped=sum(len(d.dropped) for d in decisions),
            inconclusive=sum(e.inconclusive for pool in pools for e in pool.evidence.values())
            + sum(d.verification.inconclusive for d in decisions),
            fetches=stats.by_host[domain] - fetches_before,
            verification_fetches=stats.by_host[domain] - fetches_pooled,
            seconds=time.monotonic() - started,
            one_page=one_page,
            refuted_defaults={pool.shape: pool.refuted for pool in pools if pool.refuted},
        )
        return domain_map, report

    async def _probe_pool(self, pool: _ShapePool) -> None:
        config = self.config
        for url in pool.urls:
            pool.carriers.update(url.names)
        names = sorted(pool.carriers)
        for name in names:
            pool.evidence[name] = ParamEvidence()
            pool.value_outcomes[name] = {}
        learnable = [name for name in names if name not in self.layers.allowlist]
        open_names = set(learnable)
        seen: dict[str, set[str]] = {name: set() for name in names}
        candidates = list(pool.urls)
        random.Random(f"{config.seed}:{pool.template}").shuffle(candidates)
        while open_names:
            batch: list[tuple[NormalizedURL, list[str]]] = []
            for _ in range(config.parallel_samples):
                pick = self._pick_sample(pool, candidates, open_names, seen)
                if pick is None:
                    break
                url, group = pick
                for name in group:
                    seen[name].add(url.value_of(name))
                    pool.evidence[name].samples += 1
                pool.covered_patterns.add(url.pattern)
                batch.append(pick)
            if not batch:
                break
            results = await asyncio.gather(
                *(self._group_test(pool, url, group) for url, group in batch)
            )
            for (url, _), comparisons in zip(batch, results, strict=True):
                pool.samples.extend(
                    _Sample(name, url.value_of(name), url.pattern, comparison)
                    for name, comparison in comparisons.items()
                )
            self._tally(pool)
            # every learnable name, not just the open ones: a change that turned out to be
            # noise can reopen a name that looked settled
            open_names = {
                name
                for name in learnable
                if not config.settled(pool.evidence[name]) and _has_unseen(candidates, name, seen)
            }
        for name, evidence in pool.evidence.items():
            if name in self.layers.allowlist:
                evidence.decision, evidence.layer = "keep", Layer.ALLOWLIST
            else:
                evidence.decision, evidence.layer = config.verdict(
                    evidence.changed, evidence.conclusive, evidence.samples
                )
        await self._confirm_defaults(pool)

    def _tally(self, pool: _ShapePool) -> None:
        """Count every parameter's outcomes anew, in the light of the noise known now: a
        change seen before its blocks were found to change by themselves (a rotating ad that
        repeated on the refetches of that time) no longer counts as a change."""
        for name, evidence in pool.evidence.items():
            evidence.changed = evidence.unchanged = evidence.inconclusive = 0
            pool.value_outcomes[name] = {}
        pool.pattern_outcomes.clear()
        for sample in pool.samples:
            outcome = sample.comparison.outcome
            if outcome is Outcome.CHANGED and not self.prober.still_changed(
                pool.template, sample.comparison
            ):
                outcome = Outcome.UNCHANGED
            _count(pool.evidence[sample.name], outcome)
            pool.value_outcomes[sample.name][sample.value] = outcome
            pool.pattern_outcomes.setdefault((sample.pattern, sample.name), []).append(outcome)

    async def _answers_one_page(
        self, pools: Sequence[_ShapePool], contrast_path: str = "/" + CONTRAST_PATH
    ) -> bool:
        """Every URL of ``pools`` fetched so far showed one and the same page, and so does
        a path no site has: a bot wall, a login or maintenance page, a parked domain, or a
        client-side app that answers every path with its shell. Removing any parameter
        then looks harmless, and trusting that would merge every page; with no contrast at
        all there is nothing to learn from. (A site whose sampled URLs are all one real
        page, say its home page with tracking parameters, answers the made-up path with
        something else, often a 404.)"""
        noise = set().union(*(self.prober.volatility.paths(pool.template) for pool in pools))
        pages: set[int] = set()
        fetched: list[NormalizedURL] = []
        for pool in pools:
            for url in pool.urls:
                snapshot = self.prober.fetched(url.url)
                if snapshot is None:
                    continue
                pages.add(content_id(snapshot, noise))
                if len(pages) > 1:
                    return False
                fetched.append(url)
        if len(fetched) < self.config.min_conclusive:
            return False
        snapshot = await self.prober.snapshot(fetched[0].origin + contrast_path)
        return snapshot is None or content_id(snapshot, noise) in pages

    async def _walled_shapes(self, pools: Sequence[_ShapePool]) -> None:
        """A path shape whose every fetched URL shows one page, which a made-up path under
        the shape shows too, keeps every parameter: an app shell or an interstitial that
        answers every URL there, not evidence that no parameter matters."""
        for pool in pools:
            made_up = pool.shape.replace("*", CONTRAST_PATH)
            if "*" not in pool.shape:
                made_up = made_up.rstrip("/") + "/" + CONTRAST_PATH
            if await self._answers_one_page([pool], made_up):
                pool.walled = True
                _keep_everything([pool])

    def _borrow_domain_evidence(self, pools: Sequence[_ShapePool]) -> None:
        """A parameter with too few samples under one path shape (``/?gclid`` seen twice)
        is dropped there when it changed no page anywhere on the domain, was learned neutral
        under at least one other shape, and left every page of this shape it was tried on
        unchanged. A name that means content under some path changes a page there or here,
        and then stays kept; the pattern's final form is still verified."""
        changed: Counter[str] = Counter()
        learned_neutral: set[str] = set()
        for pool in pools:
            for name, evidence in pool.evidence.items():
                changed[name] += evidence.changed
                if evidence.decision == "drop" and evidence.layer is Layer.LEARNED:
                    learned_neutral.add(name)
        for pool in pools:
            if pool.walled:
                continue
            for name, evidence in pool.evidence.items():
                if (
                    evidence.layer is Layer.INSUFFICIENT
                    and name in learned_neutral
                    and changed[name] == 0
                    and evidence.unchanged > evidence.inconclusive
                ):
                    evidence.decision, evidence.layer = "drop", Layer.DOMAIN

    def _pick_sample(
        self,
        pool: _ShapePool,
        candidates: Sequence[NormalizedURL],
        open_names: set[str],
        seen: dict[str, set[str]],
    ) -> tuple[NormalizedURL, list[str]] | None:
        """The URL that brings a new value for the least-sampled open parameter and for as
        many other open parameters as possible, preferring patterns not sampled yet (their
        fetch then serves verification too)."""
        evidence = pool.evidence
        for target in sorted(open_names, key=lambda n: (evidence[n].samples, n)):
            best: tuple[tuple[int, bool], NormalizedURL, list[str]] | None = None
            looked = 0
            for url in candidates:
                if target not in url.names or url.value_of(target) in seen[target]:
                    continue
                group = [
                    name
                    for name in sorted(url.names & open_names)
                    if url.value_of(name) not in seen[name]
                ]
                score = (len(group), url.pattern not in pool.covered_patterns)
                if best is None or score > best[0]:
                    best = (score, url, group)
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
    ) -> dict[str, Comparison]:
        comparison = await self.prober.compare_detail(pool.template, url.url, url.without(group))
        if comparison.outcome is Outcome.UNCHANGED:
            pool.unchanged_removals.setdefault(url.url, set()).add(frozenset(group))
        if comparison.outcome is not Outcome.CHANGED or len(group) == 1:
            return dict.fromkeys(group, comparison)
        half = len(group) // 2
        first, second = await asyncio.gather(
            self._group_test(pool, url, group[:half]), self._group_test(pool, url, group[half:])
        )
        return first | second

    async def _confirm_defaults(self, pool: _ShapePool) -> None:
        """A kept parameter may carry a default value (``sort=relevance``, ``page=1``):
        one that shows the same page as leaving the parameter out. Candidates are the
        values that once made no difference, and the three commonest values not tried yet
        (sampling often spends its first fetches on ``page=2``, ``page=3``); for a name
        never sampled, also the smallest number among the frequent values (a pager's first
        page, ``start=0``, is rarely its commonest value). A platform's
        allowlisted parameter is kept without sampling, but its default (``start=0``) is
        confirmed the same way. A value is elided only after it made no difference on
        ``1 + default_confirmations`` pages and a difference on none: a default that
        depends on the page (a product's default colour) fails this and stays. One change
        is tolerated while confirming only if, by the end, its blocks have been learned as
        noise (a rotating block that repeated on the refetches of the time)."""
        config = self.config
        tasks: list[Awaitable[None]] = []
        for name, evidence in pool.evidence.items():
            outcomes = pool.value_outcomes[name]
            changed = {v for v, o in outcomes.items() if o is Outcome.CHANGED}
            if changed:  # such a value is no default, whatever the name's decision
                pool.refuted.setdefault(name, set()).update(changed)
            if evidence.decision != "keep" or evidence.layer not in _CONTENT_LAYERS:
                continue
            candidates = [v for v, o in outcomes.items() if o is Outcome.UNCHANGED][:2]
            counts = Counter(u.value_of(name) for u in pool.urls if name in u.names)
            common = [
                value
                for value, count in counts.most_common()
                if count >= config.default_min_share * pool.carriers[name] and value not in outcomes
            ]
            candidates.extend(common[: config.default_candidates])
            first_page = _smallest_number(common) if not outcomes else None
            if first_page is not None and first_page not in candidates:
                candidates.append(first_page)
            tasks.extend(self._confirm_default(pool, name, value) for value in candidates)
        await asyncio.gather(*tasks)

    async def _confirm_default(self, pool: _ShapePool, name: str, value: str) -> None:
        seen_once = pool.value_outcomes[name].get(value) is Outcome.UNCHANGED
        needed = self.config.default_confirmations + (0 if seen_once else 1)
        carriers = sorted(
            (u for u in pool.urls if name in u.names and u.value_of(name) == value),
            key=lambda u: u.url,
        )
        random.Random(f"{self.config.seed}:{pool.template}:{value}").shuffle(carriers)
        confirmed = 0
        changes: list[Comparison] = []
        contexts: set[str] = set()
        for url in carriers:
            if confirmed >= needed:
                break
            context = url.without([name])
            if context in contexts:
                continue
            contexts.add(context)
            comparison = await self.prober.compare_detail(pool.template, url.url, context)
            if comparison.outcome is Outcome.CHANGED:
                # one change may still turn out to be a rotating block; a second ends it
                changes.append(comparison)
                if len(changes) > 1:
                    break
            elif comparison.outcome is Outcome.UNCHANGED:
                confirmed += 1
        if any(self.prober.still_changed(pool.template, change) for change in changes):
            pool.refuted.setdefault(name, set()).add(value)
        elif confirmed >= needed:
            pool.defaults.setdefault(name, []).append(value)

    async def _decide_patterns(self, pool: _ShapePool) -> dict[str, PatternDecision]:
        """Verify every pattern of the shape, largest first, a few at a time, so that a
        repair on a sibling pattern first tries what the larger patterns needed."""
        by_pattern: dict[str, list[NormalizedURL]] = defaultdict(list)
        for url in pool.urls:
            by_pattern[url.pattern].append(url)
        order = sorted(by_pattern, key=lambda key: (-len(by_pattern[key]), key))
        decisions: dict[str, PatternDecision] = {}
        step = max(1, self.config.parallel_samples)
        for start in range(0, len(order), step):
            keys = order[start : start + step]
            wave = await asyncio.gather(
                *(self._decide_pattern(pool, key, by_pattern[key]) for key in keys)
            )
            decisions.update(zip(keys, wave, strict=True))
        return decisions

    async def _decide_pattern(
        self, pool: _ShapePool, key: str, urls: list[NormalizedURL]
    ) -> PatternDecision:
        names = sorted(urls[0].names)
        evidence = {name: _copy(pool.evidence[name]) for name in names}
        kept = {name for name in names if evidence[name].decision == "keep"}
        kept -= self._neutral_here(pool, key, kept, evidence)
        restore_first = self._restore_first(pool, names, kept)
        if restore_first is not None:
            kept.add(restore_first)
            evidence[restore_first].decision = "keep"
            evidence[restore_first].layer = Layer.VERIFICATION
        defaults = {name: list(pool.defaults[name]) for name in kept if name in pool.defaults}
        verification = Verification()
        samples = sorted(urls, key=lambda u: u.url)
        random.Random(f"{self.config.seed}:{key}").shuffle(samples)
        samples.sort(key=lambda u: not self.prober.has_snapshot(u.url))
        unconfirmed = DefaultsToConfirm(defaults)
        attempts = 0
        forms: set[frozenset[str]] = set()

        async def verify(url: NormalizedURL, removed: frozenset[str]) -> None:
            nonlocal attempts
            attempts += 1
            if removed in pool.unchanged_removals.get(url.url, ()):
                outcome = Outcome.UNCHANGED
            else:
                outcome = await self.prober.compare(pool.template, url.url, url.without(removed))
            if outcome is Outcome.INCONCLUSIVE:
                verification.inconclusive += 1
                return
            forms.add(removed)
            verification.samples += 1
            if outcome is Outcome.UNCHANGED:
                unconfirmed.confirmed_by(url, removed)
                return
            verification.changed += 1
            restored = await self._repair(pool, url, sorted(removed))
            pool.restore_contexts.extend((name, frozenset(kept)) for name in restored)
            verification.restored.extend(restored)
            for name in restored:
                kept.add(name)
                defaults.pop(name, None)
                evidence[name].decision, evidence[name].layer = "keep", Layer.VERIFICATION

        budget = self.config.verify_samples
        for url in samples:
            removed = _removed(url, kept, defaults)
            if not removed or (verification.samples >= budget and removed in forms):
                continue
            if verification.samples >= budget + 1 or attempts >= budget + 2:
                break
            await verify(url, removed)
        for url in unconfirmed.carriers(samples):
            if unconfirmed.wanted(url, defaults):
                await verify(url, _removed(url, kept, defaults))
        unconfirmed.withdraw_from(defaults)
        if attempts and verification.samples == 0:
            defaults.clear()
            for name in names:
                if name not in kept:
                    evidence[name].decision, evidence[name].layer = "keep", Layer.INSUFFICIENT
                    kept.add(name)
        for name, values in defaults.items():
            evidence[name].default_values = sorted(values)
        return PatternDecision(
            kept=frozenset(kept),
            dropped=frozenset(names) - kept,
            params=evidence,
            verification=verification,
            decided_at=utc_now(),
            urls_seen=len(urls),
        )

    @staticmethod
    def _restore_first(pool: _ShapePool, names: Sequence[str], kept: set[str]) -> str | None:
        """The parameter that verification would most likely add back here: one restored
        on a sibling pattern that kept no more than this one keeps (no other identifier
        could stand in for it). Keeping it from the start spares a failed verification
        and a repair; one alias of a pair, never both."""
        candidates = {
            name
            for name, kept_there in pool.restore_contexts
            if name in names and name not in kept and kept <= kept_there
        }
        return _restore_order(pool, candidates)[0] if candidates else None

    def _neutral_here(
        self, pool: _ShapePool, key: str, kept: set[str], evidence: dict[str, ParamEvidence]
    ) -> set[str]:
        """Kept parameters that changed the page elsewhere but never in this pattern, on at
        least two distinct values, such as one of two aliases present together. They are
        dropped only if this pattern's verification then shows the page unchanged."""
        neutral = set()
        for name in kept:
            pooled = evidence[name]
            if pooled.layer is not Layer.LEARNED or not pooled.unchanged:
                continue
            local = pool.pattern_outcomes.get((key, name), [])
            if len(local) >= 2 and all(outcome is Outcome.UNCHANGED for outcome in local):
                neutral.add(name)
                pooled.decision, pooled.layer = "drop", Layer.VERIFICATION
        return neutral

    async def _repair(
        self,
        pool: _ShapePool,
        url: NormalizedURL,
        removed: list[str],
    ) -> list[str]:
        """Add removed parameters back one at a time until the page no longer changes;
        if no single one is enough, keep them all."""
        order = _restore_order(pool, removed)
        for name in order:
            restore = frozenset(removed) - {name}
            outcome = await self.prober.compare(pool.template, url.url, url.without(restore))
            if outcome is Outcome.UNCHANGED:
                return [name]
            if outcome is Outcome.INCONCLUSIVE:
                break
        return order


class DefaultsToConfirm:
    """The default values of one pattern that no URL of that pattern has yet shown to be
    harmless to leave out. A default is confirmed over the whole path shape, often on URLs
    where another parameter stands in for it (``id=7`` is harmless beside its alias
    ``pid=7``), so it is applied in a pattern only after a URL of that very pattern, carrying
    the value, showed the same page in its canonical form; otherwise the pattern keeps it."""

    TRIES = 2

    def __init__(self, defaults: Mapping[str, Iterable[str]]) -> None:
        self.pending = {(name, pair) for name, pairs in defaults.items() for pair in pairs}

    def carriers(self, urls: Sequence[NormalizedURL]) -> list[NormalizedURL]:
        """Up to :attr:`TRIES` URLs carrying each pending value, in the order of ``urls``."""
        chosen: dict[str, NormalizedURL] = {}
        for name, pair in sorted(self.pending):
            found = [url for url in urls if url.value_of(name) == pair][: self.TRIES]
            chosen.update((url.url, url) for url in found)
        return list(chosen.values())

    def wanted(self, url: NormalizedURL, defaults: Mapping[str, Iterable[str]]) -> bool:
        """``url`` still carries a pending value that the pattern still elides."""
        return any(
            url.value_of(name) == pair and pair in defaults.get(name, ())
            for name, pair in self.pending
        )

    def confirmed_by(self, url: NormalizedURL, removed: Iterable[str]) -> None:
        for name in removed:
            self.pending.discard((name, url.value_of(name)))

    def withdraw_from(self, defaults: dict[str, list[str]]) -> None:
        for name, pair in self.pending:
            if pair in defaults.get(name, ()):
                defaults[name].remove(pair)
                if not defaults[name]:
                    del defaults[name]


# Layers that keep a parameter because it shows content, rather than for lack of evidence.
_CONTENT_LAYERS = frozenset({Layer.LEARNED, Layer.ALLOWLIST})


def _keep_everything(pools: Sequence[_ShapePool]) -> None:
    for pool in pools:
        pool.defaults.clear()
        for evidence in pool.evidence.values():
            if evidence.layer is not Layer.ALLOWLIST:
                evidence.decision, evidence.layer = "keep", Layer.INSUFFICIENT


def _restore_order(pool: _ShapePool, names: Iterable[str]) -> list[str]:
    """Likeliest to be needed first: restored before, changed a page, carried by most URLs.
    The same order everywhere keeps the same alias of a pair on every pattern."""
    restored = {name for name, _ in pool.restore_contexts}
    return sorted(
        names,
        key=lambda n: (
            n not in restored,
            pool.evidence[n].changed == 0,
            -pool.carriers[n],
            n,
        ),
    )


def _removed(url: NormalizedURL, kept: set[str], defaults: dict[str, list[str]]) -> frozenset[str]:
    """What the canonical form removes from ``url``: dropped names and default values."""
    return frozenset(
        name
        for name in url.names
        if name not in kept or url.value_of(name) in defaults.get(name, ())
    )


def _smallest_number(values: Iterable[str]) -> str | None:
    """The ``name=N`` pair with the smallest whole number N, if any value is one."""
    numbers = [
        (int(digits), pair)
        for pair in values
        if (digits := pair.partition("=")[2]).isdigit() and len(digits) < 10
    ]
    return min(numbers)[1] if numbers else None


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
    return replace(evidence, default_values=[])


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
