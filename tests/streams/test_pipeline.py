"""The stream processor on the real broker: worker processes, the simulated web, real topics.

Every test has topics, app id and state of its own (a unique prefix), so tests never see
each other's messages.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from miqps.maps import DomainMap
from miqps.update import Why
from miqps.urls import parse
from simweb.corpus import CorpusURL, generate_corpus
from simweb.resolve import page_shown
from simweb.server import SimWeb
from simweb.sites import Site, build_sites
from streams.kafka.admin import ensure_topics
from streams.kafka.clients import read_compacted
from streams.kafka.partitioning import key_partition
from streams.kafka.tables import changelog_topics
from streams.messages import ONE_PAGE, UNREACHABLE
from streams.settings import LearningPolicy, Settings
from testkit.scrape import free_port, quiet_for
from testkit.tools import (
    TopicReader,
    WorkerProcess,
    committed_in_transactions,
    delete_topics,
    produce,
)
from testkit.tools import isolated_settings as isolated_settings_of
from tests.streams.conftest import DriftingSite
from tests.streams.support import assert_valid

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(420)]

BAD_INPUTS: dict[bytes, str] = {
    b"\xc3\x28 invalid UTF-8": "not valid UTF-8",
    b"not a url at all": "invalid URL: not a parsable URL",
    b"ftp://files.example/pub/x?y=1": "invalid URL: scheme 'ftp' is not http or https",
    b"mailto:someone@example.com": "invalid URL: scheme 'mailto' is not http or https",
    b'{"href": "http://t01-shop.sim/?a=1"}': 'JSON object without a "url" string',
    b"[1, 2, 3]": 'JSON list instead of an object with a "url"',
    b'{"url": ["http://t01-shop.sim/"]}': 'JSON object without a "url" string',
    b"http://t01-shop.sim/?q=" + b"x" * (3 * 1024 * 1024): "larger than the",
}


def wait_until(
    condition: Callable[[], bool], timeout: float, what: str, every: float = 0.5
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(every)


def documents(reader: TopicReader) -> list[dict[str, Any]]:
    return [orjson.loads(value) for _, value, _ in reader.records if value is not None]


def enveloped(corpus: list[CorpusURL], run: int, start: int = 0) -> list[bytes]:
    return [
        orjson.dumps({"url": item.url, "run": run, "seq": start + number})
        for number, item in enumerate(corpus)
    ]


def read_maps_cli(settings: Settings) -> dict[str, DomainMap]:
    """The current maps, through the ``miqps maps`` command itself."""
    env = dict(
        os.environ,
        KAFKA_BOOTSTRAP_SERVERS=settings.bootstrap_servers,
        MIQPS_TOPIC_MAPS=settings.topics.maps,
    )
    done = subprocess.run(
        [str(Path(sys.executable).with_name("miqps")), "maps"],
        env=env,
        capture_output=True,
        timeout=120,
        check=True,
    )
    maps = {}
    for line in done.stdout.decode().splitlines():
        document = orjson.loads(line)
        assert_valid("miqps-map", document)
        maps[document["domain"]] = DomainMap.from_json(document)
    return maps


def no_new_records_for(reader: TopicReader, seconds: float) -> Callable[[], bool]:
    state = {"count": -1, "since": time.monotonic()}

    def quiet() -> bool:
        reader.poll(0.2)
        if len(reader.records) != state["count"]:
            state["count"], state["since"] = len(reader.records), time.monotonic()
        return len(reader.records) > 0 and time.monotonic() - state["since"] >= seconds

    return quiet


def settled(updates: TopicReader, port: int, seconds: float) -> Callable[[], bool]:
    """Whether the worker has learned all it will for now: no map update for ``seconds``,
    and by its metrics no probe work and no fetch for as long. Updates alone can pause
    that long on a busy machine while probe requests still wait."""
    no_updates, no_work = no_new_records_for(updates, seconds), quiet_for(port, seconds)

    def quiet() -> bool:
        updates_quiet, work_quiet = no_updates(), no_work()
        return updates_quiet and work_quiet

    return quiet


@dataclass
class Web:
    sites: list[Site]
    server: SimWeb


NOT_ANSWERS = frozenset({str(Why.AUDIT), str(Why.STALE_DEFAULTS)})
"""Request reasons of decisions that answer no probe request and change a pattern learned
already: an audit's restore, and a default value withdrawn because a page of the same
shape showed that it matters."""


def answers_to_requests(audits: list[dict[str, Any]]) -> Counter[tuple[str, str]]:
    """How many times each (domain, pattern) was accepted but for :data:`NOT_ANSWERS`."""
    return Counter(
        (a["domain"], a["pattern"])
        for a in audits
        if a["accepted"] and a["request_reason"] not in NOT_ANSWERS
    )


@pytest.fixture
def web() -> Iterator[Web]:
    sites = build_sites("tuning", 3, 0)
    with SimWeb(sites, seed=0, rate_limit_per_second=0, flaky_rate=0.0) as server:
        yield Web(sites, server)


@pytest.fixture
def base(bootstrap: str) -> Iterator[Settings]:
    yield Settings.from_env({"KAFKA_BOOTSTRAP_SERVERS": bootstrap})
    while CREATED:
        delete_topics(CREATED.pop())


CREATED: list[Settings] = []


def isolated_settings(base: Settings, label: str, state: Path, **changes: Any) -> Settings:
    """Settings with topics of their own, deleted when the test is over."""
    settings = isolated_settings_of(base, label, state, **changes)
    CREATED.append(settings)
    return settings


def fast_learning(base: Settings, label: str, state: Path, proxy: str | None) -> Settings:
    return isolated_settings(
        base,
        label,
        state,
        proxy=proxy,
        partitions=4,
        probe_rate_per_host=50.0,
        policy=LearningPolicy(rare_after=4.0, retry_after=60.0),
    )


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_end_to_end_learns_maps_and_emits_every_url(
    base: Settings, web: Web, tmp_path: Path, guarantee: str
) -> None:
    settings = fast_learning(base, "e2e", tmp_path / "state", web.server.proxy_url).with_overrides(
        processing_guarantee=guarantee
    )
    ensure_topics(settings)
    corpus = generate_corpus(web.sites, 250, 1)
    truth = {item.url: item.content_key for item in corpus}
    port = free_port()
    worker = WorkerProcess(
        settings, "canonicalize,probe", tmp_path / "worker.log", {"MIQPS_METRICS_PORT": str(port)}
    ).start()
    outputs = TopicReader(settings, settings.topics.canonical)
    dead = TopicReader(settings, settings.topics.dlq)
    updates = TopicReader(settings, settings.topics.map_updates)
    try:
        first = enveloped(corpus, 1)
        stream = first[:300] + list(BAD_INPUTS) + first[300:]
        produce(settings, settings.topics.raw, stream)
        wait_until(lambda: outputs.wait_for(len(corpus), 0.5), 120, "first-run outputs")
        wait_until(lambda: dead.wait_for(len(BAD_INPUTS), 0.5), 30, "dead letters")
        wait_until(settled(updates, port, 10.0), 300, "learning to settle")
        assert worker.alive(), worker.log_text()[-3000:]

        maps = read_maps_cli(settings)
        assert set(maps) == {site.host for site in web.sites}
        learned = {(domain, key) for domain, m in maps.items() for key in m.patterns}

        before = len(outputs.records)
        produce(settings, settings.topics.raw, enveloped(corpus, 2))
        wait_until(lambda: outputs.wait_for(before + len(corpus), 0.5), 120, "second-run outputs")
        assert worker.alive(), worker.log_text()[-3000:]
    finally:
        worker.stop()
        for reader in (outputs, dead, updates):
            reader.poll(0.5)
            reader.close()

    outs = documents(outputs)
    for document in outs[:: max(1, len(outs) // 300)]:
        assert_valid("urls-canonical", document)
    by_run: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for document in outs:
        by_run[document["meta"]["run"]].append(document)
    for run in (1, 2):
        assert {d["meta"]["seq"] for d in by_run[run]} == set(range(len(corpus))), run

    second = by_run[2]
    for document in second:
        if (document["domain"], document["pattern"]) in learned:
            assert document["status"] == "learned", document
            assert document["map_version"] >= 1
    # A pattern whose every probe was evidence of nothing (a client-side shell, every fetch
    # failed, a bot wall) stays provisional by design; the audit says so, and such patterns
    # are left out of the share, which measures how much of the learnable stream is learned.
    unlearnable = {
        (audit["domain"], audit["pattern"])
        for audit in documents(updates)
        if audit["reason"] in (UNREACHABLE, ONE_PAGE)
    } - learned
    with_query = [
        d
        for d in second
        if (d["kept"] or d["dropped"]) and (d["domain"], d["pattern"]) not in unlearnable
    ]
    learned_share = sum(d["status"] == "learned" for d in with_query) / len(with_query)
    assert learned_share > 0.8, (learned_share, len(unlearnable))

    pages_of: dict[str, set[str]] = defaultdict(set)
    for document in second:
        pages_of[document["canonical_url"]].add(truth[document["url"]])
    merged = {url: pages for url, pages in pages_of.items() if len(pages) > 1}
    merging = [
        {key: d[key] for key in ("url", "kept", "dropped", "status", "map_version", "pattern")}
        for d in second
        if d["canonical_url"] in merged
    ]
    assert not merged, f"canonical URLs that merge different pages: {merging[:6]}"
    shown = page_shown(web.sites)
    elsewhere = [
        (document["url"], document["canonical_url"])
        for document in second
        if shown(document["canonical_url"]) != truth[document["url"]]
    ]
    assert not elsewhere, f"canonical URLs that show another page: {elsewhere[:5]}"
    raw_urls = {d["url"] for d in second}
    assert len(pages_of) < len(raw_urls), "learned maps collapse duplicate URLs"

    dead_letters = documents(dead)
    assert len(dead_letters) == len(BAD_INPUTS)
    by_original = {base64.b64decode(d["original"]): d for d in dead_letters}
    for value, reason in BAD_INPUTS.items():
        record = by_original[value]
        assert_valid("urls-dlq", record)
        assert reason in record["reason"], (record["reason"], reason)
        assert record["topic"] == settings.topics.raw and record["stage"] == "canonicalize"

    published = (settings.topics.maps, settings.topics.map_history, settings.topics.map_updates)
    in_transactions = [committed_in_transactions(settings, topic) for topic in published]
    assert in_transactions == [guarantee == "exactly_once"] * 3, in_transactions

    audits = documents(updates)
    for audit in audits:
        assert_valid("map-update", audit)
    accepted = answers_to_requests(audits)
    assert accepted and max(accepted.values()) == 1, "every pattern is learned once"
    for domain_map in maps.values():
        assert_valid("miqps-map", domain_map.to_json())
    with TopicReader(settings, settings.topics.probe_requests) as requests:
        requests.poll(2.0)
        assert requests.records
        for document in documents(requests):
            assert_valid("probe-request", document)
    with TopicReader(settings, settings.topics.samples) as samples:
        samples.poll(2.0)
        assert samples.records
        for _, sample, partition in samples.records:
            pack = orjson.loads(sample or b"null")
            assert_valid("pattern-sample", pack)
            for item in pack:
                assert key_partition(item["domain"].encode(), 4) == partition, item


def synthetic_stream(count: int) -> tuple[list[bytes], list[DomainMap]]:
    """URLs over 40 domains, and maps for the patterns of 30 of them (tracking dropped)."""
    from miqps.maps import Layer, ParamEvidence, PatternDecision, Verification, utc_now

    urls = []
    for number in range(count):
        domain = f"d{number % 40}.example"
        params = [f"id={number % 97}", f"utm_source=s{number % 5}"]
        if number % 3 == 0:
            params.append(f"sid={number}")
        if number % 7 == 0:
            params.append(f"color=c{number % 4}")
        urls.append(f"https://{domain}/p/{number % 13}?" + "&".join(params))
    tracking = {"utm_source", "sid"}
    patterns: dict[str, dict[str, frozenset[str]]] = defaultdict(dict)
    for text in urls:
        url = parse(text)
        if int(url.host[1:].split(".")[0]) < 30:
            patterns[url.host][url.pattern] = url.names
    maps = []
    for domain, by_pattern in patterns.items():
        decisions = {}
        for key, names in by_pattern.items():
            kept = names - tracking
            evidence = {
                name: ParamEvidence(
                    "keep" if name in kept else "drop",
                    Layer.LEARNED,
                    6,
                    6 if name in kept else 0,
                    0 if name in kept else 6,
                    0,
                )
                for name in names
            }
            decisions[key] = PatternDecision(
                frozenset(kept),
                frozenset(names & tracking),
                evidence,
                Verification(2, 0, 0, []),
                utc_now(),
                1,
            )
        maps.append(DomainMap(domain, 1, utc_now(), decisions))
    values = [orjson.dumps({"url": url, "seq": number}) for number, url in enumerate(urls)]
    return values, maps


def canonical_by_seq(reader: TopicReader) -> dict[int, tuple[str, str]]:
    result: dict[int, tuple[str, str]] = {}
    for document in documents(reader):
        pair = (document["canonical_url"], document["status"])
        previous = result.setdefault(document["meta"]["seq"], pair)
        assert previous == pair, "a duplicate delivery must carry the same result"
    return result


def test_two_workers_in_a_group_give_the_same_canonical_set_as_one(
    base: Settings, tmp_path: Path
) -> None:
    values, maps = synthetic_stream(6000)
    one = isolated_settings(base, "one", tmp_path / "one", partitions=4)
    two = isolated_settings(base, "two", tmp_path / "two", partitions=4)
    two = two.with_overrides(
        topics=two.topics.__class__(**{**two.topics.all(), "maps": one.topics.maps})
    )
    ensure_topics(one)
    ensure_topics(two)
    produce(
        one, one.topics.maps, (m.dumps().encode() for m in maps), (m.domain.encode() for m in maps)
    )
    workers = [
        WorkerProcess(one, "canonicalize", tmp_path / "one.log"),
        WorkerProcess(
            two.with_overrides(state_dir=tmp_path / "two-a"), "canonicalize", tmp_path / "two-a.log"
        ),
        WorkerProcess(
            two.with_overrides(state_dir=tmp_path / "two-b"), "canonicalize", tmp_path / "two-b.log"
        ),
    ]
    single = TopicReader(one, one.topics.canonical)
    pair = TopicReader(two, two.topics.canonical)
    try:
        for worker in workers:
            worker.start()

        def split_between_two() -> bool:
            latest = []
            for worker in workers[1:]:
                lines = [
                    line
                    for line in worker.log_text().splitlines()
                    if "canonicalizer: assigned partitions" in line
                    or "canonicalizer: revoked partitions" in line
                ]
                latest.append(lines[-1].rsplit("holds ", 1)[1] if lines else "")
            return all(assigned not in ("", "[]") for assigned in latest)

        wait_until(split_between_two, 90, "both workers to get partitions")
        # Keyed by sequence number so that every partition, and so both workers, get URLs:
        # unkeyed, the sticky partitioner may put all 6,000 in one worker's partitions.
        keys = [str(number).encode() for number in range(len(values))]
        produce(one, one.topics.raw, values, keys)
        produce(two, two.topics.raw, values, keys)
        assert single.wait_for(len(values), 180), len(single.records)
        assert pair.wait_for(len(values), 180), len(pair.records)
        single.poll(1.0)
        pair.poll(1.0)
    finally:
        codes = [worker.stop() for worker in workers]
        single.close()
        pair.close()
    assert codes == [0, 0, 0], [w.log_text()[-2000:] for w in workers]
    from_one, from_two = canonical_by_seq(single), canonical_by_seq(pair)
    assert set(from_one) == set(range(len(values)))
    assert from_one == from_two
    statuses = Counter(status for _, status in from_one.values())
    assert statuses["learned"] and statuses["provisional"]
    handled = [
        int(line.split("stopped after ")[1].split()[0])
        for worker in workers[1:]
        for line in worker.log_text().splitlines()
        if "canonicalizer stopped after" in line
    ]
    assert len(handled) == 2 and all(count > 0 for count in handled), handled


class Seqs:
    """The ``seq`` of every output of one run, read incrementally."""

    def __init__(self, reader: TopicReader, run: int) -> None:
        self.reader = reader
        self.run = run
        self.seen: set[int] = set()
        self._read = 0

    def update(self) -> set[int]:
        self.reader.poll(0.3)
        for _, value, _ in self.reader.records[self._read :]:
            document = orjson.loads(value or b"{}")
            if document.get("meta", {}).get("run") == self.run:
                self.seen.add(document["meta"]["seq"])
        self._read = len(self.reader.records)
        return self.seen


def test_kill_9_mid_stream_loses_nothing_and_does_not_probe_again(
    base: Settings, web: Web, tmp_path: Path
) -> None:
    settings = fast_learning(base, "kill", tmp_path / "state", web.server.proxy_url)
    ensure_topics(settings)
    corpus = generate_corpus(web.sites[:2], 200, 2)
    updates = TopicReader(settings, settings.topics.map_updates)
    outputs = TopicReader(settings, settings.topics.canonical)
    second = Seqs(outputs, 2)
    worker = WorkerProcess(settings, "canonicalize,probe", tmp_path / "worker.log").start()
    stream = enveloped(corpus * 40, 2)
    produced = [0]

    def produce_slowly() -> None:
        for start in range(0, len(stream), 500):
            produced[0] += produce(settings, settings.topics.raw, stream[start : start + 500])
            time.sleep(0.25)

    try:
        produce(settings, settings.topics.raw, enveloped(corpus, 1))
        wait_until(no_new_records_for(updates, 8.0), 200, "learning to settle")
        learned_before = {(a["domain"], a["pattern"]) for a in documents(updates) if a["accepted"]}
        fetches_before = web.server.requests_total()

        producer = threading.Thread(target=produce_slowly, daemon=True)
        producer.start()
        wait_until(lambda: len(second.update()) > 2000, 60, "second-run outputs to flow")
        os.killpg(worker.pid, signal.SIGKILL)
        worker.kill()
        produced_at_kill = produced[0]
        time.sleep(1.0)
        worker = WorkerProcess(settings, "canonicalize,probe", tmp_path / "worker2.log").start()
        wait_until(
            lambda: second.update() == set(range(len(stream))),
            240,
            "every input of the second run to have an output",
        )
        producer.join(30)
        wait_until(no_new_records_for(updates, 5.0), 60, "learning to settle again")
        assert worker.alive(), worker.log_text()[-3000:]
    finally:
        worker.stop()
        updates.close()
        outputs.close()

    assert produced_at_kill < len(stream), "the worker was killed while input kept coming"
    log = worker.log_text()
    assert "map feed: 2 domain maps live" in log, "maps rebuilt from the compacted topic"
    restarted = [
        int(line.split("stopped after ")[1].split()[0])
        for line in log.splitlines()
        if "canonicalizer stopped after" in line
    ]
    assert restarted and restarted[0] > 0, "the restarted worker took over mid-stream"
    audits = documents(updates)
    accepted = answers_to_requests(audits)  # before the kill or after it
    assert max(accepted.values()) == 1, [key for key, n in accepted.items() if n > 1]
    for document in documents(outputs):
        if (
            document["meta"]["run"] == 2
            and (document["domain"], document["pattern"]) in learned_before
        ):
            assert document["status"] == "learned"
    fetches_after = web.server.requests_total() - fetches_before
    assert fetches_after < fetches_before / 2, (fetches_before, fetches_after)


def test_an_aged_decision_is_re_verified_and_drift_updates_the_map_across_role_workers(
    base: Settings, drifting_web: tuple[DriftingSite, str], tmp_path: Path
) -> None:
    site, proxy = drifting_web
    settings = isolated_settings(
        base,
        "drift",
        tmp_path / "state",
        proxy=proxy,
        partitions=2,
        probe_rate_per_host=50.0,
        policy=LearningPolicy(rare_after=3.0, reverify_after=4.0, retry_after=60.0),
    )
    ensure_topics(settings)
    updates = TopicReader(settings, settings.topics.map_updates)
    outputs = TopicReader(settings, settings.topics.canonical)
    prober = WorkerProcess(
        settings.with_overrides(state_dir=tmp_path / "prober"), "probe", tmp_path / "prober.log"
    ).start()
    wait_until(lambda: "Worker ready" in prober.log_text(), 60, "the prober to lead the group")
    worker = WorkerProcess(settings, "canonicalize", tmp_path / "canonicalizer.log").start()
    # Joining rebalances the group. A probe request that lands in the middle of it was once
    # never delivered to the prober (see docs/STREAMS.md, known limits); the stream asks
    # again for a pattern that keeps arriving, but this test sends its URLs once.
    wait_until(lambda: "Worker ready" in worker.log_text(), 60, "the canonicalizer to join")

    def urls(start: int) -> list[bytes]:
        return [f"http://drift.test/p?id={n}&ref=r{n}".encode() for n in range(start, start + 8)]

    try:
        produce(settings, settings.topics.raw, urls(0))
        updates.wait_for(1, 90)
        [first] = documents(updates)
        assert first["kept_after"] == ["id"] and first["dropped_after"] == ["ref"]
        site.ref_matters = True
        time.sleep(5.0)
        produce(settings, settings.topics.raw, urls(100))
        assert updates.wait_for(2, 90), worker.log_text()[-3000:]
        second = documents(updates)[1]
        assert second["request_reason"] == "reverify" and second["accepted"]
        assert (second["kept_before"], second["kept_after"]) == (["id"], ["id", "ref"])
        assert second["version_after"] == 2
        produce(settings, settings.topics.raw, [b"http://drift.test/p?ref=new&id=1"])

        def kept_ref() -> bool:
            outputs.poll(0.3)
            return any(
                d["url"].endswith("ref=new&id=1")
                and d["kept"] == ["id", "ref"]
                and d["status"] == "learned"
                for d in documents(outputs)
            )

        wait_until(kept_ref, 30, "the live map to keep ref")
        assert worker.alive() and prober.alive()
    finally:
        worker.stop()
        prober.stop()
        updates.close()
        outputs.close()


def test_a_pattern_seen_once_before_a_restart_is_still_probed_after_its_time_limit(
    base: Settings, drifting_web: tuple[DriftingSite, str], tmp_path: Path
) -> None:
    _, proxy = drifting_web
    settings = isolated_settings(
        base,
        "rare",
        tmp_path / "state",
        proxy=proxy,
        partitions=2,
        probe_rate_per_host=50.0,
        policy=LearningPolicy(rare_after=20.0, retry_after=600.0),
    )
    ensure_topics(settings)
    [stats_changelog] = [topic for topic in changelog_topics(settings) if "stats" in topic]
    stats = TopicReader(settings, stats_changelog)
    updates = TopicReader(settings, settings.topics.map_updates)
    first = WorkerProcess(settings, "canonicalize,probe", tmp_path / "first.log").start()
    second: WorkerProcess | None = None
    try:
        wait_until(lambda: "Worker ready" in first.log_text(), 60, "the first worker")
        seen_at = time.monotonic()
        produce(settings, settings.topics.raw, [b"http://drift.test/p?id=7&ref=once"])
        assert stats.wait_for(1, 30), "the pattern's statistics were never stored"
        first.stop()
        assert time.monotonic() - seen_at < 20.0, "stopped too late to test the restart"
        assert "probe requested" not in first.log_text()
        second = WorkerProcess(settings, "canonicalize,probe", tmp_path / "second.log").start()
        assert updates.wait_for(1, 90), second.log_text()[-3000:]
        [update] = documents(updates)
        assert update["domain"] == "drift.test" and update["pattern"] == "/p?id&ref"
        assert "time limits set again for 1 shapes" in second.log_text()
    finally:
        first.stop()
        if second is not None:
            second.stop()
        stats.close()
        updates.close()


def test_maps_command_prints_one_domain(base: Settings, tmp_path: Path) -> None:
    settings = isolated_settings(base, "mapscli", tmp_path / "state", partitions=2)
    ensure_topics(settings)
    _, maps = synthetic_stream(200)
    produce(
        settings,
        settings.topics.maps,
        (m.dumps().encode() for m in maps),
        (m.domain.encode() for m in maps),
    )
    produce(settings, settings.topics.maps, [maps[0].dumps().encode()], [b"gone.example"])
    produce(settings, settings.topics.maps, [None], [b"gone.example"])
    assert {key for key, _ in read_compacted(settings, settings.topics.maps)} >= {
        m.domain.encode() for m in maps
    }
    assert set(read_maps_cli(settings)) == {m.domain for m in maps}
    env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=settings.bootstrap_servers)
    miqps = str(Path(sys.executable).with_name("miqps"))
    done = subprocess.run(
        [miqps, "maps", maps[1].domain, "--topic", settings.topics.maps],
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert DomainMap.from_json(orjson.loads(done.stdout)) == maps[1]
    missing = subprocess.run(
        [miqps, "maps", "nowhere.example", "--topic", settings.topics.maps],
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert missing.returncode == 1 and b"no map for nowhere.example" in missing.stderr
