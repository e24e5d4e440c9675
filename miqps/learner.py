"""MIQPS learning: which parameters of each pattern change the page.

Per domain:

1. URLs are grouped by pattern (path shape + sorted parameter names).
2. Evidence is *pooled* per path shape: tracking parameters appear in every combination,
   so patterns multiply while each holds few URLs. Each parameter is tested on distinct
   *items* (distinct paths and values of the other kept parameters), with and without it.
   Parameters are tested in groups: removing several at once and seeing the page
   unchanged is evidence for each of them; a group that changed the page, or whose
   reduced page could not be judged while the original could, is split in halves until
   the cause is isolated.
3. One confirmed change on any item keeps a parameter. It is dropped only once it left
   enough distinct items unchanged (``LearnConfig.verdict``): more of them when its values
   look like a choice among a few options (sizes, colours, formats), because such a
   parameter may matter for a minority of the items only. Sampling stops as soon as the
   decision can no longer change. Shapes too rare to decide borrow the domain's evidence:
   a name that changed no page anywhere on the domain, was learned neutral under another
   shape and left this shape's pages unchanged is dropped here too (``learned-domain``).
4. Every pattern's final form is verified: samples are fetched with *all* dropped
   parameters removed at once. If the page changes (or cannot be judged), parameters are
   added back one at a time until it shows the same page (``id`` and ``slug`` that each
   identify the page alone are never both dropped), or all of them are kept.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from miqps.canonical import StaticLayers
from miqps.content import content_id
from miqps.maps import DomainMap, Layer, ParamEvidence, PatternDecision, Verification, utc_now
from miqps.prober import Comparison, Outcome, PageProber
from miqps.urls import InvalidURL, NormalizedURL, parse, path_shape

# A path no site serves a real page at: what a site answers there tells a bot wall (the same
# page as everywhere) from a site whose sampled URLs happen to be one page.
CONTRAST_PATH = "miqps-contrast-probe-8c1f0b7d"


@dataclass(frozen=True, slots=True)
class LearnConfig:
    """How much evidence a decision takes. Defaults are measured, see README (How it decides).

    A parameter is dropped only after it left the page unchanged on ``samples`` distinct
    *items* (distinct paths and values of the pattern's other kept parameters), or on
    ``choice_items`` of them when its values look like a choice among a few options (at most
    ``choice_values`` values, each carried on ``choice_repeats`` URLs or more on average:
    sizes, colours, formats). With n items all unchanged, a parameter that changes a share p
    of the items survives with probability (1 - p)^n. When the path shape has no more
    items to offer, ``min_conclusive`` items (``samples`` for a choice-like parameter)
    are enough. One confirmed change on any item keeps the parameter: a change seen on
    fewer than ``threshold`` of its conclusive samples, or on its only one, is confirmed by
    fetching both pages again first.

    Items say nothing of values never tried: a drop covers every value of the parameter
    only once ``generalize_values`` distinct values left pages unchanged. With fewer (every
    sample carried ``sort=latest``, the listing's default), the parameter is kept and only
    those values are elided, as defaults; a name the cold-start prior drops (``utm_*``) is
    exempt.
    """

    samples: int = 6
    threshold: float = 0.2
    min_conclusive: int = 3
    verify_samples: int = 1
    choice_items: int = 30
    choice_sampled: int = 12
    choice_values: int = 12
    choice_repeats: int = 3
    default_confirmations: int = 2
    default_candidates: int = 3
    default_min_share: float = 0.1
    generalize_values: int = 3
    parallel_samples: int = 2
    seed: int = 0

    def __post_init__(self) -> None:
        if min(self.samples, self.min_conclusive, self.verify_samples, self.generalize_values) < 1:
            raise ValueError(
                "samples, min_conclusive, verify_samples and generalize_values must be at least 1"
            )
        if self.min_conclusive > self.samples:
            raise ValueError("min_conclusive cannot exceed samples")
        if not self.samples <= self.choice_sampled <= self.choice_items:
            raise ValueError("choice_sampled must lie between samples and choice_items")
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError("threshold must be in (0, 1]")

    def items_needed(self, choice: bool, *, sampling: bool = False) -> int:
        """Distinct unchanged items that drop a parameter. While sampling, a choice-like
        one is tried on ``choice_sampled`` items: the verification of the path shape's
        patterns then tries it on one more item each, and it is dropped only if these
        bring it to ``choice_items`` and none of them changed."""
        if not choice:
            return self.samples
        return self.choice_sampled if sampling else self.choice_items

    def choice_like(self, values: int, carriers: int) -> bool:
        """Whether a parameter with ``values`` distinct values over ``carriers`` URLs looks
        like a choice among a few options."""
        return values <= self.choice_values and carriers >= self.choice_repeats * values

    def items_at_least(self, choice: bool) -> int:
        """Distinct unchanged items that drop a parameter whose path shape has no more."""
        return self.samples if choice else self.min_conclusive

    def verdict(
        self,
        changed: int,
        items: int,
        conclusive: int = 0,
        *,
        choice: bool = False,
        available: int | None = None,
        sampling: bool = False,
    ) -> tuple[str, Layer]:
        """Keep on ``changed`` confirmed changes, if any. Drop once the parameter left
        ``items`` distinct items unchanged, enough for its kind; or, when the path shape
        has no untried item left (``available`` items in all), ``min_conclusive``
        outcomes on at least ``items_at_least`` items, or on every item there is (a home
        page is one item). Else keep for insufficient evidence."""
        if changed:
            return "keep", Layer.LEARNED
        if items >= self.items_needed(choice, sampling=sampling):
            return "drop", Layer.LEARNED
        if (
            available is not None
            and max(conclusive, items) >= self.min_conclusive
            and items >= min(self.items_at_least(choice), available)
        ):
            return "drop", Layer.LEARNED
        return "keep", Layer.INSUFFICIENT

    def settled(self, evidence: ParamEvidence, *, choice: bool = False) -> bool:
        """True when sampling more cannot change the decision, or is not worth it: a
        confirmed change, enough unchanged items, or a budget spent mostly on inconclusive
        outcomes."""
        needed = self.items_needed(choice, sampling=True)
        if evidence.changed or evidence.items >= needed:
            return True
        if evidence.samples >= 2 * needed + self.min_conclusive:
            return True
        lost = evidence.inconclusive
        return lost >= self.min_conclusive and lost > 2 * evidence.conclusive


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
    choice: set[str] = field(default_factory=set)
    # Names whose evidence so far is all "unchanged": not part of what identifies an item,
    # unless they are aliases of each other (see _aliases).
    leaning_neutral: set[str] = field(default_factory=set)
    tested: dict[str, set[_ItemKey]] = field(default_factory=dict)
    tested_values: dict[str, set[tuple[_ItemKey, str]]] = field(default_factory=dict)
    isolated: set[str] = field(default_factory=set)
    # Names whose removal along with a group once kept the group from showing the same page
    # (an alias removed with its twin): they ride along no more.
    unfit_riders: set[str] = field(default_factory=set)
    alone_inconclusive: Counter[str] = field(default_factory=Counter)
    # (URL, name) -> the second look at a change: both pages fetched again.
    rechecks: dict[tuple[str, str], Comparison] = field(default_factory=dict)
    unconfirmed: list[_Sample] = field(default_factory=list)
    floor: int = 3
    """The learner's ``min_conclusive``."""
    # Choice-like names dropped on ``choice_sampled`` items, waiting for verification to
    # bring them to ``choice_items``: the unchanged items so far.
    provisional: dict[str, set[_ItemKey]] = field(default_factory=dict)
    changed_in_verification: set[str] = field(default_factory=set)
    # Provisional names short of ``choice_items`` on a shape that has no more items.
    exhausted: set[str] = field(default_factory=set)
    # Names that would have been dropped but left too few distinct values unchanged: kept,
    # with those values as defaults.
    few_values: set[str] = field(default_factory=set)
    # How many of the shape's URLs have each final form (the shape's decisions applied): a
    # verification that fetches a common one spares its fetch to the patterns that follow.
    final_forms: Counter[str] = field(default_factory=Counter)

    def verified(self, url: NormalizedURL, removed: Iterable[str]) -> None:
        for name in removed:
            if name in self.provisional:
                self.provisional[name].add(self.item_key(url, name))

    def item_key(self, url: NormalizedURL, name: str) -> _ItemKey:
        """Which item ``url`` shows, as far as testing ``name`` on it goes (:func:`item_key`),
        but for the names that have only ever left pages unchanged."""
        return item_key(url, name, self.leaning_neutral)

    def mark_tested(self, url: NormalizedURL, name: str) -> _ItemKey:
        key = self.item_key(url, name)
        self.tested[name].add(key)
        self.tested_values[name].add((key, url.value_of(name)))
        return key

    def novel(self, url: NormalizedURL, name: str) -> bool:
        """Whether testing ``name`` on ``url`` brings evidence: a new item, or, while the
        parameter has too few conclusive outcomes, a new value on an item tried already
        (a shape of one item, such as the home page)."""
        key = self.item_key(url, name)
        if key not in self.tested[name]:
            return True
        evidence = self.evidence[name]
        return (
            evidence.conclusive < self.floor
            and (key, url.value_of(name)) not in self.tested_values[name]
        )

    def items_of(self, name: str) -> set[_ItemKey]:
        """The distinct items of the shape that carry ``name``."""
        return {self.item_key(url, name) for url in self.urls if name in url.names}


_ItemKey = tuple[str, tuple[str, ...]]


def _aliases(urls: Sequence[NormalizedURL], names: Collection[str], few: int) -> set[str]:
    """The names among ``names`` that are two names for one identifier, such as a product
    number given as ``id`` and ``pid``: over the URLs carrying both, their values go one to
    one, and either they are the same value (two values at least: what a sample pool's few
    URLs show), or they make more than ``few`` pairs (a choice's few values, or tracking's,
    are not an identifier's) of which some comes back (a token new on every URL, such as a
    click id, names no item). Each alias alone leaves a page unchanged, as its twin still
    names the item; an item key without both would take many items for one, count the
    evidence of a parameter tried on them as one item, and find the shape tried out after
    a few."""
    found: set[str] = set()
    ordered = sorted(names)
    for index, first in enumerate(ordered):
        for second in ordered[index + 1 :]:
            carried = [
                (url.value_of(first), url.value_of(second))
                for url in urls
                if first in url.names and second in url.names
            ]
            pairs = set(carried)
            one_to_one = len({a for a, _ in pairs}) == len(pairs) == len({b for _, b in pairs})
            same_values = len(pairs) >= 2 and all(
                a.partition("=")[2] == b.partition("=")[2] for a, b in pairs
            )
            if one_to_one and (few < len(pairs) < len(carried) or same_values):
                found.update((first, second))
    return found


def item_key(url: NormalizedURL, name: str, neutral: Collection[str] = ()) -> _ItemKey:
    """Which item ``url`` shows, as far as testing ``name`` on it goes: its path and the
    values of its other parameters, but those in ``neutral``."""
    return url.path, tuple(
        url.value_of(other) for other in sorted(url.names) if other != name and other not in neutral
    )


@dataclass(frozen=True, slots=True)
class _Sample:
    """One parameter's outcome on one sampled URL."""

    name: str
    value: str
    pattern: str
    comparison: Comparison
    url: NormalizedURL


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
            _ShapePool(shape, f"{domain}{shape}", shape_urls, floor=self.config.min_conclusive)
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
            pool.tested[name] = set()
            pool.tested_values[name] = set()
        pool.choice = _choice_like(pool.urls, pool.carriers, config)
        learnable = [name for name in names if name not in self.layers.allowlist]
        open_names = set(learnable)
        candidates = list(pool.urls)
        random.Random(f"{config.seed}:{pool.template}").shuffle(candidates)
        if self.prober.takes_pages_at_hand:  # observed or recalled pages first: no fetch
            candidates.sort(key=lambda u: not self.prober.at_hand(u.url))
        while open_names:
            batch: list[tuple[NormalizedURL, list[str]]] = []
            riders: dict[str, list[str]] = {}
            for _ in range(config.parallel_samples):
                pick = self._pick_sample(pool, candidates, open_names, {u.url for u, _ in batch})
                if pick is None:
                    break
                url, group = pick
                riders[url.url] = self._riders(pool, url, group)
                group += riders[url.url]
                for name in group:
                    pool.mark_tested(url, name)
                    pool.evidence[name].samples += 1
                pool.covered_patterns.add(url.pattern)
                batch.append(pick)
            if not batch:
                break
            results = await asyncio.gather(
                *(self._group_test(pool, url, group) for url, group in batch)
            )
            for (url, group), comparisons in zip(batch, results, strict=True):
                if frozenset(group) not in pool.unchanged_removals.get(url.url, ()):
                    pool.unfit_riders.update(riders[url.url])
                pool.samples.extend(
                    _Sample(name, url.value_of(name), url.pattern, comparison, url)
                    for name, comparison in comparisons.items()
                )
            self._tally(pool)
            if await self._recheck_changes(pool):
                self._tally(pool)
            # every learnable name, not just the open ones: a change that turned out to be
            # noise can reopen a name that looked settled
            open_names = {
                name
                for name in learnable
                if name not in pool.isolated
                and not config.settled(pool.evidence[name], choice=name in pool.choice)
                and self._untested(pool, candidates, name) is not None
            }
        for name, evidence in pool.evidence.items():
            if name in self.layers.allowlist:
                evidence.decision, evidence.layer = "keep", Layer.ALLOWLIST
            else:
                exhausted = self._untested(pool, candidates, name) is None
                evidence.decision, evidence.layer = config.verdict(
                    evidence.changed,
                    evidence.items,
                    evidence.conclusive,
                    choice=name in pool.choice,
                    available=len(pool.items_of(name)) if exhausted else None,
                    sampling=True,
                )
                if evidence.decision == "drop" and self._too_few_values(pool, name):
                    continue
                if (
                    evidence.decision == "drop"
                    and name in pool.choice
                    and evidence.items < config.choice_items
                    and not exhausted
                ):
                    pool.provisional[name] = {
                        pool.item_key(s.url, name)
                        for s in pool.samples
                        if s.name == name and s.comparison.outcome is Outcome.UNCHANGED
                    }
        await self._confirm_defaults(pool)

    def _too_few_values(self, pool: _ShapePool, name: str) -> bool:
        """Keep ``name``, about to be dropped, if fewer than ``generalize_values`` of its
        values left pages unchanged; those values become its defaults."""
        harmless = sorted(
            value
            for value, outcome in pool.value_outcomes[name].items()
            if outcome is Outcome.UNCHANGED
        )
        if len(harmless) >= self.config.generalize_values or self.layers.prior_drops(name):
            return False
        pool.evidence[name].decision, pool.evidence[name].layer = "keep", Layer.INSUFFICIENT
        pool.defaults[name] = harmless
        pool.few_values.add(name)
        return True

    def _riders(self, pool: _ShapePool, url: NormalizedURL, group: list[str]) -> list[str]:
        """The parameters of ``url`` that would be dropped on the evidence so far, removed
        along with ``group`` at no extra fetch: the reduced URL is then often the pattern's
        final form, and its verification is already done."""
        config = self.config
        return [
            name
            for name in sorted(url.names - set(group) - pool.isolated - pool.unfit_riders)
            if name not in self.layers.allowlist
            and config.verdict(pool.evidence[name].changed, pool.evidence[name].items)[0] == "drop"
        ]

    @staticmethod
    def _untested(
        pool: _ShapePool, candidates: Sequence[NormalizedURL], name: str
    ) -> NormalizedURL | None:
        """A URL carrying ``name`` on an item it was not tried on yet."""
        for url in candidates:
            if name in url.names and pool.novel(url, name):
                return url
        return None

    def _tally(self, pool: _ShapePool) -> None:
        """Count every parameter's outcomes anew, in the light of the noise known now: a
        change seen before its blocks were found to change by themselves (a rotating ad that
        repeated on the refetches of that time) no longer counts as a change, and nor does
        one that a second look at both pages did not show again. A change not looked at
        twice yet is left out of the counts and listed in ``pool.unconfirmed``, unless the
        parameter changed on at least two items and ``threshold`` of its samples."""
        for name, evidence in pool.evidence.items():
            evidence.changed = evidence.unchanged = evidence.inconclusive = 0
            pool.value_outcomes[name] = {}
        pool.pattern_outcomes.clear()
        outcomes: list[Outcome] = []
        for sample in pool.samples:
            outcome = sample.comparison.outcome
            if outcome is Outcome.CHANGED:
                outcome = self._change_stands(pool, sample)
            outcomes.append(outcome)
        raw_changes: Counter[str] = Counter()
        for sample, outcome in zip(pool.samples, outcomes, strict=True):
            if outcome is Outcome.CHANGED:
                raw_changes[sample.name] += 1
            elif outcome is Outcome.UNCHANGED:
                pool.evidence[sample.name].unchanged += 1
            else:
                pool.evidence[sample.name].inconclusive += 1
        pool.unconfirmed = []
        for sample, outcome in zip(pool.samples, outcomes, strict=True):
            if outcome is not Outcome.CHANGED:
                continue
            name = sample.name
            share = raw_changes[name] / (raw_changes[name] + pool.evidence[name].unchanged)
            if (sample.url.url, name) in pool.rechecks or (
                raw_changes[name] >= 2 and share >= self.config.threshold
            ):
                pool.evidence[name].changed += 1
            else:
                pool.unconfirmed.append(sample)
        leaning = {name for name, e in pool.evidence.items() if not e.changed and e.unchanged}
        pool.leaning_neutral = leaning - _aliases(pool.urls, leaning, self.config.choice_values)
        items: dict[str, set[_ItemKey]] = {name: set() for name in pool.evidence}
        for name in pool.tested:
            pool.tested[name] = set()
            pool.tested_values[name] = set()
        for sample, outcome in zip(pool.samples, outcomes, strict=True):
            key = pool.mark_tested(sample.url, sample.name)
            if outcome is not Outcome.INCONCLUSIVE:
                items[sample.name].add(key)
            values = pool.value_outcomes[sample.name]
            # a change is never undone by a later sample of the same value
            if values.get(sample.value) is not Outcome.CHANGED and (
                outcome is not Outcome.INCONCLUSIVE or sample.value not in values
            ):
                values[sample.value] = outcome
            pool.pattern_outcomes.setdefault((sample.pattern, sample.name), []).append(outcome)
        for name, keys in items.items():
            pool.evidence[name].items = len(keys)

    def _change_stands(self, pool: _ShapePool, sample: _Sample) -> Outcome:
        if not self.prober.still_changed(pool.template, sample.comparison):
            return Outcome.UNCHANGED
        recheck = pool.rechecks.get((sample.url.url, sample.name))
        if recheck is None:
            return Outcome.CHANGED
        if recheck.outcome is Outcome.CHANGED and self.prober.still_changed(pool.template, recheck):
            return Outcome.CHANGED
        return recheck.outcome if recheck.outcome is Outcome.INCONCLUSIVE else Outcome.UNCHANGED

    async def _recheck_changes(self, pool: _ShapePool) -> bool:
        """Look a second time at each unconfirmed change of a parameter with no confirmed
        one: the reduced URL taken as the original, so that it is fetched again too and a
        block rotating on either page shows as noise."""
        wanted: dict[tuple[str, str], _Sample] = {}
        for sample in pool.unconfirmed:
            if pool.evidence[sample.name].changed or any(key[1] == sample.name for key in wanted):
                continue
            wanted[sample.url.url, sample.name] = sample
        if not wanted:
            return False
        checks = await asyncio.gather(
            *(
                self.prober.compare_detail(
                    pool.template, sample.url.without([sample.name]), sample.url.url
                )
                for sample in wanted.values()
            )
        )
        pool.rechecks.update(zip(wanted, checks, strict=True))
        return True

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
                    and name not in pool.few_values
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
        taken: set[str],
    ) -> tuple[NormalizedURL, list[str]] | None:
        """The URL that brings a new item for the open parameter furthest from its goal and
        for as many other open parameters as possible, preferring patterns not sampled yet
        (their fetch then serves verification too)."""
        evidence = pool.evidence
        config = self.config

        def progress(name: str) -> tuple[float, str]:
            needed = config.items_needed(name in pool.choice, sampling=True)
            return len(pool.tested[name]) / needed, name

        for target in sorted(open_names, key=progress):
            best: tuple[tuple[int, int, bool], NormalizedURL, list[str]] | None = None
            looked = 0
            for url in candidates:
                if target not in url.names or url.url in taken or not pool.novel(url, target):
                    continue
                group = [name for name in sorted(url.names & open_names) if pool.novel(url, name)]
                score = (
                    self._free_takes(url, group),
                    len(group) + 2 * (url.pattern not in pool.covered_patterns),
                    url.pattern not in pool.covered_patterns,
                )
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

    def _free_takes(self, url: NormalizedURL, group: Sequence[str]) -> int:
        """With observed or recalled pages, how many of the two takes a group test of
        ``url`` needs cost no fetch; 0 without any, so that sampling is as it is without
        them."""
        prober = self.prober
        if not prober.takes_pages_at_hand:
            return 0
        return prober.at_hand(url.url) + prober.at_hand(url.without(group))

    async def _group_test(
        self, pool: _ShapePool, url: NormalizedURL, group: list[str]
    ) -> dict[str, Comparison]:
        """Remove ``group`` from ``url`` at once. A group that changed the page, or whose
        reduced page could not be judged while the original could, is split in halves: one
        parameter whose removal shows a terse error page must not cost the others their
        evidence. A parameter that alone made the page unjudgeable twice, and never showed
        anything else, is isolated: left out of later groups, and kept."""
        comparison = await self.prober.compare_detail(pool.template, url.url, url.without(group))
        outcome = comparison.outcome
        if outcome is Outcome.UNCHANGED:
            pool.unchanged_removals.setdefault(url.url, set()).add(frozenset(group))
        original_judged = self.prober.fetched(url.url) is not None
        if outcome is Outcome.INCONCLUSIVE and original_judged and len(group) == 1:
            name = group[0]
            pool.alone_inconclusive[name] += 1
            if pool.alone_inconclusive[name] >= 2 and not pool.evidence[name].conclusive:
                pool.isolated.add(name)
        split = outcome is Outcome.CHANGED or (outcome is Outcome.INCONCLUSIVE and original_judged)
        if not split or len(group) == 1:
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
            harmless = [v for v, o in outcomes.items() if o is Outcome.UNCHANGED]
            if changed and len(harmless) > 2:
                # a value that changes some items and not others (a size that matters for
                # apparel only) leaves several values looking harmless: none is a default
                continue
            candidates = harmless[:2]
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
            if await self._default_where_it_matters(pool, name, value):
                pool.defaults.setdefault(name, []).append(value)
            else:
                pool.refuted.setdefault(name, set()).add(value)

    async def _items_it_changes(
        self, pool: _ShapePool, name: str, pair: str
    ) -> dict[_ItemKey, NormalizedURL]:
        """For a parameter kept without sampling (allowlisted): up to ``samples`` distinct
        items carrying another value of it, removed; those whose page changed."""
        carriers = sorted(
            (u for u in pool.urls if name in u.names and u.value_of(name) != pair),
            key=lambda u: u.url,
        )
        random.Random(f"{self.config.seed}:{pool.template}:{name}:matters").shuffle(carriers)
        found: dict[_ItemKey, NormalizedURL] = {}
        tried: set[_ItemKey] = set()
        for url in carriers:
            key = pool.item_key(url, name)
            if key in tried:
                continue
            tried.add(key)
            comparison = await self.prober.compare_detail(
                pool.template, url.url, url.without([name])
            )
            if comparison.outcome is Outcome.CHANGED and self.prober.still_changed(
                pool.template, comparison
            ):
                found[key] = url
                break
            if len(tried) >= self.config.samples:
                break
        return found

    async def _default_where_it_matters(self, pool: _ShapePool, name: str, pair: str) -> bool:
        """A default must also be harmless on the items the parameter was seen to change:
        ``lang=en`` shows an article as it is without ``lang``, but ``size=xl`` does not show
        a shirt as it is without a size, however many mugs it leaves unchanged. The value
        is tried on (up to two of) those items, with the URL the change was seen on."""
        if name.startswith(";"):
            return True
        changed_on: dict[_ItemKey, NormalizedURL] = {}
        for sample in pool.samples:
            if (
                sample.name == name
                and sample.value != pair
                and sample.comparison.outcome is Outcome.CHANGED
                and self.prober.still_changed(pool.template, sample.comparison)
            ):
                changed_on.setdefault(pool.item_key(sample.url, name), sample.url)
        if not changed_on:
            changed_on = await self._items_it_changes(pool, name, pair)
            if not changed_on:
                return False  # nowhere shown to matter: nowhere shown harmless where it does
        for url in list(changed_on.values())[:2]:
            without = url.without([name])
            try:
                with_value = parse(without + ("&" if "?" in without else "?") + pair)
            except InvalidURL:
                return False
            outcome = await self.prober.compare(pool.template, with_value.url, without)
            if outcome is not Outcome.UNCHANGED:
                return False
        return True

    async def _decide_patterns(self, pool: _ShapePool) -> dict[str, PatternDecision]:
        """Verify every pattern of the shape, largest first, a few at a time, so that a
        repair on a sibling pattern first tries what the larger patterns needed."""
        by_pattern: dict[str, list[NormalizedURL]] = defaultdict(list)
        for url in pool.urls:
            by_pattern[url.pattern].append(url)
        order = sorted(by_pattern, key=lambda key: (-len(by_pattern[key]), key))
        kept = {name for name, evidence in pool.evidence.items() if evidence.decision == "keep"}
        defaults = {name: pool.defaults[name] for name in kept if name in pool.defaults}
        pool.final_forms = Counter(url.without(_removed(url, kept, defaults)) for url in pool.urls)
        decisions: dict[str, PatternDecision] = {}
        step = max(1, self.config.parallel_samples)
        for start in range(0, len(order), step):
            keys = order[start : start + step]
            wave = await asyncio.gather(
                *(self._decide_pattern(pool, key, by_pattern[key]) for key in keys)
            )
            decisions.update(zip(keys, wave, strict=True))
        await self._top_up(pool)
        return self._settle_provisional(pool, decisions)

    async def _top_up(self, pool: _ShapePool) -> None:
        """Try the provisionally dropped choice-like parameters that verification left
        short of ``choice_items`` on more items, in groups, until they have enough, one
        changes, or the shape has no item left."""
        config = self.config
        candidates = sorted(pool.urls, key=lambda u: u.url)
        random.Random(f"{config.seed}:{pool.template}:top-up").shuffle(candidates)
        candidates.sort(key=lambda u: not self.prober.at_hand(u.url))  # fetched already

        def short() -> set[str]:
            return {
                name
                for name, items in pool.provisional.items()
                if name not in pool.changed_in_verification and len(items) < config.choice_items
            }

        open_names = short()
        tried = {name: set(items) for name, items in pool.provisional.items()}
        while open_names:
            batch: list[tuple[NormalizedURL, list[str]]] = []
            for url in candidates:
                group = [
                    name
                    for name in sorted(url.names & open_names)
                    if pool.item_key(url, name) not in tried[name]
                ]
                if group:
                    batch.append((url, group))
                    for name in group:
                        tried[name].add(pool.item_key(url, name))
                    if len(batch) >= config.parallel_samples:
                        break
            if not batch:
                break
            results = await asyncio.gather(
                *(self._group_test(pool, url, group) for url, group in batch)
            )
            for (url, _), comparisons in zip(batch, results, strict=True):
                for name, comparison in comparisons.items():
                    if comparison.outcome is Outcome.UNCHANGED:
                        pool.provisional[name].add(pool.item_key(url, name))
                    elif comparison.outcome is Outcome.CHANGED and self.prober.still_changed(
                        pool.template, comparison
                    ):
                        pool.changed_in_verification.add(name)
            open_names = short() & open_names
        for name in short():
            available = len(pool.items_of(name))
            if len(pool.provisional[name]) >= min(config.items_at_least(True), available):
                pool.exhausted.add(name)

    def _settle_provisional(
        self, pool: _ShapePool, decisions: dict[str, PatternDecision]
    ) -> dict[str, PatternDecision]:
        """A choice-like parameter dropped on the sampled items stays dropped only if the
        verifications of the shape's patterns brought its unchanged items to
        ``choice_items`` and none of them changed the page with it. Otherwise it is kept
        in every pattern of the shape, as keeping needs no fetch."""
        settled: dict[str, PatternDecision] = {}
        for key, decision in decisions.items():
            params = dict(decision.params)
            kept = set(decision.kept)
            for name, items in pool.provisional.items():
                evidence = params.get(name)
                if evidence is None or name not in decision.dropped:
                    continue
                evidence = replace(evidence, items=max(evidence.items, len(items)))
                if name in pool.changed_in_verification:
                    evidence.decision, evidence.layer = "keep", Layer.VERIFICATION
                elif len(items) < self.config.choice_items and name not in pool.exhausted:
                    evidence.decision, evidence.layer = "keep", Layer.INSUFFICIENT
                params[name] = evidence
                if evidence.decision == "keep":
                    kept.add(name)
            if params == decision.params:
                settled[key] = decision
                continue
            names = frozenset(params)
            settled[key] = replace(
                decision, kept=frozenset(kept), dropped=names - kept, params=params
            )
        return settled

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
        samples.sort(key=lambda u: self._verify_order(pool, u, kept, defaults))
        unconfirmed = DefaultsToConfirm(defaults)
        attempts = 0
        forms: set[frozenset[str]] = set()
        # Forms that showed the same page outright: a form removing less (a URL without the
        # default value the first one carried) was verified with them, all dropped
        # parameters removed together.
        unchanged_forms: list[frozenset[str]] = []

        async def verify(url: NormalizedURL, removed: frozenset[str]) -> None:
            nonlocal attempts
            attempts += 1
            if removed in pool.unchanged_removals.get(url.url, ()):
                outcome = Outcome.UNCHANGED
            else:
                outcome = await self.prober.compare(pool.template, url.url, url.without(removed))
            restored: list[str] | None = None
            if outcome is Outcome.INCONCLUSIVE:
                # the original was judged, the final form not (an identifier's error page):
                # a form with one parameter back may be judged, and show the same page
                if len(removed) > 1 and self.prober.fetched(url.url) is not None:
                    restored = await self._repair(pool, url, sorted(removed), judged_only=True)
                if not restored:
                    verification.inconclusive += 1
                    return
                pool.verified(url, removed - set(restored))
            forms.add(removed)
            verification.samples += 1
            if outcome is Outcome.UNCHANGED:
                unchanged_forms.append(removed)
                pool.verified(url, removed)
                unconfirmed.confirmed_by(url, removed)
                return
            verification.changed += 1
            if restored is None:
                restored = await self._repair(pool, url, sorted(removed))
                pool.changed_in_verification.update(restored)
            pool.restore_contexts.extend((name, frozenset(kept)) for name in restored)
            verification.restored.extend(restored)
            if restored:
                unchanged_forms.clear()
            for name in restored:
                kept.add(name)
                defaults.pop(name, None)
                evidence[name].decision, evidence[name].layer = "keep", Layer.VERIFICATION

        budget = self.config.verify_samples
        for url in samples:
            removed = _removed(url, kept, defaults)
            if not removed or (
                verification.samples >= budget
                and (removed in forms or any(removed <= form for form in unchanged_forms))
            ):
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

    def _verify_order(
        self,
        pool: _ShapePool,
        url: NormalizedURL,
        kept: set[str],
        defaults: dict[str, list[str]],
    ) -> tuple[int, int, int]:
        """URLs carrying the most default values first: their form removes the most, and
        verifying it verifies the forms that remove less too, all dropped parameters
        removed together. Then the cheapest (:meth:`_fetches_to_verify`); among equals, the
        URL whose final form the most URLs of the shape share, so that fetching it serves
        the patterns verified after this one too."""
        removed = _removed(url, kept, defaults)
        return (
            -len(removed),
            self._fetches_to_verify(pool, url, kept, defaults),
            -pool.final_forms[url.without(removed)],
        )

    def _fetches_to_verify(
        self,
        pool: _ShapePool,
        url: NormalizedURL,
        kept: set[str],
        defaults: dict[str, list[str]],
    ) -> int:
        """How many new fetches verifying ``url``'s final form costs: none when a group
        test already showed it, else one for each of the URL and its form not fetched."""
        removed = _removed(url, kept, defaults)
        if removed in pool.unchanged_removals.get(url.url, ()):
            return 0
        has = self.prober.at_hand
        return (not has(url.url)) + (not has(url.without(removed)))

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
            # an identifier changes most items when alone; a parameter that changed only
            # some items (a size that matters for apparel) stays kept in every pattern
            if (
                pooled.layer is not Layer.LEARNED
                or not pooled.unchanged
                or pooled.changed < pooled.unchanged
            ):
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
        *,
        judged_only: bool = False,
    ) -> list[str]:
        """Add removed parameters back one at a time until the page no longer changes;
        if no single one is enough, keep them all. ``judged_only``: the form without all of
        them could not be judged; look past forms that cannot be judged either, and return
        nothing if none shows the same page."""
        order = _restore_order(pool, removed)
        for name in order:
            restore = frozenset(removed) - {name}
            outcome = await self.prober.compare(pool.template, url.url, url.without(restore))
            if outcome is Outcome.UNCHANGED:
                return [name]
            if outcome is Outcome.INCONCLUSIVE and not judged_only:
                break
        return [] if judged_only else order


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


def _change_ratio(evidence: ParamEvidence) -> float:
    return evidence.changed / evidence.conclusive if evidence.conclusive else 0.0


def _choice_like(
    urls: Iterable[NormalizedURL], carriers: Mapping[str, int], config: LearnConfig
) -> set[str]:
    """Parameters whose values look like a choice among a few options: a small value set,
    each value repeating across many URLs (sizes, colours, formats, ``print=1``)."""
    values: dict[str, set[str]] = defaultdict(set)
    for url in urls:
        for name in url.names:
            if len(values[name]) <= config.choice_values:
                values[name].add(url.value_of(name))
    return {name for name, seen in values.items() if config.choice_like(len(seen), carriers[name])}


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
