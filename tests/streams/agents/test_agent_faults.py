"""The agents under faults, on the real broker: a bug of ours, lost probe requests and
rebalance storms.

Each test has topics, app id and state of its own (a unique prefix).
"""

from __future__ import annotations

import base64
import os
import string
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from streams.agents.shape_stats import PatternState
from streams.kafka.admin import ensure_topics
from streams.settings import LearningPolicy, Settings
from testkit.tools import TopicReader, WorkerProcess, delete_topics, isolated_settings, produce
from tests.streams.conftest import DriftingSite
from tests.streams.support import assert_valid

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(420)]

BUG_HOOK = Path(__file__).with_name("bughook")
SHAPES_PER_REBALANCE = 2


@pytest.fixture
def settings(
    bootstrap: str, drifting_web: tuple[DriftingSite, str], tmp_path: Path
) -> Iterator[Settings]:
    _, proxy = drifting_web
    base = Settings.from_env({"KAFKA_BOOTSTRAP_SERVERS": bootstrap})
    made = isolated_settings(
        base,
        "faults",
        tmp_path / "state",
        proxy=proxy,
        partitions=4,
        probe_rate_per_host=100.0,
        policy=LearningPolicy(rare_after=2.0, retry_after=8.0),
    )
    ensure_topics(made)
    yield made
    delete_topics(made)


def with_bug(planted: str, **env: str) -> dict[str, str]:
    """The environment of a worker with faults planted (see bughook/sitecustomize.py)."""
    path = os.pathsep.join(p for p in (str(BUG_HOOK), os.environ.get("PYTHONPATH")) if p)
    return {"PYTHONPATH": path, "MIQPS_TEST_BUGS": planted, **env}


LOSES_ITS_FIRST_REQUESTS = with_bug("0", MIQPS_TEST_LOST_REQUESTS="1")


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.5)


def ready(worker: WorkerProcess) -> Callable[[], bool]:
    return lambda: "Worker ready" in worker.log_text()


def word(number: int) -> str:
    """A path segment the path-shape rules keep as it is (no digits)."""
    letters = ""
    while True:
        number, digit = divmod(number, 26)
        letters = string.ascii_lowercase[digit] + letters
        if not number:
            return f"item-{letters}"


def urls_of_shapes(first: int, count: int) -> list[bytes]:
    return [
        f"http://drift.test/{word(n)}?id={n}&ref=r{n}".encode() for n in range(first, first + count)
    ]


def answered(reader: TopicReader) -> set[str]:
    reader.poll(0.3)
    return {orjson.loads(value)["pattern"] for _, value, _ in reader.records if value}


def requested(reader: TopicReader) -> list[dict[str, Any]]:
    reader.poll(0.3)
    return [orjson.loads(value) for _, value, _ in reader.records if value]


RESEND_GRACE_SECONDS = 30.0


def overdue(
    requests: list[dict[str, Any]], pending: set[str], policy: LearningPolicy, now: float
) -> dict[str, str]:
    """The ``pending`` patterns whose next request should have been sent more than
    :data:`RESEND_GRACE_SECONDS` before ``now`` (wall clock): never requested at all, or
    past the re-send delay that their number of requests so far gives."""
    sent: dict[str, tuple[int, float]] = {}
    for request in requests:
        for pattern in request["patterns"]:
            count, last = sent.get(pattern, (0, 0.0))
            sent[pattern] = (count + 1, max(last, request["requested_at"]))
    late = {}
    for pattern in sorted(pending):
        if pattern not in sent:
            late[pattern] = "never requested"
            continue
        count, last = sent[pattern]
        due = last + PatternState(first_seen=0.0, requests=count).retry_delay(policy)
        if now - due > RESEND_GRACE_SECONDS:
            late[pattern] = f"{count} requests, the last {now - last:.0f}s ago"
    return late


def pattern_stats_dead_letters(settings: Settings) -> list[dict[str, Any]]:
    with TopicReader(settings, settings.topics.dlq) as dead:
        dead.poll(2.0)
        return [
            orjson.loads(value)
            for _, value, _ in dead.records
            if value and orjson.loads(value).get("stage") == "pattern-stats"
        ]


def test_a_bug_stops_the_worker_without_dead_lettering_or_losing_valid_samples(
    settings: Settings, tmp_path: Path
) -> None:
    updates = TopicReader(settings, settings.topics.map_updates)
    buggy = WorkerProcess(
        settings, "canonicalize,probe", tmp_path / "buggy.log", with_bug("always")
    ).start()
    worker: WorkerProcess | None = None
    try:
        produce(settings, settings.topics.raw, urls_of_shapes(0, 3))
        wait_until(lambda: not buggy.alive(), 120, "the worker to stop on the bug")
        log = buggy.log_text()
        assert buggy.stop() != 0, log[-3000:]
        assert "failed on a bug; the message is not acknowledged and the worker stops" in log
        assert "planted bug" in log and "Traceback" in log
        assert pattern_stats_dead_letters(settings) == []
        worker = WorkerProcess(settings, "canonicalize,probe", tmp_path / "worker.log").start()
        wait_until(
            lambda: len(answered(updates)) >= 3,
            120,
            "the samples the bug left unacknowledged to be learned after a restart",
        )
        assert answered(updates) == {f"/{word(n)}?id&ref" for n in range(3)}
    finally:
        buggy.stop()
        if worker is not None:
            worker.stop()
        updates.close()


def test_with_retry_a_passing_bug_costs_a_backoff_and_no_sample(
    settings: Settings, tmp_path: Path
) -> None:
    updates = TopicReader(settings, settings.topics.map_updates)
    worker = WorkerProcess(
        settings, "canonicalize,probe", tmp_path / "worker.log", with_bug("2", MIQPS_ON_BUG="retry")
    ).start()
    try:
        produce(settings, settings.topics.raw, urls_of_shapes(0, 3))
        wait_until(lambda: len(answered(updates)) >= 3, 120, "the samples to be learned")
        assert worker.alive(), worker.log_text()[-3000:]
        log = worker.log_text()
        assert "failed on a bug; the message is not acknowledged, retrying in 1s" in log
        assert "planted bug" in log
        assert pattern_stats_dead_letters(settings) == []
    finally:
        worker.stop()
        updates.close()


@pytest.mark.timeout(900)
def test_every_pattern_is_answered_through_20_rebalances_and_lost_requests(
    settings: Settings, tmp_path: Path
) -> None:
    requests = TopicReader(settings, settings.topics.probe_requests)
    updates = TopicReader(settings, settings.topics.map_updates)
    canonicalizer = WorkerProcess(
        settings.with_overrides(state_dir=tmp_path / "c"),
        "canonicalize",
        tmp_path / "canonicalizer.log",
    ).start()
    prober = WorkerProcess(
        settings.with_overrides(state_dir=tmp_path / "p"),
        "probe",
        tmp_path / "prober.log",
        LOSES_ITS_FIRST_REQUESTS,
    ).start()
    sent = 0

    def send_new_shapes() -> None:
        nonlocal sent
        produce(settings, settings.topics.raw, urls_of_shapes(sent, SHAPES_PER_REBALANCE))
        sent += SHAPES_PER_REBALANCE

    rebalances = 0
    try:
        for worker in (canonicalizer, prober):
            wait_until(ready(worker), 90, "a worker")
        for cycle in range(10):
            extra = WorkerProcess(
                settings.with_overrides(state_dir=tmp_path / f"x{cycle}"),
                "probe",
                tmp_path / f"extra{cycle}.log",
                LOSES_ITS_FIRST_REQUESTS,
            ).start()
            send_new_shapes()  # their requests come due while the group rebalances
            wait_until(ready(extra), 90, "the extra prober")
            rebalances += 1
            send_new_shapes()
            assert extra.stop() == 0, extra.log_text()[-3000:]
            rebalances += 1

        sent_patterns = {f"/{word(n)}?id&ref" for n in range(sent)}

        def unanswered() -> set[str]:
            asked = {pattern for request in requested(requests) for pattern in request["patterns"]}
            return (asked | sent_patterns) - answered(updates)

        # A request lost again and again is re-sent ever later (the delay doubles), so the
        # wait follows that schedule: it fails once a pattern is past its re-send time.
        deadline = time.monotonic() + 150
        while pending := unanswered():
            if time.monotonic() > deadline:
                late = overdue(requested(requests), pending, settings.policy, time.time())
                assert not late, f"unanswered past their re-send time: {late}"
                deadline = time.monotonic() + 30
            time.sleep(0.5)
        assert canonicalizer.alive() and prober.alive()
        asked = requested(requests)
    finally:
        for worker in (canonicalizer, prober):
            worker.stop()
        requests.close()
        updates.close()
    patterns = {pattern for request in asked for pattern in request["patterns"]}
    again = sum(
        1 for request in asked for info in request["patterns"].values() if info["reason"] == "retry"
    )
    # A batch dropped before its offset was committed comes back to the partition's next
    # owner after the rebalance; only the others need a re-send.
    losses = sum(
        log.read_text("utf-8", "replace").count("planted loss:") for log in tmp_path.glob("*.log")
    )
    print(
        f"\n{rebalances} rebalances; {sent} new shapes sent; {len(patterns)} patterns "
        f"requested in {len(asked)} requests, {again} of them sent again; "
        f"{losses} batches of requests dropped; all answered"
    )
    assert rebalances == 20
    assert losses >= 1, "every probe worker drops the first requests it takes"


def test_a_lost_sample_pack_and_a_lost_tick_still_end_in_a_learned_pattern(
    settings: Settings, tmp_path: Path
) -> None:
    """The pattern-stats agent loses the first pack that brings a URL sample and the first
    due tick (acknowledged, never handled), as Faust's consumer can around a rebalance:
    the front forwards the still-unlearned pattern's sample again, the timer ticks again,
    and both patterns are learned."""
    updates = TopicReader(settings, settings.topics.map_updates)
    worker = WorkerProcess(
        settings,
        "canonicalize,probe",
        tmp_path / "worker.log",
        with_bug("0", MIQPS_TEST_LOST_SAMPLES="1"),
    ).start()
    try:
        wait_until(ready(worker), 90, "the worker")
        produce(settings, settings.topics.raw, urls_of_shapes(0, 1))  # its pack is lost
        wait_until(lambda: "a pack of url samples dropped" in worker.log_text(), 30, "a loss")
        produce(settings, settings.topics.raw, urls_of_shapes(1, 1))  # its first tick is lost
        wanted = {f"/{word(n)}?id&ref" for n in range(2)}
        wait_until(lambda: wanted <= answered(updates), 120, "both patterns learned")
        log = worker.log_text()
    finally:
        worker.stop()
        updates.close()
    assert "a pack of due samples dropped" in log


STORM_CYCLES = 12
SHAPE_EVERY_SECONDS = 0.1
STORM_GRACE_SECONDS = 60.0


@pytest.mark.timeout(600)
def test_every_shape_seen_through_a_rebalance_storm_is_requested(
    settings: Settings, tmp_path: Path
) -> None:
    """A new shape every 0.1 s while probe workers join and leave the group again and
    again: the samples of every one reach the pattern-stats agent and each is requested
    (its time limit comes after one sighting), however its pack met a rebalance."""
    requests = TopicReader(settings, settings.topics.probe_requests)
    canonicalizer = WorkerProcess(
        settings.with_overrides(state_dir=tmp_path / "c"),
        "canonicalize",
        tmp_path / "canonicalizer.log",
    ).start()
    stopping = threading.Event()
    sent: list[int] = []

    def trickle() -> None:
        number = 1000
        while not stopping.wait(SHAPE_EVERY_SECONDS):
            produce(settings, settings.topics.raw, urls_of_shapes(number, 1))
            sent.append(number)
            number += 1

    trickler = threading.Thread(target=trickle, name="new-shapes", daemon=True)
    try:
        wait_until(ready(canonicalizer), 90, "the canonicalizer")
        trickler.start()
        for cycle in range(STORM_CYCLES):
            extra = WorkerProcess(
                settings.with_overrides(state_dir=tmp_path / f"x{cycle}"),
                "probe",
                tmp_path / f"extra{cycle}.log",
            ).start()
            wait_until(ready(extra), 90, "the extra prober")
            assert extra.stop() == 0, extra.log_text()[-3000:]
        stopping.set()
        trickler.join(30)
        wanted = {f"/{word(n)}?id&ref" for n in sent}
        deadline = time.monotonic() + settings.policy.rare_after + STORM_GRACE_SECONDS

        def unrequested() -> set[str]:
            asked = {pattern for request in requested(requests) for pattern in request["patterns"]}
            return wanted - asked

        while (missing := unrequested()) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert canonicalizer.alive(), canonicalizer.log_digest()
    finally:
        stopping.set()
        canonicalizer.stop()
        requests.close()
    print(
        f"\n{STORM_CYCLES * 2} rebalances; {len(wanted)} shapes sent; "
        f"{len(missing)} never requested"
    )
    assert not missing, f"{len(missing)} of {len(wanted)} never requested: {sorted(missing)[:10]}"


def test_bad_samples_and_requests_are_dead_lettered_and_the_good_ones_learned(
    settings: Settings, tmp_path: Path
) -> None:
    good = {
        "kind": "url",
        "domain": "drift.test",
        "pattern": "/p?id&ref",
        "url": "http://drift.test/p?id=1&ref=r1",
        "count": 1,
        "basis": "",
    }
    bad_item = {"kind": "url", "domain": "drift.test", "pattern": "/p?id", "count": 1}
    updates = TopicReader(settings, settings.topics.map_updates)
    worker = WorkerProcess(settings, "canonicalize,probe", tmp_path / "worker.log").start()
    try:
        produce(
            settings,
            settings.topics.samples,
            [b"not a pack", orjson.dumps([bad_item, good])],
            [b"drift.test"] * 2,
        )
        produce(
            settings, settings.topics.probe_requests, [b'{"domain": "drift.test"}'], [b"drift.test"]
        )
        wait_until(lambda: "/p?id&ref" in answered(updates), 120, "the good sample learned")
        with TopicReader(settings, settings.topics.dlq) as dead:
            wait_until(lambda: dead.wait_for(3, 0.5), 30, "three dead letters")
            letters = [orjson.loads(value) for _, value, _ in dead.records if value]
    finally:
        worker.stop()
        updates.close()
    for letter in letters:
        assert_valid("urls-dlq", letter)
    originals = {(letter["stage"], base64.b64decode(letter["original"])) for letter in letters}
    assert originals == {
        ("pattern-stats", b"not a pack"),
        ("pattern-stats", orjson.dumps(bad_item)),
        ("probe", b'{"domain": "drift.test"}'),
    }
