"""Turning probe requests into calls of the core's :func:`miqps.update.update_map`, and its
outcome into audit records for ``miqps.map-updates``.

Requests for one path shape of a domain are decided together (the learner pools evidence
over all the sample URLs it gets); how a pattern is decided, skipped or left undecided is
the core's business (see :mod:`miqps.update`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from miqps.canonical import StaticLayers
from miqps.fetch import Fetcher
from miqps.learner import LearnConfig, Learner
from miqps.maps import DomainMap, GateVerdict, utc_now
from miqps.prober import PageProber
from miqps.update import DEFAULT_MAX_FLIP_SHARE, Decided, MapUpdate, Request, Why, update_map
from miqps.urls import InvalidURL, NormalizedURL, parse
from streams.livemaps import LiveMaps
from streams.stats import ProbeRequest

log = logging.getLogger(__name__)

NO_SAMPLES = "no sample URL of this pattern could be probed"
UNREACHABLE = "every probe failed; nothing learned"
ONE_PAGE = "every URL fetched showed the same page (a bot wall?); nothing learned"
FROZEN = "the map is frozen by an operator; nothing learned until it is unfrozen"
POOLED = str(Why.POOLED)
STALE_DEFAULTS = str(Why.STALE_DEFAULTS)


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
        max_flip_share: float = DEFAULT_MAX_FLIP_SHARE,
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
        requested = {pattern: Request(str(info.get("basis", "")), int(info.get("urls_seen", 0)))
                     for pattern, info in work.patterns.items()}
        update = await update_map(
            Learner(PageProber(self.fetcher), self.config, self.layers), work.domain,
            self.current(work.domain), _parse_all(work.urls, work.domain), requested,
            max_flip_share=self.max_flip_share)
        if update.published is not None:
            self._published[work.domain] = update.published
        if len(update.skipped) < len(requested):
            log.info("probe %s: %d patterns decided (%d from the map's evidence), %d walled, "
                     "%d unreachable, %d without samples, %d fetches%s", work.domain,
                     len(update.decided),
                     sum(entry.from_map_evidence for entry in update.decided.values()),
                     len(update.walled), len(update.unreachable), len(update.without_samples),
                     update.fetches,
                     " (update rejected by the anomaly gate)" if update.rejected else "")
        return ProbeOutcome(work.domain, update.published, audit_records(update, work.patterns),
                            update.fetches, update.skipped)


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


def audit_records(update: MapUpdate,
                  requests: Mapping[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per pattern of the update: decided (accepted or rejected by the gate),
    unreachable, walled, or without samples."""
    domain, before, fetches = update.domain, update.before, update.fetches
    records: list[dict[str, Any]] = []
    if update.candidate is not None and update.verdict is not None:
        records.extend(
            audit_record(domain, pattern, _request_of(entry, requests.get(pattern)), before,
                         update.candidate, update.verdict, fetches)
            for pattern, entry in update.decided.items())
    for reason, patterns in ((UNREACHABLE, update.unreachable), (ONE_PAGE, update.walled),
                             (NO_SAMPLES, update.without_samples), (FROZEN, update.frozen)):
        records.extend(failed_record(domain, pattern, requests[pattern], before, reason, fetches)
                       for pattern in patterns)
    return records


def _request_of(entry: Decided, request: dict[str, Any] | None) -> dict[str, Any]:
    """The request a decision answers; pooled and stale-default decisions answer none."""
    if entry.why is Why.REQUESTED and request is not None:
        return request
    return {"reason": str(entry.why), "basis": "", "urls_seen": entry.decision.urls_seen}


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
