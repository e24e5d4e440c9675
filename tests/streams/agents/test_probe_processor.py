"""The probing agent's logic against a small web whose pages change, without Kafka."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from miqps.fetch import FetchConfig, Fetcher, FetchResult
from miqps.learner import LearnConfig
from miqps.maps import DomainMap, Layer
from miqps.observations import (
    ObservedPages,
    RecalledPages,
    observation_record,
    read_observation,
)
from miqps.update import Undecided, Why
from miqps.urls import parse
from streams.agents.probe_processor import ProbeOutcome, Probing
from streams.maps.live import LiveMaps
from streams.messages import (
    ONE_PAGE,
    ProbeRequest,
    RequestedPattern,
    RequestReason,
    undecided_reason,
)
from streams.worker.errorpolicy import BugPolicy, OnBug
from tests.streams.conftest import DriftingSite
from tests.streams.support import assert_valid

PATTERN = "/p?id&ref"


def request(
    pattern: str, urls: list[str], basis: str = "", reason: RequestReason = "enough-samples"
) -> ProbeRequest:
    return ProbeRequest(
        "drift.test",
        "/p",
        {pattern: RequestedPattern(reason, basis, len(urls), 0.0)},
        tuple(urls),
        0.0,
    )


def on_the_wire(outcome: ProbeOutcome) -> list[dict[str, Any]]:
    """The outcome's audit records as ``miqps.map-updates`` carries them."""
    return [orjson.loads(audit.to_bytes()) for audit in outcome.audits]


def sample_urls(count: int = 8, offset: int = 0) -> list[str]:
    return [f"http://drift.test/p?id={offset + n}&ref=r{offset + n}" for n in range(count)]


@pytest.fixture
async def probing(drifting_web: tuple[DriftingSite, str]) -> AsyncIterator[Probing]:
    _, proxy = drifting_web
    async with Fetcher(
        FetchConfig(proxy=proxy, per_host_rate=500.0, timeout=5.0, max_attempts=1)
    ) as fetcher:
        yield Probing(LiveMaps(reverify_after=3600), fetcher, LearnConfig())


async def reverified_after(
    probing: Probing, change: Callable[[], None], offset: int
) -> ProbeOutcome:
    """Learn PATTERN and publish it, then ``change`` the site and ask for a reverify."""
    [first] = await probing.handle([request(PATTERN, sample_urls())])
    publish(probing, first.published)
    assert first.published is not None
    basis = first.published.patterns[PATTERN].decided_at
    change()
    [outcome] = await probing.handle(
        [request(PATTERN, sample_urls(offset=offset), basis, "reverify")]
    )
    return outcome


def publish(probing: Probing, domain_map: DomainMap | None) -> None:
    assert domain_map is not None
    probing.live_maps.apply(domain_map)


async def test_first_learning_drops_noise_and_keeps_the_key(probing: Probing) -> None:
    [outcome] = await probing.handle([request(PATTERN, sample_urls())])
    assert outcome.published is not None and outcome.published.version == 1
    decision = outcome.published.patterns[PATTERN]
    assert decision.kept == {"id"} and decision.dropped == {"ref"}
    assert_valid("miqps-map", outcome.published.to_json())
    [audit] = on_the_wire(outcome)
    assert_valid("map-update", audit)
    assert audit["accepted"] and audit["kept_after"] == ["id"] and audit["kept_before"] is None
    assert outcome.fetches > 0


async def test_a_duplicate_request_costs_no_fetch(probing: Probing) -> None:
    [first] = await probing.handle([request(PATTERN, sample_urls())])
    publish(probing, first.published)
    [again] = await probing.handle([request(PATTERN, sample_urls())])
    assert again.skipped == [PATTERN] and again.fetches == 0 and again.published is None


async def test_patterns_are_learned_from_the_samples_of_other_requests(probing: Probing) -> None:
    urls = [*sample_urls(), "http://drift.test/p?id=3", "http://drift.test/p?id=4"]
    [outcome] = await probing.handle([request(PATTERN, urls)])
    assert outcome.published is not None
    assert set(outcome.published.patterns) == {PATTERN, "/p?id"}
    pooled = [audit for audit in on_the_wire(outcome) if audit["pattern"] == "/p?id"]
    assert pooled and pooled[0]["request_reason"] == str(Why.POOLED)


async def test_a_new_combination_is_decided_from_evidence_with_few_fetches(
    probing: Probing,
) -> None:
    tracked = [f"http://drift.test/p?id={n}&utm_source=s{n}" for n in range(8)]
    [first] = await probing.handle([request(PATTERN, sample_urls() + tracked)])
    publish(probing, first.published)
    combined = "/p?id&ref&utm_source"
    urls = [f"http://drift.test/p?id={n}&ref=x{n}&utm_source=mail" for n in range(50, 53)]
    [outcome] = await probing.handle([request(combined, urls)])
    assert outcome.published is not None
    decision = outcome.published.patterns[combined]
    assert decision.kept == {"id"} and decision.dropped == {"ref", "utm_source"}
    verify = probing.config.verify_samples
    assert decision.verification.samples == verify
    assert outcome.fetches <= 2 * verify, "only the final form is verified"


async def learn_with_tracking(probing: Probing, name: str, values: list[str]) -> DomainMap:
    """Learn and publish ``/p?id&{name}`` with these values, and ``utm_source`` as noise."""
    urls = [f"http://drift.test/p?id={n}&{name}={value}" for n, value in enumerate(values)]
    urls += [f"http://drift.test/p?id={n}&utm_source=s{n}" for n in range(20, 28)]
    [first] = await probing.handle([request(f"/p?id&{name}", urls)])
    publish(probing, first.published)
    assert first.published is not None
    return first.published


async def new_tracked_combination(
    probing: Probing, name: str, value: str
) -> tuple[str, list[str], ProbeOutcome]:
    """Ask for ``/p?id&{name}&utm_source``, a combination the map has evidence for."""
    combined = f"/p?id&{name}&utm_source"
    tracked = [f"http://drift.test/p?id={n}&{name}={value}&utm_source=m{n}" for n in range(60, 64)]
    [outcome] = await probing.handle([request(combined, tracked)])
    return combined, tracked, outcome


async def test_a_new_combination_verifies_the_default_values_it_inherits(
    probing: Probing, drifting_web: tuple[DriftingSite, str]
) -> None:
    site, _ = drifting_web
    first = await learn_with_tracking(probing, "lang", ["en"] * 9 + ["de", "fr", "it"])
    assert first.patterns["/p?id&lang"].params["lang"].default_values == ["lang=en"]
    site.default_lang = "de"
    combined, tracked, outcome = await new_tracked_combination(probing, "lang", "en")
    assert outcome.published is not None
    decision = outcome.published.patterns[combined]
    assert "lang" in decision.kept and "utm_source" in decision.dropped
    assert decision.params["lang"].default_values == [], "lang=en is no longer the default"
    probing.live_maps.apply(outcome.published)
    canonical = probing.live_maps.decide(parse(tracked[0])).canonical_url
    assert canonical == "http://drift.test/p?id=60&lang=en"


async def test_a_new_combination_inherits_an_allowlisted_parameters_default(
    probing: Probing,
) -> None:
    first = await learn_with_tracking(probing, "start", ["0"] * 9 + ["15", "30", "45"])
    learned = first.patterns["/p?id&start"].params["start"]
    assert learned.layer == Layer.ALLOWLIST and learned.default_values == ["start=0"]
    combined, tracked, outcome = await new_tracked_combination(probing, "start", "0")
    assert outcome.published is not None
    decision = outcome.published.patterns[combined]
    assert decision.params["start"].default_values == ["start=0"]
    assert outcome.fetches <= 2 * probing.config.verify_samples, "decided from the evidence"
    probing.live_maps.apply(outcome.published)
    canonical = probing.live_maps.decide(parse(tracked[0])).canonical_url
    assert canonical == "http://drift.test/p?id=60"


async def test_drift_of_a_neutral_parameter_updates_the_map(
    probing: Probing, drifting_web: tuple[DriftingSite, str]
) -> None:
    site, _ = drifting_web
    outcome = await reverified_after(probing, lambda: setattr(site, "ref_matters", True), 100)
    assert outcome.published is not None and outcome.published.version == 2
    assert outcome.published.patterns[PATTERN].kept == {"id", "ref"}
    [audit] = on_the_wire(outcome)
    assert_valid("map-update", audit)
    assert audit["accepted"] and audit["request_reason"] == "reverify"
    assert (audit["kept_before"], audit["kept_after"]) == (["id"], ["id", "ref"])


async def test_a_site_that_walls_off_keeps_its_old_map_and_is_asked_for_again(
    probing: Probing, drifting_web: tuple[DriftingSite, str]
) -> None:
    site, _ = drifting_web
    outcome = await reverified_after(probing, lambda: setattr(site, "wall", True), 200)
    assert outcome.published is None
    [audit] = on_the_wire(outcome)
    assert_valid("map-update", audit)
    assert not audit["accepted"] and audit["reason"] == ONE_PAGE
    assert audit["version_after"] is None


async def test_the_anomaly_gate_keeps_the_old_map_when_a_site_stops_reading_its_ids(
    probing: Probing, drifting_web: tuple[DriftingSite, str]
) -> None:
    site, _ = drifting_web

    def stop_reading_ids() -> None:
        site.ids_ignored = site.ref_matters = True

    outcome = await reverified_after(probing, stop_reading_ids, 200)
    assert outcome.published is None
    [audit] = on_the_wire(outcome)
    assert_valid("map-update", audit)
    assert not audit["accepted"] and audit["flipped_to_dropped"] == ["id"]
    assert audit["version_after"] is None


async def test_a_site_that_is_down_gets_no_decision_and_is_asked_for_again(
    probing: Probing, drifting_web: tuple[DriftingSite, str]
) -> None:
    site, _ = drifting_web
    site.down = True
    [outcome] = await probing.handle([request(PATTERN, sample_urls())])
    assert outcome.published is not None and outcome.published.patterns == {}
    assert outcome.published.undecided == {PATTERN: "robots-unreachable"}
    [audit] = on_the_wire(outcome)
    assert_valid("map-update", audit)
    # robots.txt answers 503 too: nothing is fetched until it answers, and it is asked again
    assert not audit["accepted"]
    assert audit["reason"] == undecided_reason(Undecided.ROBOTS_UNREACHABLE)
    site.down = False
    [again] = await probing.handle([request(PATTERN, sample_urls())])
    assert again.published is not None and again.published.patterns[PATTERN].kept == {"id"}


async def test_a_walled_site_is_left_undecided_by_the_cli_and_the_stream_alike(
    probing: Probing, drifting_web: tuple[DriftingSite, str], tmp_path: Path
) -> None:
    site, proxy = drifting_web
    site.wall = True
    [outcome] = await probing.handle([request(PATTERN, sample_urls())])
    assert outcome.published is not None and outcome.published.patterns == {}
    [audit] = on_the_wire(outcome)
    assert audit["reason"] == ONE_PAGE and audit["kept_after"] is None
    (tmp_path / "urls.txt").write_text("\n".join(sample_urls()) + "\n")
    maps = tmp_path / "maps.jsonl"

    async def cli_learn() -> tuple[str, dict[str, Any]]:
        command = [
            str(Path(sys.executable).with_name("miqps")),
            "learn",
            "--urls",
            str(tmp_path / "urls.txt"),
            "--out",
            str(maps),
            "--proxy",
            proxy,
            "--rate",
            "500",
            "--no-progress",
        ]
        done = await asyncio.to_thread(
            subprocess.run, command, capture_output=True, text=True, timeout=120, check=True
        )
        [document] = [json.loads(line) for line in maps.read_text().splitlines()]
        return done.stdout, document

    summary, document = await cli_learn()
    assert document["patterns"] == {}, "no decision, as the stream publishes none"
    assert document["undecided"] == outcome.published.undecided == {PATTERN: "one-page"}
    assert (
        "drift.test: 1 pattern left undecided, asked again on the next run: "
        "every URL fetched showed the same page" in summary
    )
    site.wall = False
    [again] = await probing.handle([request(PATTERN, sample_urls())])
    assert again.published is not None and again.published.patterns[PATTERN].kept == {"id"}
    _, document = await cli_learn()
    assert document["patterns"][PATTERN]["kept"] == ["id"], "asked again on the next run"


class BuggyFetcher(Fetcher):
    """A fetcher with a bug of ours in it: not a failed fetch, which is missing evidence."""

    async def fetch(self, url: str) -> FetchResult:
        raise AttributeError("'NoneType' object has no attribute 'status' (planted bug)")


async def test_a_bug_while_learning_reaches_the_error_policy_and_publishes_nothing() -> None:
    stops: list[BaseException] = []
    published: list[ProbeOutcome] = []
    policy = BugPolicy(OnBug.STOP, stops.append)

    async def publish(outcome: ProbeOutcome) -> None:
        published.append(outcome)

    async with BuggyFetcher(FetchConfig(max_attempts=1)) as fetcher:
        probing = Probing(LiveMaps(reverify_after=3600), fetcher, LearnConfig())

        async def learn() -> None:
            await probing.handle([request(PATTERN, sample_urls())], publish)

        guarded = asyncio.ensure_future(policy.run(learn, "probe drift.test"))
        deadline = asyncio.get_running_loop().time() + 10.0
        while not stops and not guarded.done() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        guarded.cancel()
    assert [type(error) for error in stops] == [AttributeError]
    assert published == [], "no map, and no audit that blames the site for our bug"


async def test_a_published_map_is_let_go_once_live_though_its_domain_is_never_probed_again(
    probing: Probing,
) -> None:
    [first] = await probing.handle([request(PATTERN, sample_urls())])
    publish(probing, first.published)  # the map feed delivers it
    elsewhere = ProbeRequest(
        "other.test",
        "/p",
        {"/p?id": RequestedPattern("enough-samples", "", 3, 0.0)},
        tuple(f"http://other.test/p?id={n}" for n in range(3)),
        0.0,
    )
    [second] = await probing.handle([elsewhere])
    assert second.published is not None
    assert list(probing._published) == ["other.test"]


async def probed_and_observed(
    drifting_web: tuple[DriftingSite, str], urls: list[str], crawled: list[str]
) -> tuple[tuple[ProbeOutcome, int], tuple[ProbeOutcome, int]]:
    """A run on the samples ``urls`` by probing alone, then with the pages of ``crawled``
    sent as observations: each outcome and the requests it made of the site."""
    site, proxy = drifting_web
    config = FetchConfig(proxy=proxy, per_host_rate=500.0, timeout=5.0, max_attempts=1)
    site.requests = 0
    async with Fetcher(config) as fetcher:
        probing = Probing(LiveMaps(reverify_after=3600), fetcher, LearnConfig())
        [probed] = await probing.handle([request(PATTERN, urls)])
    fetched_by_probing = site.requests

    pages = ObservedPages(1000)
    for url in crawled:
        status, body = site.page(url)
        sent = observation_record(url, status, body, content_type="text/html")
        assert pages.add(read_observation(sent, max_bytes=1 << 20))
    site.requests = 0
    async with Fetcher(config) as fetcher:
        observing = Probing(
            LiveMaps(reverify_after=3600), fetcher, LearnConfig(), observations=pages
        )
        [observed] = await observing.handle([request(PATTERN, urls)])
    print(f"fetches: {fetched_by_probing} probing, {site.requests} with observations")
    return (probed, fetched_by_probing), (observed, site.requests)


async def test_observed_pages_spare_fetches_and_decide_as_probing_does(
    drifting_web: tuple[DriftingSite, str],
) -> None:
    """A crawler sent the pages of the samples and of their forms without ``ref``: the same
    decision as probing, for fewer fetches, and the records say how many pages it took."""
    urls = sample_urls()
    crawled = [*urls, *(url.split("&")[0] for url in urls)]
    (probed, probing_fetches), (observed, observing_fetches) = await probed_and_observed(
        drifting_web, urls, crawled
    )

    assert probed.published is not None and observed.published is not None
    assert observed.published.patterns[PATTERN].kept == {"id"}
    assert observed.published.patterns[PATTERN].kept == probed.published.patterns[PATTERN].kept
    assert (
        observed.published.patterns[PATTERN].dropped
        == probed.published.patterns[PATTERN].dropped
        == {"ref"}
    )
    assert observing_fetches < probing_fetches
    assert observed.fetches == observing_fetches
    records = on_the_wire(observed)
    for record in records:
        assert_valid("map-update", record)
        assert record["observed"] > 0
    assert all(record["observed"] == 0 for record in on_the_wire(probed))


async def test_observed_urls_of_the_requested_patterns_join_the_sample_pool(
    drifting_web: tuple[DriftingSite, str],
) -> None:
    """The front sampled URLs the crawler never fetched; the crawler sent the pages of other
    items of the pattern and of their forms without ``ref``, and of another pattern. The
    run samples the observed URLs of the requested pattern too: the same decision for fewer
    fetches, and the pattern nobody asked for is not decided."""
    others = sample_urls(8, offset=100)
    crawled = [
        *others,
        *(url.split("&")[0] for url in others),
        *(f"http://drift.test/p?id={n}&lang=fr" for n in range(100, 108)),
    ]
    (probed, probing_fetches), (observed, observing_fetches) = await probed_and_observed(
        drifting_web, sample_urls(), crawled
    )

    assert probed.published is not None and observed.published is not None
    decided = observed.published.patterns
    assert set(decided) == set(probed.published.patterns) == {PATTERN}
    assert decided[PATTERN].kept == {"id"} and decided[PATTERN].dropped == {"ref"}
    assert observing_fetches < probing_fetches
    assert all(record["observed"] > 0 for record in on_the_wire(observed))


async def test_a_run_reads_its_domain_s_map_only_once_its_partition_is_restored(
    drifting_web: tuple[DriftingSite, str],
) -> None:
    """A worker taking the domain's partition: its live maps are empty until the restore
    delivers the map. Deciding before would learn the domain again as if it had no map,
    and publish a version 1 over the one it has."""
    _, proxy = drifting_web
    async with Fetcher(
        FetchConfig(proxy=proxy, per_host_rate=500.0, timeout=5.0, max_attempts=1)
    ) as fetcher:
        [learned] = await Probing(LiveMaps(3600), fetcher, LearnConfig()).handle(
            [request(PATTERN, sample_urls())]
        )
        assert learned.published is not None
        restored = asyncio.Event()
        asked: list[str] = []

        async def maps_held(domain: str) -> None:
            asked.append(domain)
            await restored.wait()

        live_maps = LiveMaps(3600)
        taking = Probing(live_maps, fetcher, LearnConfig(), maps_held=maps_held)
        run = asyncio.ensure_future(taking.handle([request(PATTERN, sample_urls(offset=20))]))
        await asyncio.sleep(0.2)
        assert not run.done() and asked == ["drift.test"]
        live_maps.apply(learned.published)  # the restore reads the map, then is done
        restored.set()
        [outcome] = await asyncio.wait_for(run, 30)
    assert outcome.skipped == [PATTERN] and outcome.fetches == 0 and outcome.published is None


async def test_a_later_run_on_a_domain_does_not_learn_its_noise_again(
    drifting_web: tuple[DriftingSite, str],
) -> None:
    """Every page shows an offer that changes at every request. A second run on the domain
    (a new pattern of the same path) fetches fewer pages than the same run by a worker that
    learned the first pattern's map from the maps topic, not by fetching, and it decides
    the same."""
    site, proxy = drifting_web
    site.promo = True
    tracked = PATTERN.replace("ref", "utm_source")
    second = [f"http://drift.test/p?id={n}&utm_source=s{n}" for n in range(8)]
    config = FetchConfig(proxy=proxy, per_host_rate=500.0, timeout=5.0, max_attempts=1)
    async with Fetcher(config) as fetcher:
        learned = Probing(LiveMaps(reverify_after=3600), fetcher, LearnConfig())
        [first] = await learned.handle([request(PATTERN, sample_urls())])
        publish(learned, first.published)
        before = site.requests
        [again] = await learned.handle([request(tracked, second)])
        by_the_learner = site.requests - before

        told = Probing(LiveMaps(reverify_after=3600), fetcher, LearnConfig())
        publish(told, first.published)
        before = site.requests
        [fresh] = await told.handle([request(tracked, second)])
        by_the_told = site.requests - before

    print(f"second run: {by_the_learner} fetches, {by_the_told} without the noise learned")
    assert again.published is not None and fresh.published is not None
    assert again.published.patterns[tracked].kept == {"id"}
    assert again.published.patterns[tracked].kept == fresh.published.patterns[tracked].kept
    assert by_the_learner < by_the_told


def recalling_probing(fetcher: Fetcher) -> Probing:
    return Probing(
        LiveMaps(reverify_after=3600),
        fetcher,
        LearnConfig(),
        recalled=RecalledPages(max_pages=1000, max_age=600.0),
    )


async def test_a_later_run_takes_the_pages_earlier_runs_fetched(
    drifting_web: tuple[DriftingSite, str],
) -> None:
    """A second run on the domain (a new pattern of the same path, whose URLs without their
    tracking parameter the first run fetched) takes those pages instead of fetching them
    again: fewer fetches than by a worker that does not keep them, the same decision, and
    the pages not counted as observed."""
    site, proxy = drifting_web
    tracked = PATTERN.replace("ref", "utm_source")
    second = [f"http://drift.test/p?id={n}&utm_source=s{n}" for n in range(8)]
    config = FetchConfig(proxy=proxy, per_host_rate=500.0, timeout=5.0, max_attempts=1)
    fetched: dict[str, int] = {}
    outcomes: dict[str, ProbeOutcome] = {}
    async with Fetcher(config) as fetcher:
        recalling = recalling_probing(fetcher)
        forgetting = Probing(LiveMaps(reverify_after=3600), fetcher, LearnConfig())
        for name, worker in (("recalling", recalling), ("forgetting", forgetting)):
            [first] = await worker.handle([request(PATTERN, sample_urls())])
            publish(worker, first.published)
            before = site.requests
            [outcomes[name]] = await worker.handle([request(tracked, second)])
            fetched[name] = site.requests - before

    print(f"second run: {fetched}")
    decided = {name: outcome.published for name, outcome in outcomes.items()}
    assert all(published is not None for published in decided.values())
    assert {name: m.patterns[tracked].kept for name, m in decided.items() if m} == {
        "recalling": {"id"},
        "forgetting": {"id"},
    }
    assert fetched["recalling"] < fetched["forgetting"]
    assert recalling.recalled is not None and recalling.recalled.served > 0
    assert [audit["observed"] for audit in on_the_wire(outcomes["recalling"])] == [0]


async def test_a_reverification_fetches_afresh_what_earlier_runs_fetched(
    drifting_web: tuple[DriftingSite, str],
) -> None:
    """A reverification exists to see what the site gives now: no page the first run
    fetched, from before the site began to show ``ref``, answers it, and it fetches as
    much as by a worker that keeps no pages."""
    site, proxy = drifting_web
    config = FetchConfig(proxy=proxy, per_host_rate=500.0, timeout=5.0, max_attempts=1)
    async with Fetcher(config) as fetcher:
        recalling = recalling_probing(fetcher)
        forgetting = Probing(LiveMaps(reverify_after=3600), fetcher, LearnConfig())
        outcomes = {}
        for name, worker in (("recalling", recalling), ("forgetting", forgetting)):
            site.ref_matters = False
            outcomes[name] = await reverified_after(
                worker, lambda: setattr(site, "ref_matters", True), 0
            )
    assert recalling.recalled is not None and recalling.recalled.served == 0
    assert {name: outcome.fetches for name, outcome in outcomes.items()} == {
        "recalling": outcomes["forgetting"].fetches,
        "forgetting": outcomes["forgetting"].fetches,
    }
    for outcome in outcomes.values():
        assert outcome.published is not None
        assert outcome.published.patterns[PATTERN].kept == {"id", "ref"}
