"""Turning probe requests into calls of the core's :func:`miqps.update.update_map`, and its
outcome into audit records for ``miqps.map-updates``.

Requests for one path shape of a domain are decided together (the learner pools evidence
over all the sample URLs it gets); how a pattern is decided, skipped or left undecided is
the core's business (see :mod:`miqps.update`). Audit requests (the front's URLs of learned
patterns that drop parameters) go to :func:`miqps.audit.audit_map`, after the domain's
learning, against its newest map.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field

from miqps.audit import DEFAULT_AUDIT_SHARE, Audit, AuditRule, ItemMemory, audit_map
from miqps.content import VolatilityModel
from miqps.fetch import Fetcher
from miqps.learner import LearnConfig, Learner
from miqps.maps import DomainMap
from miqps.observations import ObservedPages, RecalledPages
from miqps.prober import PageProber
from miqps.sampling import SamplingRule
from miqps.update import DEFAULT_MAX_FLIP_SHARE, Request, update_map
from miqps.urls import InvalidURL, NormalizedURL, parse
from streams.agents.shape_stats import REVERIFY
from streams.maps.live import LiveMaps
from streams.messages import (
    AUDIT,
    MapUpdateRecord,
    ProbeRequest,
    RequestedPattern,
    audit_records,
)

log = logging.getLogger(__name__)

NOISE_DOMAINS_REMEMBERED = 1000
"""Domains whose pages' learned noise the worker keeps for their next runs."""


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
    audit: Audit | None = None
    audit_requests: int = 0


def is_audit(request: ProbeRequest) -> bool:
    return all(info.reason == AUDIT for info in request.patterns.values())


def reverifies(work: DomainWork) -> bool:
    """Whether ``work`` reverifies a pattern: it is to see what the site gives now."""
    return any(info.reason == REVERIFY for info in work.patterns.values())


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
        audit_share: float = DEFAULT_AUDIT_SHARE,
        observations: ObservedPages | None = None,
        maps_held: Callable[[str], Awaitable[None]] | None = None,
        observations_held: Callable[[str], Awaitable[None]] | None = None,
        observed_samples: int = SamplingRule().max_pool_urls,
        recalled: RecalledPages | None = None,
    ) -> None:
        """``maps_held(domain)`` returns once the live maps hold ``domain``'s map if it has
        one (its maps partition restored); awaited before a run reads the map.
        ``observations_held(domain)`` returns once the observations of ``domain``'s
        partition are restored, or after a while; awaited before a learning run.
        ``observed_samples`` bounds the observed URLs of the requested patterns that a run
        adds to a shape's sample pool."""
        self.live_maps = live_maps
        self.maps_held = maps_held
        self.observations_held = observations_held
        self.fetcher = fetcher
        self.observations = observations
        """Pages a crawler fetched (``miqps.observations``): learning takes a URL's first
        page from them when they hold it, and samples their URLs first."""
        self.observed_samples = observed_samples
        self.recalled = recalled
        """Pages this worker's learning runs fetched, for the domain's next learning runs
        but those that reverify: a run takes a URL's first page from them when the
        observations do not hold it."""
        self.config = config or LearnConfig()
        self.max_flip_share = max_flip_share
        self.audit_rule = AuditRule(audit_share, str(self.config.seed))
        self.audited = ItemMemory()
        self._published: dict[str, DomainMap] = {}
        # The noise learned on each domain's pages, for its next learning runs and audits.
        self._noise: OrderedDict[str, VolatilityModel] = OrderedDict()

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

    async def held_current(self, domain: str) -> DomainMap | None:
        """:meth:`current`, once the live maps hold the domain's map (a missing map must
        mean that the domain has none, not that its partition is not restored yet)."""
        if self.maps_held is not None:
            await self.maps_held(domain)
        return self.current(domain)

    def _remember(self, published: DomainMap) -> None:
        """Keep ``published`` until the live maps have it, and forget the ones they have
        now: a map is kept while the feed has not delivered it, not until its domain is
        probed again (which may be never)."""
        for domain, mine in list(self._published.items()):
            live = self.live_maps.get(domain)
            if live is not None and live.version >= mine.version:
                del self._published[domain]
        self._published[published.domain] = published

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
        learning: list[ProbeRequest] = []
        audits: dict[str, dict[str, None]] = {}
        for request in requests:
            if is_audit(request):
                audits.setdefault(request.domain, {}).update(dict.fromkeys(request.urls))
            else:
                learning.append(request)
        work = group_by_domain(learning)

        async def domain_run(domain: str) -> None:
            for item in work.get(domain, []):
                await deliver(await self._learn(item))
            if domain in audits:
                await deliver(await self._audit(domain, audits[domain]))

        async def deliver(outcome: ProbeOutcome) -> None:
            if publish is not None:
                await publish(outcome)
            outcomes.append(outcome)

        await asyncio.gather(*(domain_run(domain) for domain in {**work, **audits}))
        return outcomes

    async def _audit(self, domain: str, urls: Iterable[str]) -> ProbeOutcome:
        """Audit the items of ``urls`` against the domain's newest map."""
        urls = list(urls)
        current = await self.held_current(domain)
        if current is None:
            return ProbeOutcome(domain, None, [], 0, [], None, len(urls))
        audit = await audit_map(
            PageProber(self.fetcher, self._noise_of(domain)),
            current,
            _parse_all(urls, domain),
            self.audit_rule,
            self.audited,
            max_flip_share=self.max_flip_share,
        )
        if audit.published is not None:
            self._remember(audit.published)
        if audit.restores:
            log.info(
                "audit %s: restored %s (%d items audited, %d fetches)%s",
                domain,
                ", ".join(f"{shape} {name}" for shape, name in audit.restored),
                audit.audited,
                audit.update.fetches,
                " (update rejected by the anomaly gate)" if audit.update.rejected else "",
            )
        return ProbeOutcome(
            domain,
            audit.published,
            audit_records(audit.update, {}),
            audit.update.fetches,
            [],
            audit,
            len(urls),
        )

    def _noise_of(self, domain: str) -> VolatilityModel:
        """The noise learned on ``domain``'s pages so far: blocks seen changing between
        fresh fetches of one URL change by themselves whenever the page is fetched, so a
        later run need not fetch again to learn them."""
        noise = self._noise.pop(domain, None) or VolatilityModel()
        self._noise[domain] = noise
        if len(self._noise) > NOISE_DOMAINS_REMEMBERED:
            self._noise.popitem(last=False)
        return noise

    def _with_observed(self, work: DomainWork) -> list[str]:
        """The shape's sample URLs, then up to ``observed_samples`` URLs of its requested
        patterns that the crawler observed: the front samples URLs without regard to what
        was observed, and a sample whose pages were observed costs fewer fetches (the
        learner tries such URLs first). Only the requested patterns: a pattern of the
        shape that nobody asked for would be decided, and verified, too."""
        urls = dict(work.urls)
        if self.observations is not None:
            limit = self.observed_samples
            observed = (
                self.observations.urls_of(work.domain, pattern, limit)
                for pattern in sorted(work.patterns)
            )
            for url in itertools.islice(_interleaved(observed), limit):
                urls.setdefault(url, None)
        return list(urls)

    async def _learn(self, work: DomainWork) -> ProbeOutcome:
        requested = {
            pattern: Request(info.basis, info.urls_seen) for pattern, info in work.patterns.items()
        }
        current = await self.held_current(work.domain)
        if self.observations_held is not None and self.observations is not None:
            await self.observations_held(work.domain)
        prober = PageProber(
            self.fetcher,
            self._noise_of(work.domain),
            observations=self.observations,
            recalled=None if reverifies(work) else self.recalled,
        )
        update = await update_map(
            Learner(prober, self.config, self.live_maps.layers),
            work.domain,
            current,
            _parse_all(self._with_observed(work), work.domain),
            requested,
            max_flip_share=self.max_flip_share,
        )
        if self.recalled is not None:
            self.recalled.keep(prober.probed_pages())
        if update.published is not None:
            self._remember(update.published)
        if len(update.skipped) < len(requested):
            log.info(
                "probe %s: %d patterns decided (%d from the map's evidence), %d walled, "
                "%d unreachable, %d without samples, %d fetches, %d pages observed, "
                "%d recalled%s",
                work.domain,
                len(update.decided),
                sum(entry.from_map_evidence for entry in update.decided.values()),
                len(update.walled),
                len(update.unreachable),
                len(update.without_samples),
                update.fetches,
                update.observed,
                prober.recalled_takes,
                " (update rejected by the anomaly gate)" if update.rejected else "",
            )
        return ProbeOutcome(
            work.domain,
            update.published,
            audit_records(update, work.patterns),
            update.fetches,
            update.skipped,
        )


def _interleaved(lists: Iterable[list[str]]) -> Iterator[str]:
    for row in itertools.zip_longest(*lists):
        yield from (url for url in row if url is not None)


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
