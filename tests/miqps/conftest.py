"""A learning run on the tuning family of the simulated web, shared by the learner tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from functools import cached_property

import pytest

from miqps.canonical import Canonicalizer
from miqps.fetch import FetchConfig, Fetcher, FetchStats
from miqps.learner import DomainReport, LearnConfig, Learner, learn_all
from miqps.maps import DomainMap, merge_update
from miqps.prober import PageProber
from miqps.urls import NormalizedURL, parse
from simweb.corpus import CorpusURL, generate_corpus
from simweb.resolve import match_route
from simweb.server import SimWeb
from simweb.sites import Role, Site, build_sites, param_roles
from tests.miqps.drifting import DriftingSite, serve_drifting


@dataclass
class LearnedRun:
    sites: list[Site]
    corpus: list[CorpusURL]
    maps: dict[str, DomainMap]
    reports: list[DomainReport]
    stats: FetchStats
    failures: dict[str, str]
    server_requests: int
    canonicalizer: Canonicalizer

    @cached_property
    def first_url_of_pattern(self) -> dict[tuple[str, str], NormalizedURL]:
        """The first URL of the corpus of each (domain, pattern)."""
        firsts: dict[tuple[str, str], NormalizedURL] = {}
        for entry in self.corpus:
            url = parse(entry.url)
            firsts.setdefault((url.host, url.pattern), url)
        return firsts

    def site(self, host: str) -> Site:
        return next(site for site in self.sites if site.host == host)

    def role(self, url: NormalizedURL, name: str) -> Role | None:
        site = self.site(url.host)
        matched = match_route(site, url.path)
        if matched is None:
            return None
        route, _ = matched
        return param_roles(site).get((route.hint, name))

    def host_of(self, archetype_prefix: str) -> str:
        return next(s.host for s in self.sites if s.host.split("-")[1].startswith(archetype_prefix))


def learn_on(
    web: SimWeb, corpus: list[CorpusURL], config: LearnConfig, fetch_config: FetchConfig
) -> tuple[dict[str, DomainMap], list[DomainReport], FetchStats, dict[str, str]]:
    urls = [parse(entry.url) for entry in corpus]

    async def run() -> tuple[dict[str, DomainMap], list[DomainReport], FetchStats, dict[str, str]]:
        async with Fetcher(fetch_config) as fetcher:
            prober = PageProber(fetcher)
            maps, reports = await learn_all(Learner(prober, config), urls)
            return maps, reports, fetcher.stats, prober.failures

    return asyncio.run(run())


@pytest.fixture(scope="session")
def tuning_run() -> Iterator[LearnedRun]:
    sites = build_sites("tuning", 6, seed=3)
    corpus = generate_corpus(sites, 1200, seed=3)
    with SimWeb(sites, seed=3, rate_limit_per_second=80, hang_seconds=5.0) as web:
        fetch_config = FetchConfig(
            proxy=web.proxy_url, per_host_rate=50, timeout=1.0, backoff_base=0.05
        )
        maps, reports, stats, failures = learn_on(web, corpus, LearnConfig(), fetch_config)
        server_requests = web.requests_total()
    canonicalizer = Canonicalizer()
    canonicalizer.load({d: merge_update(None, m) for d, m in maps.items()})
    yield LearnedRun(sites, corpus, maps, reports, stats, failures, server_requests, canonicalizer)


@pytest.fixture
def site_and_proxy() -> Iterator[tuple[DriftingSite, str]]:
    """A loopback proxy serving :class:`DriftingSite` (drift.test); yields it and its URL."""
    with serve_drifting() as served:
        yield served


@pytest.fixture
async def fetcher(site_and_proxy: tuple[DriftingSite, str]) -> AsyncIterator[Fetcher]:
    """A fetcher through that proxy, fast and without retries."""
    config = FetchConfig(proxy=site_and_proxy[1], per_host_rate=500.0, timeout=5.0, max_attempts=1)
    async with Fetcher(config) as fetcher:
        yield fetcher
