"""The one path from evidence to a domain's next map: :func:`update_map`.

``miqps learn`` and the stream's probing worker both call it. Given the domain's current
map, sample URLs and the patterns asked for, it decides what it can and says why:

- A pattern the map has already served is *skipped* without a fetch: for a first request,
  any decision of it; for a re-verification, a decision newer than the one it re-verifies.
  So a request delivered twice costs nothing the second time, and ``miqps learn`` on an
  existing file only decides the patterns the file lacks.
- A new pattern of a path shape whose parameters all have learned evidence in the map
  (tracking parameters make new combinations appear all the time) is decided from that
  evidence, and only its final canonical form is verified. If verification shows a change,
  or nothing conclusive, the full learner decides. Re-verifications always go to the full
  learner: they exist to gather fresh evidence.
- The learner pools evidence over the path shapes of the patterns still open. A pattern
  among the samples that was not asked for is taken too (*pooled*) if every one of its
  parameters was decided on evidence and the map lacks it.
- Default values a page of the same shape has just shown to matter are withdrawn from the
  map's other patterns (*stale defaults*).
- Nothing is decided for a pattern none of whose pages could be fetched and judged
  (*unreachable*), nor for the patterns of a domain whose every URL showed one and the
  same page (*walled*: a bot wall, a login page). The map keeps what it had and the
  pattern is asked for again later. Each such pattern is named for what happened
  (:class:`Undecided`): its pages were shells or interstitials, robots.txt disallowed them
  (or those of its path shape, whose evidence it shares), or every fetch failed. A pattern
  the map does not decide is recorded in its ``undecided`` with that cause (a new version,
  when the cause is new), keeping every parameter; a later decision replaces the record.
  A pattern whose pages were judged is decided, if only to keep every parameter (the
  removals showed a terse error page, evidence of nothing): it is not asked again.
- The decisions are merged into the current map and passed through the anomaly gate.
- A *frozen* map (an operator's ``miqps maps freeze``) is not changed at all: the patterns
  asked for are reported as ``frozen``, without a fetch, until the map is unfrozen.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from miqps.learner import DefaultsToConfirm, DomainReport, Learner, group_by_domain
from miqps.maps import (
    DomainMap,
    GateVerdict,
    Layer,
    ParamEvidence,
    PatternDecision,
    Verification,
    anomaly_gate,
    merge_update,
    utc_now,
)
from miqps.politeness import NotProbedKind
from miqps.prober import Outcome
from miqps.urls import NormalizedURL, path_shape, split_pattern

DEFAULT_MAX_FLIP_SHARE = 0.5


class Why(StrEnum):
    """Why a pattern's decision is in the update."""

    REQUESTED = "requested"
    POOLED = "pooled"
    STALE_DEFAULTS = "stale-defaults"
    AUDIT = "audit"


class Undecided(StrEnum):
    """Why a pattern asked for got no decision: the one name the summary, the audit
    records, the metrics and the dashboard give it."""

    ONE_PAGE = "one-page"
    SHELLS = "shells"
    INTERSTITIALS = "interstitials"
    DISALLOWED = "disallowed"
    ROBOTS_UNREACHABLE = "robots-unreachable"
    OPTED_OUT = "opted-out"
    DEFERRED = "deferred"
    FAILED = "failed"

    @property
    def message(self) -> str:
        return _UNDECIDED_MESSAGES[self]


_UNDECIDED_MESSAGES = {
    Undecided.ONE_PAGE: "every URL fetched showed the same page (a bot wall?)",
    Undecided.SHELLS: "the pages are client-side shells, with nothing to compare",
    Undecided.INTERSTITIALS: "the pages are bot, consent or challenge interstitials",
    Undecided.DISALLOWED: "robots.txt disallows every sample",
    Undecided.ROBOTS_UNREACHABLE: "robots.txt does not answer: nothing is fetched until it does",
    Undecided.OPTED_OUT: "the domain is on the never-probe list",
    Undecided.DEFERRED: "the site asks for a longer pause than allowed (Crawl-delay, Retry-After)",
    Undecided.FAILED: "every fetch failed",
}
_UNDECIDED_BY_KIND = {
    NotProbedKind.DISALLOWED: Undecided.DISALLOWED,
    NotProbedKind.ROBOTS_UNREACHABLE: Undecided.ROBOTS_UNREACHABLE,
    NotProbedKind.OPTED_OUT: Undecided.OPTED_OUT,
    NotProbedKind.CRAWL_DELAY_OVER_CAP: Undecided.DEFERRED,
    NotProbedKind.HOST_DEFERRED: Undecided.DEFERRED,
    "Retry-After too long": Undecided.DEFERRED,
}


def undecided_cause(kinds: Iterable[str]) -> Undecided:
    """What the failures of a pattern's samples (their :attr:`FetchFailed.kind` or why the
    page is unjudgeable) have most in common; every fetch failed when nothing else fits."""
    causes: Counter[Undecided] = Counter()
    for kind in kinds:
        if kind in _UNDECIDED_BY_KIND:
            causes[_UNDECIDED_BY_KIND[kind]] += 1
        elif kind.startswith("interstitial"):
            causes[Undecided.INTERSTITIALS] += 1
        elif kind.startswith("client-side shell"):
            causes[Undecided.SHELLS] += 1
        else:
            causes[Undecided.FAILED] += 1
    return causes.most_common(1)[0][0] if causes else Undecided.FAILED


@dataclass(frozen=True, slots=True)
class Request:
    """A pattern asked for. ``basis`` is the ``decided_at`` of the decision to re-verify,
    empty for a first decision; ``urls_seen`` is how many URLs of it the asker saw."""

    basis: str = ""
    urls_seen: int = 0


@dataclass(frozen=True, slots=True)
class Decided:
    decision: PatternDecision
    why: Why
    from_map_evidence: bool = False


@dataclass(slots=True)
class MapUpdate:
    """What :func:`update_map` did for one domain. ``candidate`` is the merged next version
    (None when nothing was decided); it is to be published only if ``verdict`` accepts it."""

    domain: str
    before: DomainMap | None
    decided: dict[str, Decided] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    walled: list[str] = field(default_factory=list)
    unreachable: list[str] = field(default_factory=list)
    undecided: dict[str, Undecided] = field(default_factory=dict)
    """Each walled or unreachable pattern, named for what happened to it."""
    without_samples: list[str] = field(default_factory=list)
    frozen: list[str] = field(default_factory=list)
    candidate: DomainMap | None = None
    verdict: GateVerdict | None = None
    fetches: int = 0
    observed: int = 0
    """Pages taken from observations (:mod:`miqps.observations`, a crawl archive) instead
    of fetched."""
    report: DomainReport | None = None

    @property
    def published(self) -> DomainMap | None:
        """The next version of the map, if the gate accepted one."""
        if self.verdict is not None and self.verdict.accepted:
            return self.candidate
        return None

    @property
    def rejected(self) -> bool:
        return self.verdict is not None and not self.verdict.accepted


async def update_map(
    learner: Learner,
    domain: str,
    current: DomainMap | None,
    urls: Sequence[NormalizedURL],
    requested: Mapping[str, Request] | None = None,
    *,
    max_flip_share: float = DEFAULT_MAX_FLIP_SHARE,
) -> MapUpdate:
    """Decide the ``requested`` patterns of ``domain`` (every pattern of ``urls`` when
    None) from the sample ``urls``, and merge them into ``current`` through the gate."""
    samples = [url for url in urls if url.host == domain and url.has_params]
    if requested is None:
        requested = dict.fromkeys(sorted({url.pattern for url in samples}), Request())
    update = MapUpdate(domain, current)
    wanted = {
        pattern: request
        for pattern, request in requested.items()
        if not is_settled(current, pattern, request.basis)
    }
    update.skipped = sorted(set(requested) - set(wanted))
    if current is not None and current.frozen:
        update.frozen = sorted(wanted)
        return update
    if not wanted:
        return update
    stats = learner.prober.fetcher.stats
    learner.prober.fetcher.ask_robots_again(domain)
    fetches_before = stats.by_host[domain]
    observed_before = learner.prober.observed_takes
    decided: dict[str, Decided] = {}
    for pattern, request in wanted.items():
        prior = None if request.basis else prior_evidence(current, pattern, learner)
        if prior is None:
            continue
        own = [url for url in samples if url.pattern == pattern]
        decision = await _decide_from_prior(learner, domain, pattern, own, prior)
        if decision is not None:
            decided[pattern] = Decided(decision, Why.REQUESTED, from_map_evidence=True)
    rest = set(wanted) - set(decided)
    if rest:
        shapes = {split_pattern(pattern)[0] for pattern in rest}
        learned, update.report = await learner.learn_domain(
            domain, [url for url in samples if path_shape(url.path) in shapes]
        )
        if update.report.one_page:
            update.walled = sorted(rest & learned.patterns.keys())
        else:
            decided.update(_learned(learned, rest, wanted, current))
        for pattern, decision in _withdraw_stale_defaults(
            current, update.report.refuted_defaults
        ).items():
            decided.setdefault(pattern, Decided(decision, Why.STALE_DEFAULTS))
    for pattern, entry in decided.items():
        if entry.why is Why.REQUESTED:
            entry.decision.urls_seen = max(entry.decision.urls_seen, wanted[pattern].urls_seen)
    update.unreachable = sorted(
        pattern
        for pattern, entry in decided.items()
        if entry.why is Why.REQUESTED
        and unreachable(entry.decision)
        and not _page_judged(learner, pattern, samples)
    )
    update.decided = {
        pattern: decided[pattern]
        for pattern in sorted(decided)
        if pattern not in update.unreachable
    }
    update.without_samples = sorted(set(wanted) - set(decided) - set(update.walled))
    update.undecided = dict.fromkeys(update.walled, Undecided.ONE_PAGE)
    for pattern in update.unreachable:
        update.undecided[pattern] = undecided_cause(
            _failure_kinds(learner.prober.failure_kinds, pattern, samples)
        )
    update.fetches = stats.by_host[domain] - fetches_before
    update.observed = learner.prober.observed_takes - observed_before
    newly_undecided = _newly_undecided(current, update.undecided)
    if update.decided or newly_undecided:
        patterns = {pattern: entry.decision for pattern, entry in update.decided.items()}
        learned = DomainMap(domain, 0, utc_now(), patterns, undecided=newly_undecided)
        update.candidate = merge_update(current, learned)
        update.verdict = anomaly_gate(current, update.candidate, max_flip_share)
    return update


def _page_judged(learner: Learner, pattern: str, samples: Sequence[NormalizedURL]) -> bool:
    """Whether a page of ``pattern`` was fetched and judged: then the pattern was reached,
    and what the learner made of it (every parameter kept, when no removal of one could be
    judged, as when it shows a terse error page) is its decision. A pattern none of whose
    own samples was tried takes the word of its path shape, whose evidence it shares."""
    for related in (_own(pattern, samples), _same_shape(pattern, samples)):
        tried = [url for url in related if learner.prober.has_snapshot(url.url)]
        if tried:
            return any(learner.prober.fetched(url.url) is not None for url in tried)
    return False


def _failure_kinds(
    failure_kinds: Mapping[str, str], pattern: str, samples: Sequence[NormalizedURL]
) -> list[str]:
    """What went wrong with the samples of ``pattern``; for a pattern none of whose samples
    was tried (its parameters were sampled on its path shape's other patterns, or on the
    domain's), what went wrong there."""
    for related in (_own(pattern, samples), _same_shape(pattern, samples), samples):
        kinds = [kind for url in related if (kind := failure_kinds.get(url.url))]
        if kinds:
            return kinds
    return []


def _own(pattern: str, samples: Sequence[NormalizedURL]) -> list[NormalizedURL]:
    return [url for url in samples if url.pattern == pattern]


def _same_shape(pattern: str, samples: Sequence[NormalizedURL]) -> list[NormalizedURL]:
    shape = split_pattern(pattern)[0]
    return [url for url in samples if path_shape(url.path) == shape]


def _newly_undecided(
    current: DomainMap | None, undecided: Mapping[str, Undecided]
) -> dict[str, str]:
    """The undecided patterns the map is to record: those it neither decides nor already
    records with the same cause (a pattern with a decision keeps it)."""
    patterns = current.patterns if current is not None else {}
    recorded = current.undecided if current is not None else {}
    return {
        pattern: str(cause)
        for pattern, cause in undecided.items()
        if pattern not in patterns and recorded.get(pattern) != cause
    }


async def update_all(
    learner: Learner,
    maps: Mapping[str, DomainMap],
    urls: Iterable[NormalizedURL],
    *,
    max_flip_share: float = DEFAULT_MAX_FLIP_SHARE,
    on_update: Callable[[MapUpdate], None] | None = None,
) -> dict[str, MapUpdate]:
    """:func:`update_map` for every domain of ``urls``, concurrently, every pattern asked
    for; per-host politeness is the fetcher's job."""
    updates: dict[str, MapUpdate] = {}

    async def one(domain: str, domain_urls: list[NormalizedURL]) -> None:
        update = await update_map(
            learner, domain, maps.get(domain), domain_urls, max_flip_share=max_flip_share
        )
        updates[domain] = update
        if on_update is not None:
            on_update(update)

    await asyncio.gather(*(one(d, u) for d, u in sorted(group_by_domain(urls).items())))
    return dict(sorted(updates.items()))


def _learned(
    learned: DomainMap,
    rest: set[str],
    wanted: Mapping[str, Request],
    current: DomainMap | None,
) -> dict[str, Decided]:
    """The learner's decisions to take: those asked for, and those pooled."""
    taken: dict[str, Decided] = {}
    for pattern, decision in learned.patterns.items():
        if pattern in rest:
            taken[pattern] = Decided(decision, Why.REQUESTED)
        elif (
            pattern not in wanted
            and fully_evidenced(decision)
            and (current is None or pattern not in current.patterns)
        ):
            taken[pattern] = Decided(decision, Why.POOLED)
    return taken


def is_settled(current: DomainMap | None, pattern: str, basis: str) -> bool:
    """True when the request for ``pattern`` has been served already."""
    if current is None:
        return False
    decision = current.patterns.get(pattern)
    if decision is None:
        return False
    return not basis or decision.decided_at != basis


def unreachable(decision: PatternDecision) -> bool:
    """Every probe of the pattern failed: no evidence at all, as when the site is down."""
    probed = [
        evidence for evidence in decision.params.values() if evidence.layer != Layer.ALLOWLIST
    ]
    return (
        bool(probed)
        and decision.verification.samples == 0
        and all(e.conclusive == 0 and e.inconclusive > 0 for e in probed)
    )


def fully_evidenced(decision: PatternDecision) -> bool:
    """Every parameter decided on evidence, and the final form verified if anything drops."""
    if any(
        evidence.layer in (Layer.INSUFFICIENT, Layer.PRIOR, Layer.UNLEARNED)
        for evidence in decision.params.values()
    ):
        return False
    return not decision.dropped or decision.verification.samples > 0


def prior_evidence(
    current: DomainMap | None, pattern: str, learner: Learner
) -> dict[str, ParamEvidence] | None:
    """The newest learned evidence of each parameter of ``pattern`` within its path shape
    in ``current``, or None if any parameter has none (an allowlisted one needs none). A
    drop counts only if it records enough distinct items tested (maps of earlier
    releases record none)."""
    if current is None:
        return None
    shape, names = split_pattern(pattern)
    newest: dict[str, tuple[str, ParamEvidence]] = {}
    for key, decision in current.patterns.items():
        if split_pattern(key)[0] != shape:
            continue
        for name, evidence in decision.params.items():
            if evidence.layer not in (Layer.LEARNED, Layer.ALLOWLIST):
                continue
            if evidence.decision == "drop" and evidence.items < learner.config.min_conclusive:
                continue  # dropped on fewer items than any drop takes now (an older map)
            seen = newest.get(name)
            if seen is None or seen[0] < decision.decided_at:
                newest[name] = (decision.decided_at, evidence)
    prior: dict[str, ParamEvidence] = {}
    for name in names:
        if name in newest:
            prior[name] = replace(newest[name][1])
        elif name in learner.layers.allowlist:
            prior[name] = ParamEvidence("keep", Layer.ALLOWLIST)
        else:
            return None
    return prior


async def _decide_from_prior(
    learner: Learner,
    domain: str,
    pattern: str,
    urls: list[NormalizedURL],
    prior: dict[str, ParamEvidence],
) -> PatternDecision | None:
    """Decide from ``prior`` and verify the final form (dropped parameters and default
    values left out), or None to let the learner decide."""
    kept = frozenset(name for name, evidence in prior.items() if evidence.decision == "keep")
    dropped = frozenset(prior) - kept
    defaults = {name: list(prior[name].default_values) for name in kept}
    verification = Verification()
    if dropped or any(defaults.values()):
        if not urls:
            return None
        template = f"{domain}{path_shape(urls[0].path)}"
        samples = sorted(urls, key=lambda url: url.url)
        random.Random(f"{learner.config.seed}:{pattern}").shuffle(samples)
        unconfirmed = DefaultsToConfirm(defaults)
        budget = samples[: learner.config.verify_samples]
        for url in budget + [url for url in unconfirmed.carriers(samples) if url not in budget]:
            if url not in budget and not unconfirmed.wanted(url, defaults):
                continue
            canonical = {name for name in kept if url.value_of(name) not in defaults[name]}
            outcome = await learner.prober.compare(template, url.url, url.with_only(canonical))
            if outcome is Outcome.CHANGED:
                return None
            if outcome is Outcome.INCONCLUSIVE:
                verification.inconclusive += 1
            else:
                verification.samples += 1
                unconfirmed.confirmed_by(url, kept - canonical)
        if verification.samples == 0:
            return None
        unconfirmed.withdraw_from(defaults)
        for name in kept:
            prior[name].default_values = defaults.get(name, [])
    return PatternDecision(kept, dropped, prior, verification, utc_now(), len(urls))


def _withdraw_stale_defaults(
    current: DomainMap | None, refuted: Mapping[str, Mapping[str, set[str]]]
) -> dict[str, PatternDecision]:
    """Patterns of ``current`` listing a default value that a page of the same path shape
    has just shown to matter (``refuted``: shape, then name, then values).

    Canonicalization re-applies the rules until they stop changing a URL, so a URL that
    loses its tracking parameters moves into a sibling pattern and is judged by that
    pattern's defaults too: a default the site has dropped (``lang=en`` after it switched to
    ``de``) must go from every pattern of the shape, or the two pages would merge there."""
    if current is None or not refuted:
        return {}
    withdrawn: dict[str, PatternDecision] = {}
    for pattern, decision in current.patterns.items():
        stale = refuted.get(split_pattern(pattern)[0], {})
        params = dict(decision.params)
        for name, evidence in decision.params.items():
            gone = stale.get(name, set()) & set(evidence.default_values)
            if gone:
                params[name] = replace(
                    evidence,
                    default_values=[
                        value for value in evidence.default_values if value not in gone
                    ],
                )
        if params != decision.params:
            withdrawn[pattern] = replace(decision, params=params, decided_at=utc_now())
    return withdrawn
