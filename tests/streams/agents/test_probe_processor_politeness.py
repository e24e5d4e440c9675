"""The probing agent's logic on sites that ask something of a crawler, without Kafka: the
worker's one fetcher obeys robots.txt and Crawl-delay for all its tasks, and the audit
records and metrics name what was left undecided."""

from __future__ import annotations

import pytest

from miqps.fetch import FetchConfig, Fetcher
from miqps.learner import LearnConfig
from miqps.update import Undecided
from simweb.polite import PoliteWeb
from streams.agents.probe_processor import Probing
from streams.maps.live import LiveMaps
from streams.messages import ProbeRequest, RequestedPattern, undecided_reason
from streams.ops.metrics import MapUpdateCounts

pytestmark = pytest.mark.timeout(90)


def probe_request(domain: str, shape: str, pattern: str, urls: list[str]) -> ProbeRequest:
    return ProbeRequest(
        domain,
        shape,
        {pattern: RequestedPattern("enough-samples", "", len(urls), 0.0)},
        tuple(urls),
        0.0,
    )


async def test_a_disallowed_pattern_is_never_fetched_and_is_named_disallowed() -> None:
    urls = [f"http://private.polite.test/account/{n}?id={n}&utm_source=s{n}" for n in range(8)]
    with PoliteWeb() as web:
        config = FetchConfig(proxy=web.proxy_url, per_host_rate=100.0, max_attempts=1)
        async with Fetcher(config) as fetcher:
            probing = Probing(LiveMaps(reverify_after=3600), fetcher, LearnConfig())
            [outcome] = await probing.handle(
                [probe_request("private.polite.test", "/account", "/account/*?id&utm_source", urls)]
            )
            disallowed = fetcher.stats.disallowed
        received = web.log("private.polite.test")
    assert received.under("/account/") == 0 and received.paths["/robots.txt"] == 1
    assert disallowed >= len(urls)
    assert outcome.published is not None and outcome.published.patterns == {}
    assert outcome.published.undecided == {"/account/*?id&utm_source": "disallowed"}
    [audit] = outcome.audits
    assert not audit.accepted and audit.kept_after is None
    assert audit.reason == undecided_reason(Undecided.DISALLOWED)
    counts = MapUpdateCounts()
    counts.count(outcome.audits)
    assert counts.by_verdict["undecided"] == 1
    assert counts.undecided_by_cause["disallowed"] == 1


@pytest.mark.slow  # every page waits out the site's 0.5 s crawl delay
async def test_the_crawl_delay_holds_across_the_worker_s_tasks() -> None:
    shapes = {"/p": "/p/*?id&utm_source", "/q": "/q/*?id&utm_source"}
    requests = [
        probe_request(
            "spaced.polite.test",
            shape,
            pattern,
            [f"http://spaced.polite.test{shape}/{n}?id={n}&utm_source=s{n}" for n in range(3)],
        )
        for shape, pattern in shapes.items()
    ]
    with PoliteWeb(crawl_delay=0.5) as web:
        config = FetchConfig(
            proxy=web.proxy_url, per_host_rate=100.0, per_host_concurrency=4, max_attempts=1
        )
        async with Fetcher(config) as fetcher:
            probing = Probing(LiveMaps(reverify_after=3600), fetcher, LearnConfig())
            await probing.handle(requests)
        received = web.log("spaced.polite.test")
    assert received.paths["/robots.txt"] == 1
    assert received.pages >= 4
    assert received.shortest_gap() >= 0.5 * 0.95
