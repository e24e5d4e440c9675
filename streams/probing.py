"""Turning probe requests into calls of the core's :func:`miqps.update.update_map`, and its
outcome into audit records for ``miqps.map-updates``.

Requests for one path shape of a domain are decided together (the learner pools evidence
over all the sample URLs it gets); how a pattern is decided, skipped or left undecided is
the core's business (see :mod:`miqps.update`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from miqps.fetch import Fetcher
from miqps.learner import LearnConfig, Learner
from miqps.maps import DomainMap
from miqps.prober import PageProber
from miqps.update import DEFAULT_MAX_FLIP_SHARE, Request, update_map
from miqps.urls import InvalidURL, NormalizedURL, parse
from streams.livemaps import LiveMaps
from streams.messages import MapUpdateRecord, ProbeRequest, RequestedPattern, audit_records

log = logging.getLogger(__name__)


@dataclass(slots=True)
class DomainWork:
    domain: str
    patterns: dict[str, RequestedPattern] = field(default_factory=dict)
    urls: dict[str, None] = field(default_factory=dict)


@dataclass(slots=True)
class ProbeOutcome:
    domain: str
    published: DomainMap | None
    audits: list[MapUpdateRecord]
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
    return {
        domain: sorted(shapes.values(), key=lambda item: len(item.urls))
        for domain, shapes in work.items()
    }


class Probing:
    def __init__(
        self,
        live_maps: LiveMaps,
        fetcher: Fetcher,
        config: LearnConfig | None = None,
        max_flip_share: float = DEFAULT_MAX_FLIP_SHARE,
    ) -> None:
        self.live_maps = live_maps
        self.fetcher = fetcher
        self.config = config or LearnConfig()
        self.max_flip_share = max_flip_share
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
        handed to ``publish`` as soon as it is there, so small shapes go live first.

        A fetch that fails or a page that cannot be read is missing evidence, which the
        core handles; any exception that comes out of learning is a bug of ours and is
        raised, for the caller's error policy, before anything more is published."""
        outcomes: list[ProbeOutcome] = []

        async def domain_run(shapes: list[DomainWork]) -> None:
            for item in shapes:
                outcome = await self._learn(item)
                if publish is not None:
                    await publish(outcome)
                outcomes.append(outcome)

        await asyncio.gather(*(domain_run(shapes) for shapes in group_by_domain(requests).values()))
        return outcomes

    async def _learn(self, work: DomainWork) -> ProbeOutcome:
        requested = {
            pattern: Request(info.basis, info.urls_seen) for pattern, info in work.patterns.items()
        }
        update = await update_map(
            Learner(PageProber(self.fetcher), self.config, self.live_maps.layers),
            work.domain,
            self.current(work.domain),
            _parse_all(work.urls, work.domain),
            requested,
            max_flip_share=self.max_flip_share,
        )
        if update.published is not None:
            self._published[work.domain] = update.published
        if len(update.skipped) < len(requested):
            log.info(
                "probe %s: %d patterns decided (%d from the map's evidence), %d walled, "
                "%d unreachable, %d without samples, %d fetches%s",
                work.domain,
                len(update.decided),
                sum(entry.from_map_evidence for entry in update.decided.values()),
                len(update.walled),
                len(update.unreachable),
                len(update.without_samples),
                update.fetches,
                " (update rejected by the anomaly gate)" if update.rejected else "",
            )
        return ProbeOutcome(
            work.domain,
            update.published,
            audit_records(update, work.patterns),
            update.fetches,
            update.skipped,
        )


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
