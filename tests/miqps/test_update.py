"""update_map, the one decision path, against a small loopback web whose pages change."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest

from miqps.canonical import Canonicalizer
from miqps.fetch import FetchConfig, Fetcher
from miqps.learner import LearnConfig, Learner
from miqps.maps import DomainMap, Layer, ParamEvidence, PatternDecision, Verification, utc_now
from miqps.prober import PageProber
from miqps.update import MapUpdate, Request, Why, update_all, update_map
from miqps.urls import NormalizedURL, parse
from tests.miqps.drifting import DriftingSite
from tests.miqps.loopback import AliasShop, serve

DOMAIN = "drift.test"
PATTERN = "/p?id&ref"


def urls_of(query: str, numbers: range) -> list[NormalizedURL]:
    """``/p?{query}`` for each number, ``{n}`` in ``query`` replaced by it."""
    return [parse(f"http://{DOMAIN}/p?" + query.replace("{n}", str(n))) for n in numbers]


def sample_urls(offset: int = 0) -> list[NormalizedURL]:
    return urls_of("id={n}&ref=r{n}", range(offset, offset + 8))


@pytest.fixture
def site(site_and_proxy: tuple[DriftingSite, str]) -> DriftingSite:
    return site_and_proxy[0]


async def update(
    fetcher: Fetcher,
    current: DomainMap | None,
    urls: list[NormalizedURL],
    requested: Mapping[str, Request] | None = None,
) -> MapUpdate:
    """One run, with a prober of its own as every worker run and CLI run has."""
    learner = Learner(PageProber(fetcher), LearnConfig())
    return await update_map(learner, DOMAIN, current, urls, requested)


async def first_map(fetcher: Fetcher, urls: list[NormalizedURL] | None = None) -> DomainMap:
    learned = await update(fetcher, None, urls or sample_urls(), {PATTERN: Request()})
    assert learned.published is not None
    return learned.published


async def test_a_first_request_is_learned_and_passes_the_gate(fetcher: Fetcher) -> None:
    learned = await update(fetcher, None, sample_urls(), {PATTERN: Request(urls_seen=40)})
    entry = learned.decided[PATTERN]
    assert entry.why is Why.REQUESTED and not entry.from_map_evidence
    assert entry.decision.kept == {"id"} and entry.decision.dropped == {"ref"}
    assert entry.decision.urls_seen == 40, "the asker saw more URLs than it sent"
    assert learned.verdict is not None and learned.verdict.accepted
    assert learned.published is not None and learned.published is learned.candidate
    assert learned.published.version == 1
    assert learned.fetches > 0 and learned.report is not None
    assert learned.skipped == learned.walled == learned.unreachable == []
    assert learned.without_samples == []


async def test_a_served_request_is_skipped_without_a_fetch_and_a_reverify_is_not(
    fetcher: Fetcher,
) -> None:
    current = await first_map(fetcher)
    again = await update(fetcher, current, sample_urls(), {PATTERN: Request()})
    assert again.skipped == [PATTERN] and again.fetches == 0
    assert again.candidate is None and again.published is None
    basis = current.patterns[PATTERN].decided_at
    reverified = await update(fetcher, current, sample_urls(100), {PATTERN: Request(basis)})
    assert reverified.skipped == [] and reverified.fetches > 0
    assert not reverified.decided[PATTERN].from_map_evidence, "re-verified by the learner"
    assert reverified.published is not None and reverified.published.version == 2


async def test_a_pattern_decided_on_evidence_among_the_samples_is_pooled(
    fetcher: Fetcher,
) -> None:
    urls = sample_urls() + urls_of("id={n}", range(3, 5))
    learned = await update(fetcher, None, urls, {PATTERN: Request()})
    assert learned.decided["/p?id"].why is Why.POOLED
    assert learned.decided[PATTERN].why is Why.REQUESTED


async def test_a_new_combination_is_decided_from_the_maps_evidence(fetcher: Fetcher) -> None:
    current = await first_map(fetcher, sample_urls() + urls_of("id={n}&utm_source=s{n}", range(8)))
    combined = "/p?id&ref&utm_source"
    urls = urls_of("id={n}&ref=x{n}&utm_source=mail", range(50, 53))
    learned = await update(fetcher, current, urls, {combined: Request()})
    entry = learned.decided[combined]
    assert entry.from_map_evidence and entry.why is Why.REQUESTED
    assert entry.decision.kept == {"id"} and entry.decision.dropped == {"ref", "utm_source"}
    assert learned.report is None, "the learner did not run"
    assert learned.fetches <= 2 * LearnConfig().verify_samples


async def test_a_drop_recorded_without_its_items_is_not_reused(fetcher: Fetcher) -> None:
    """A map of an earlier release records no distinct items for its drops: a new
    combination is then decided by the learner, not from that evidence."""
    current = await first_map(fetcher, sample_urls() + urls_of("id={n}&utm_source=s{n}", range(8)))
    document = current.to_json()
    for pattern in document["patterns"].values():
        for evidence in pattern["params"].values():
            evidence.pop("items", None)
    earlier = DomainMap.from_json(document)
    combined = "/p?id&ref&utm_source"
    urls = urls_of("id={n}&ref=x{n}&utm_source=mail", range(50, 53))
    learned = await update(fetcher, earlier, urls, {combined: Request()})
    assert not learned.decided[combined].from_map_evidence


def test_a_default_from_another_pattern_is_elided_only_once_this_pattern_confirms_it() -> None:
    """The map learned ``pid=1`` as a default beside the alias ``id``; a new pattern without
    ``id`` decided from that evidence must not leave ``pid=1`` out unless one of its own URLs
    carrying it shows the same page without it (here it shows the home page)."""
    evidence = {
        "id": ParamEvidence("keep", Layer.LEARNED, 5, 2, 3),
        "pid": ParamEvidence("keep", Layer.LEARNED, 5, 2, 3, default_values=["pid=1"]),
        "utm_source": ParamEvidence("drop", Layer.LEARNED, 6, 0, 6),
    }
    decision = PatternDecision(
        frozenset({"id", "pid"}), frozenset({"utm_source"}), evidence, Verification(1), utc_now()
    )
    current = DomainMap("alias.test", 1, utc_now(), {"/p?id&pid&utm_source": decision})
    pattern = "/p?pid&utm_source"
    texts = [f"/p?pid={n}&utm_source=s{n}" for n in range(2, 9)] + ["/p?pid=1&utm_source=x"]
    urls = [parse("http://alias.test" + text) for text in texts]

    async def learn(proxy: str) -> MapUpdate:
        async with Fetcher(FetchConfig(proxy=proxy, per_host_rate=500.0)) as fetcher:
            learner = Learner(PageProber(fetcher), LearnConfig())
            return await update_map(learner, "alias.test", current, urls, {pattern: Request()})

    for proxy in serve(AliasShop):
        learned = asyncio.run(learn(proxy))
    assert learned.published is not None
    canonicalizer = Canonicalizer()
    canonicalizer.update(learned.published)
    for url in urls:
        assert AliasShop.page(canonicalizer.canonical_url(url)) == AliasShop.page(url.url), url


async def test_a_default_the_site_dropped_is_withdrawn_from_the_shapes_other_patterns(
    fetcher: Fetcher, site: DriftingSite
) -> None:
    langs = ["en"] * 9 + ["de", "fr", "it"]
    urls = [parse(f"http://{DOMAIN}/p?id={n}&lang={lang}") for n, lang in enumerate(langs)]
    urls += urls_of("id={n}&utm_source=s{n}", range(20, 28))
    learned = await update(fetcher, None, urls, {"/p?id&lang": Request()})
    current = learned.published
    assert current is not None
    assert current.patterns["/p?id&lang"].params["lang"].default_values == ["lang=en"]
    site.default_lang = "de"
    combined = "/p?id&lang&utm_source"
    tracked = urls_of("id={n}&lang=en&utm_source=m{n}", range(60, 64))
    relearned = await update(fetcher, current, tracked, {combined: Request()})
    stale = relearned.decided["/p?id&lang"]
    assert stale.why is Why.STALE_DEFAULTS
    assert stale.decision.params["lang"].default_values == []
    assert relearned.decided[combined].decision.params["lang"].default_values == []


async def test_a_walled_domain_gets_no_decision_and_keeps_its_old_map(
    fetcher: Fetcher, site: DriftingSite
) -> None:
    current = await first_map(fetcher)
    site.wall = True
    basis = current.patterns[PATTERN].decided_at
    walled = await update(fetcher, current, sample_urls(200), {PATTERN: Request(basis)})
    assert walled.walled == [PATTERN] and walled.decided == {}
    assert walled.candidate is None and walled.verdict is None and walled.published is None
    assert walled.report is not None and walled.report.one_page
    assert walled.fetches > 0 and walled.without_samples == []


async def test_a_walled_domain_gets_no_first_decision_and_is_decided_once_the_wall_is_gone(
    fetcher: Fetcher, site: DriftingSite
) -> None:
    site.wall = True
    walled = await update(fetcher, None, sample_urls(), None)
    assert walled.walled == [PATTERN] and walled.decided == {}
    assert walled.published is not None and walled.published.patterns == {}
    assert walled.published.undecided == {PATTERN: "one-page"}
    site.wall = False
    again = await update(fetcher, walled.published, sample_urls(), None)
    assert again.published is not None and again.published.patterns[PATTERN].kept == {"id"}
    assert again.published.undecided == {}, "the decision replaces the record"
    assert again.published.version == 2
    site.wall = True
    basis = again.published.patterns[PATTERN].decided_at
    rewalled = await update(fetcher, again.published, sample_urls(200), {PATTERN: Request(basis)})
    assert rewalled.walled == [PATTERN]
    assert rewalled.candidate is None, "the map keeps its decision and records nothing against it"


async def test_a_pattern_whose_every_probe_failed_is_left_undecided_and_recorded_once(
    fetcher: Fetcher, site: DriftingSite
) -> None:
    site.down = True
    down = await update(fetcher, None, sample_urls(), {PATTERN: Request()})
    assert down.unreachable == [PATTERN] and down.decided == {} and down.walled == []
    assert down.published is not None and down.published.patterns == {}
    assert down.published.undecided == {PATTERN: str(down.undecided[PATTERN])}
    still_down = await update(fetcher, down.published, sample_urls(), {PATTERN: Request()})
    assert still_down.undecided == down.undecided
    assert still_down.candidate is None, "the same cause again is no new version"


async def test_a_requested_pattern_without_sample_urls_is_said_so(fetcher: Fetcher) -> None:
    learned = await update(fetcher, None, sample_urls(), {"/p?id&lang": Request()})
    assert learned.without_samples == ["/p?id&lang"]
    assert "/p?id&lang" not in learned.decided


async def test_the_gate_rejects_an_update_that_drops_the_identifier(
    fetcher: Fetcher, site: DriftingSite
) -> None:
    current = await first_map(fetcher)
    site.ids_ignored = site.ref_matters = True
    basis = current.patterns[PATTERN].decided_at
    broken = await update(fetcher, current, sample_urls(200), {PATTERN: Request(basis)})
    assert broken.decided[PATTERN].decision.dropped == {"id"}
    assert broken.rejected and broken.published is None and broken.candidate is not None
    assert broken.verdict is not None and broken.verdict.flipped == ((PATTERN, "id"),)


async def test_without_requests_every_pattern_the_map_lacks_is_decided(fetcher: Fetcher) -> None:
    current = await first_map(fetcher)
    urls = sample_urls() + urls_of("id={n}&lang=en&sid=s{n}", range(30, 38))
    updates = await update_all(Learner(PageProber(fetcher), LearnConfig()), {DOMAIN: current}, urls)
    [(domain, incremental)] = updates.items()
    assert domain == DOMAIN
    assert incremental.skipped == [PATTERN]
    assert list(incremental.decided) == ["/p?id&lang&sid"]
    assert incremental.published is not None and PATTERN in incremental.published.patterns
