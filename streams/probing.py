"""Turning probe requests into map updates, with the core learner and the anomaly gate.

Requests for one path shape of a domain are learned together (the learner pools evidence
over all the sample URLs it gets). Only the requested patterns go into the update; a pattern that is
already decided (for a first request) or already re-verified (for a re-verification) is
skipped without a fetch, so a request delivered twice costs nothing the second time.

The learner decides every pattern among the sample URLs; a pattern that was not requested
(its own statistics were not ready yet) is taken too if every one of its parameters was
decided on evidence, as ``miqps learn`` would; otherwise it waits for its own request.

A new pattern of a path shape whose parameters all have learned evidence in the domain's
map (tracking parameters make new combinations appear all the time) is decided from that
evidence, like the learner pools evidence per shape, and only its final canonical form is
verified. If verification shows a change, or nothing conclusive, the full learner decides.
Re-verifications always go to the full learner: they exist to gather fresh evidence.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from miqps.canonical import StaticLayers
from miqps.fetch import Fetcher
from miqps.learner import LearnConfig, Learner
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
from miqps.prober import Outcome, PageProber
from miqps.urls import InvalidURL, NormalizedURL, parse, path_shape, split_pattern
from streams.livemaps import LiveMaps
from streams.stats import ProbeRequest

log = logging.getLogger(__name__)

NO_SAMPLES = "no sample URL of this pattern could be probed"
UNREACHABLE = "every probe failed; nothing learned"
ONE_PAGE = "every URL fetched showed the same page (a bot wall?); nothing learned"
POOLED = "pooled"
STALE_DEFAULTS = "stale-defaults"


def unreachable(decision: PatternDecision) -> bool:
    """Every probe of the pattern failed: no evidence at all, as when the site is down.
    Such a decision (keep everything) is not published; the pattern is asked for again."""
    probed = [evidence for evidence in decision.params.values()
              if evidence.layer != Layer.ALLOWLIST]
    return (bool(probed) and decision.verification.samples == 0
            and all(e.conclusive == 0 and e.inconclusive > 0 for e in probed))


def fully_evidenced(decision: PatternDecision) -> bool:
    """Every parameter decided on evidence, and the final form verified if anything drops."""
    if any(evidence.layer in (Layer.INSUFFICIENT, Layer.PRIOR, Layer.UNLEARNED)
           for evidence in decision.params.values()):
        return False
    return not decision.dropped or decision.verification.samples > 0


@dataclass(slots=True)
class DomainWork:
    domain: str
    patterns: dict[str, dict[str, Any]] = field(default_factory=dict)
    urls: dict[str, None] = field(default_factory=dict)


@dataclass(slots=True)
class ProbeOutcome:
    domain: str
    published: DomainMap | None
    audits: list[dict[str, Any]]
    fetches: int
    skipped: list[str]


def is_settled(current: DomainMap | None, pattern: str, basis: str) -> bool:
    """True when the request for ``pattern`` has been served already."""
    if current is None:
        return False
    decision = current.patterns.get(pattern)
    if decision is None:
        return False
    return not basis or decision.decided_at != basis


def group_by_domain(requests: Iterable[ProbeRequest]) -> dict[str, list[DomainWork]]:
    """Per domain, one piece of work per path shape, the smallest sample pool first."""
    work: dict[str, dict[str, DomainWork]] = {}
    for request in requests:
        shapes = work.setdefault(request.domain, {})
        item = shapes.setdefault(request.shape, DomainWork(request.domain))
        for pattern, info in request.patterns.items():
            item.patterns.setdefault(pattern, info)
        for url in request.urls:
            item.urls[url] = None
    return {domain: sorted(shapes.values(), key=lambda item: len(item.urls))
            for domain, shapes in work.items()}


class Probing:
    def __init__(
        self,
        live_maps: LiveMaps,
        fetcher: Fetcher,
        config: LearnConfig | None = None,
        max_flip_share: float = 0.5,
        layers: StaticLayers | None = None,
    ) -> None:
        self.live_maps = live_maps
        self.fetcher = fetcher
        self.config = config or LearnConfig()
        self.max_flip_share = max_flip_share
        self.layers = layers or live_maps.layers
        self._published: dict[str, DomainMap] = {}

    def current(self, domain: str) -> DomainMap | None:
        """The newest map of ``domain``: the live one, or the one this worker just published
        and the feed has not delivered yet."""
        compiled = self.live_maps.get(domain)
        mine = self._published.get(domain)
        if mine is not None:
            if compiled is None or compiled.version < mine.version:
                return mine
            del self._published[domain]
        return self.live_maps.map_for(domain)

    async def handle(
        self,
        requests: Iterable[ProbeRequest],
        publish: Callable[[ProbeOutcome], Awaitable[None]] | None = None,
    ) -> list[ProbeOutcome]:
        """Learn the requested patterns: domains concurrently, the shapes of a domain one
        after the other (they share the host's politeness budget anyway), each outcome
        handed to ``publish`` as soon as it is there, so small shapes go live first."""
        outcomes: list[ProbeOutcome] = []

        async def domain_run(shapes: list[DomainWork]) -> None:
            for item in shapes:
                outcome = await self._learn_safely(item)
                if publish is not None:
                    await publish(outcome)
                outcomes.append(outcome)

        await asyncio.gather(*(domain_run(shapes) for shapes in group_by_domain(requests).values()))
        return outcomes

    async def _learn_safely(self, work: DomainWork) -> ProbeOutcome:
        """A learner bug must cost one domain's update, not the worker."""
        try:
            return await self._learn(work)
        except Exception as error:
            log.exception("probe %s failed", work.domain)
            current = self.current(work.domain)
            audits = [failed_record(work.domain, pattern, info, current, f"probe failed: {error!r}")
                      for pattern, info in sorted(work.patterns.items())]
            return ProbeOutcome(work.domain, None, audits, 0, [])

    async def _learn(self, work: DomainWork) -> ProbeOutcome:
        domain = work.domain
        current = self.current(domain)
        wanted = {
            pattern: info
            for pattern, info in work.patterns.items()
            if not is_settled(current, pattern, str(info.get("basis", "")))
        }
        skipped = sorted(set(work.patterns) - set(wanted))
        if not wanted:
            return ProbeOutcome(domain, None, [], 0, skipped)
        urls = _parse_all(work.urls, domain)
        prober = PageProber(self.fetcher)
        fetches_before = self.fetcher.stats.by_host[domain]
        chosen: dict[str, PatternDecision] = {}
        for pattern, info in wanted.items():
            if info.get("basis"):
                continue
            prior = self._prior_evidence(current, pattern)
            if prior is None:
                continue
            own = [url for url in urls if url.pattern == pattern]
            decision = await self._decide_from_prior(prober, domain, pattern, own, prior)
            if decision is not None:
                chosen[pattern] = decision
        rest = {pattern for pattern in wanted if pattern not in chosen}
        walled: list[str] = []
        refuted: dict[str, dict[str, set[str]]] = {}
        if rest:
            learner = Learner(prober, self.config, self.layers)
            learned, report = await learner.learn_domain(domain, urls)
            refuted = report.refuted_defaults
            if report.one_page:
                walled = sorted(rest & learned.patterns.keys())
                learned.patterns.clear()
            for pattern, decision in learned.patterns.items():
                if pattern in rest:
                    chosen[pattern] = decision
                elif (pattern not in wanted and fully_evidenced(decision)
                      and (current is None or pattern not in current.patterns)):
                    chosen[pattern] = decision
                    wanted[pattern] = {"reason": POOLED, "basis": "",
                                       "urls_seen": decision.urls_seen}
        for pattern, decision in chosen.items():
            decision.urls_seen = max(decision.urls_seen, int(wanted[pattern].get("urls_seen", 0)))
        for pattern, decision in _withdraw_stale_defaults(current, refuted).items():
            if pattern in chosen:
                continue
            chosen[pattern] = decision
            wanted[pattern] = {"reason": STALE_DEFAULTS, "basis": "",
                               "urls_seen": decision.urls_seen}
        failed = sorted(pattern for pattern, decision in chosen.items() if unreachable(decision))
        for pattern in failed:
            del chosen[pattern]
        fetches = self.fetcher.stats.by_host[domain] - fetches_before
        audits: list[dict[str, Any]] = []
        published: DomainMap | None = None
        if chosen:
            candidate = merge_update(current, DomainMap(domain, 0, utc_now(), chosen))
            verdict = anomaly_gate(current, candidate, self.max_flip_share)
            if verdict.accepted:
                published = candidate
                self._published[domain] = candidate
            for pattern in sorted(chosen):
                audits.append(audit_record(domain, pattern, wanted[pattern], current,
                                           candidate, verdict, fetches))
        for pattern in failed:
            audits.append(failed_record(domain, pattern, wanted[pattern], current, UNREACHABLE,
                                        fetches))
        for pattern in walled:
            audits.append(failed_record(domain, pattern, wanted[pattern], current, ONE_PAGE,
                                        fetches))
        for pattern in sorted(set(wanted) - set(chosen) - set(failed) - set(walled)):
            audits.append(missing_record(domain, pattern, wanted[pattern], current, fetches))
        log.info("probe %s: %d patterns decided (%d by the full learner), %d without samples, "
                 "%d fetches%s", domain, len(chosen), len(rest & set(chosen)),
                 len(wanted) - len(chosen), fetches,
                 "" if published or not chosen else " (update rejected by the anomaly gate)")
        return ProbeOutcome(domain, published, audits, fetches, skipped)

    def _prior_evidence(self, current: DomainMap | None,
                        pattern: str) -> dict[str, ParamEvidence] | None:
        """The newest learned evidence of each parameter of ``pattern`` within its path
        shape, or None if any parameter has none."""
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
                seen = newest.get(name)
                if seen is None or seen[0] < decision.decided_at:
                    newest[name] = (decision.decided_at, evidence)
        prior: dict[str, ParamEvidence] = {}
        for name in names:
            if name in newest:
                prior[name] = replace(newest[name][1])
            elif name in self.layers.allowlist:
                prior[name] = ParamEvidence("keep", Layer.ALLOWLIST)
            else:
                return None
        return prior

    async def _decide_from_prior(
        self,
        prober: PageProber,
        domain: str,
        pattern: str,
        urls: list[NormalizedURL],
        prior: dict[str, ParamEvidence],
    ) -> PatternDecision | None:
        """Decide from ``prior`` and verify the final form (dropped parameters and default
        values left out), or None to let the learner decide."""
        kept = frozenset(name for name, evidence in prior.items() if evidence.decision == "keep")
        dropped = frozenset(prior) - kept
        defaults = frozenset(value for name in kept for value in prior[name].default_values)
        verification = Verification()
        if dropped or defaults:
            if not urls:
                return None
            template = f"{domain}{path_shape(urls[0].path)}"
            samples = sorted(urls, key=lambda url: url.url)
            random.Random(f"{self.config.seed}:{pattern}").shuffle(samples)
            for url in samples[: self.config.verify_samples]:
                canonical = {name for name in kept if url.value_of(name) not in defaults}
                outcome = await prober.compare(template, url.url, url.with_only(canonical))
                if outcome is Outcome.CHANGED:
                    return None
                if outcome is Outcome.INCONCLUSIVE:
                    verification.inconclusive += 1
                else:
                    verification.samples += 1
            if verification.samples == 0:
                return None
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
                params[name] = replace(evidence, default_values=[
                    value for value in evidence.default_values if value not in gone])
        if params != decision.params:
            withdrawn[pattern] = replace(decision, params=params, decided_at=utc_now())
    return withdrawn


def _parse_all(urls: Iterable[str], domain: str) -> list[NormalizedURL]:
    parsed: list[NormalizedURL] = []
    for text in urls:
        try:
            url = parse(text)
        except InvalidURL:
            continue
        if url.host == domain:
            parsed.append(url)
    return parsed


def audit_record(
    domain: str,
    pattern: str,
    request: dict[str, Any],
    before: DomainMap | None,
    after: DomainMap,
    verdict: GateVerdict,
    fetches: int,
) -> dict[str, Any]:
    old = before.patterns.get(pattern) if before is not None else None
    new = after.patterns[pattern]
    flipped = sorted(name for key, name in verdict.flipped if key == pattern)
    return {
        "domain": domain,
        "pattern": pattern,
        "accepted": verdict.accepted,
        "reason": verdict.reason,
        "request_reason": str(request.get("reason", "")),
        "version_before": before.version if before is not None else 0,
        "version_after": after.version if verdict.accepted else None,
        "kept_before": sorted(old.kept) if old is not None else None,
        "dropped_before": sorted(old.dropped) if old is not None else None,
        "kept_after": sorted(new.kept),
        "dropped_after": sorted(new.dropped),
        "flipped_to_dropped": flipped,
        "evidence": {name: new.params[name].to_json() for name in sorted(new.params)},
        "verification": new.verification.to_json(),
        "urls_seen": new.urls_seen,
        "fetches": fetches,
        "at": utc_now(),
    }


def missing_record(domain: str, pattern: str, request: dict[str, Any],
                   before: DomainMap | None, fetches: int) -> dict[str, Any]:
    return failed_record(domain, pattern, request, before, NO_SAMPLES, fetches)


def failed_record(domain: str, pattern: str, request: dict[str, Any],
                  before: DomainMap | None, reason: str, fetches: int = 0) -> dict[str, Any]:
    old = before.patterns.get(pattern) if before is not None else None
    return {
        "domain": domain,
        "pattern": pattern,
        "accepted": False,
        "reason": reason,
        "request_reason": str(request.get("reason", "")),
        "version_before": before.version if before is not None else 0,
        "version_after": None,
        "kept_before": sorted(old.kept) if old is not None else None,
        "dropped_before": sorted(old.dropped) if old is not None else None,
        "kept_after": None,
        "dropped_after": None,
        "flipped_to_dropped": [],
        "evidence": {},
        "verification": None,
        "urls_seen": int(request.get("urls_seen", 0)),
        "fetches": fetches,
        "at": utc_now(),
    }
