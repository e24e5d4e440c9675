"""The canonicalizer front's error policy, on the shared broker: bad input goes to the DLQ;
a bug in our code never dead-letters valid input. With ``MIQPS_ON_BUG=stop`` the front
stops without committing the batch, with ``retry`` it reads the batch again after a pause;
once the bug is gone every input comes out."""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest
from confluent_kafka import KafkaError, KafkaException

from miqps.canonical import Decision
from miqps.urls import NormalizedURL
from streams.front.loop import CanonicalizerFront, ProcessingBug
from streams.kafka.admin import ensure_topics
from streams.maps.feed import MapFeed
from streams.maps.live import LiveMaps
from streams.settings import Settings
from streams.worker.errorpolicy import OnBug
from testkit.tools import (
    TopicReader,
    delete_topics,
    isolated_settings,
    produce,
    set_max_message_bytes,
)

VALID = [f"https://shop.example/p/{i}?id={i}&utm_source=mail".encode() for i in range(40)]
LONG = f"https://shop.example/p/99?id=99&note={'n' * 3000}".encode()
REFUSING_BYTES = 2048
"""A ``max.message.bytes`` of the canonical topic that refuses :data:`LONG`'s output."""
BAD = [b"not a url", b'{"url": 7}']
BUGGY = "https://shop.example/p/17?id=17&utm_source=mail"


class Bug:
    """Makes the stream's decision raise for :data:`BUGGY` while ``present`` is set."""

    def __init__(self, live_maps: LiveMaps) -> None:
        self.present = threading.Event()
        self.present.set()
        self.raised = 0
        self._decide = live_maps.decide
        live_maps.decide = self.decide

    def decide(self, url: NormalizedURL, original: str | None = None) -> Decision:
        if self.present.is_set() and url.url == BUGGY:
            self.raised += 1
            raise AttributeError("'NoneType' object has no attribute 'keep'")
        return self._decide(url, original)


class SlowAfter:
    """Makes the first decision after ``url``'s take ``seconds``: by then the broker's
    answer to ``url``'s output has reached the producer, before the next output is sent."""

    def __init__(self, live_maps: LiveMaps, url: bytes, seconds: float) -> None:
        self.url = url.decode()
        self.seconds = seconds
        self.armed = False
        self.slowed = False
        self._decide = live_maps.decide
        live_maps.decide = self.decide

    def decide(self, url: NormalizedURL, original: str | None = None) -> Decision:
        if self.armed and not self.slowed:
            self.slowed = True
            time.sleep(self.seconds)
        if url.url == self.url:
            self.armed = True
        return self._decide(url, original)


@pytest.fixture
def isolated(bootstrap: str, tmp_path: Path) -> Iterator[Settings]:
    settings = isolated_settings(
        Settings.from_env({"KAFKA_BOOTSTRAP_SERVERS": bootstrap}),
        "front",
        tmp_path / "state",
        partitions=2,
    )
    ensure_topics(settings)
    produce(settings, settings.topics.raw, [*VALID[:20], *BAD, *VALID[20:]])
    try:
        yield settings
    finally:
        delete_topics(settings)


def start_front(
    settings: Settings, live_maps: LiveMaps, on_bug: OnBug, failures: list[BaseException]
) -> tuple[CanonicalizerFront, MapFeed]:
    feed = MapFeed(settings, live_maps, failures.append)
    front = CanonicalizerFront(
        settings.with_overrides(on_bug=on_bug.value), live_maps, feed, failures.append
    )
    feed.start()
    front.start()
    return front, feed


def wait_until(check: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return False


def assert_every_input_out_and_only_bad_input_dead(settings: Settings) -> None:
    with TopicReader(settings, settings.topics.canonical) as reader:

        def all_out() -> bool:
            reader.poll(0.2)
            return {orjson.loads(value or b"")["url"] for _, value, _ in reader.records} >= {
                url.decode() for url in VALID
            }

        assert wait_until(all_out, 60), "not every valid input came out"
    with TopicReader(settings, settings.topics.dlq) as reader:
        reader.poll(2.0)
        originals = {
            base64.b64decode(orjson.loads(value or b"")["original"])
            for _, value, _ in reader.records
        }
    assert originals == set(BAD), "only bad input is dead-lettered"


@pytest.mark.kafka
@pytest.mark.timeout(240)
def test_a_bug_stops_the_front_without_committing_then_a_fixed_front_delivers_everything(
    isolated: Settings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    failures: list[BaseException] = []
    live_maps = LiveMaps(reverify_after=3600)
    bug = Bug(live_maps)
    front, feed = start_front(isolated, live_maps, OnBug.STOP, failures)
    try:
        assert wait_until(lambda: bool(failures), 60), "the front did not stop"
        front.stop()
    finally:
        feed.stop()
    assert isinstance(failures[0], ProcessingBug)
    assert isinstance(failures[0].__cause__, AttributeError)
    stopped = [r for r in caplog.records if r.getMessage() == "canonicalizer stopped"]
    assert stopped and stopped[0].exc_info is not None, "logged with its traceback"
    assert front.counters.bugs == 1 and bug.raised == 1

    bug.present.clear()  # the fix is deployed: a new front of the same group
    failures.clear()
    front, feed = start_front(isolated, live_maps, OnBug.STOP, failures)
    try:
        assert_every_input_out_and_only_bad_input_dead(isolated)
    finally:
        front.stop()
        feed.stop()
    assert failures == []


@pytest.mark.kafka
@pytest.mark.timeout(240)
def test_with_retry_a_bug_holds_the_batch_until_it_is_gone_and_nothing_valid_is_lost(
    isolated: Settings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, "streams.front.stage")
    failures: list[BaseException] = []
    live_maps = LiveMaps(reverify_after=3600)
    bug = Bug(live_maps)
    front, feed = start_front(isolated, live_maps, OnBug.RETRY, failures)
    try:
        assert wait_until(lambda: bug.raised >= 2, 60), "the batch was not retried"
        assert failures == [] and front.counters.bugs >= 2
        bug.present.clear()
        assert_every_input_out_and_only_bad_input_dead(isolated)
    finally:
        front.stop()
        feed.stop()
    assert failures == []
    retried = [r for r in caplog.records if "MIQPS_ON_BUG=retry" in r.getMessage()]
    assert retried and retried[0].exc_info is not None, "logged with its traceback"


@pytest.mark.kafka
@pytest.mark.timeout(240)
def test_exactly_once_a_retried_bug_leaves_each_input_once_for_a_read_committed_reader(
    isolated: Settings,
) -> None:
    """The batches before the bug are in the aborted transaction too: each is read again,
    and a read_committed reader sees each output and dead letter once (at least once, the
    outputs produced before the bug in its batch come out again on every retry)."""
    exactly_once = isolated.with_overrides(processing_guarantee="exactly_once")
    failures: list[BaseException] = []
    live_maps = LiveMaps(reverify_after=3600)
    bug = Bug(live_maps)
    front, feed = start_front(exactly_once, live_maps, OnBug.RETRY, failures)
    try:
        assert wait_until(lambda: bug.raised >= 2, 60), "the batch was not retried"
        bug.present.clear()
        assert_every_input_out_and_only_bad_input_dead(exactly_once)
        with TopicReader(exactly_once, exactly_once.topics.canonical) as reader:
            reader.poll(3.0)
            outputs = Counter(orjson.loads(value or b"")["url"] for _, value, _ in reader.records)
        with TopicReader(exactly_once, exactly_once.topics.dlq) as reader:
            reader.poll(2.0)
            dead = len(reader.records)
    finally:
        front.stop()
        feed.stop()
    assert failures == []
    assert outputs == Counter(url.decode() for url in VALID), "each valid input once"
    assert dead == len(BAD), "each bad input dead-lettered once"


@pytest.mark.kafka
@pytest.mark.timeout(240)
def test_exactly_once_a_refused_output_aborts_the_transaction_and_the_front_goes_on(
    bootstrap: str, tmp_path: Path
) -> None:
    """The broker refuses an output in the middle of a batch, and the producer refuses the
    next record of the transaction: the front aborts it and reads its inputs again (it
    does not stop), until the topic takes the output; then each input comes out once."""
    settings = isolated_settings(
        Settings.from_env({"KAFKA_BOOTSTRAP_SERVERS": bootstrap}),
        "refusal",
        tmp_path / "state",
        partitions=1,
    ).with_overrides(processing_guarantee="exactly_once")
    ensure_topics(settings)
    try:
        set_max_message_bytes(settings, settings.topics.canonical, REFUSING_BYTES)
        produce(settings, settings.topics.raw, [*VALID[:10], LONG, *VALID[10:]])
        failures: list[BaseException] = []
        live_maps = LiveMaps(reverify_after=3600)
        slow = SlowAfter(live_maps, LONG, 1.0)
        front, feed = start_front(settings, live_maps, OnBug.STOP, failures)
        try:
            assert wait_until(
                lambda: front.counters.aborted_transactions >= 2 or bool(failures), 60
            ), "no transaction was aborted"
            assert failures == [], "the front stopped"
            assert slow.slowed
            set_max_message_bytes(settings, settings.topics.canonical, REFUSING_BYTES * 1024)
            with TopicReader(settings, settings.topics.canonical) as reader:

                def all_out() -> bool:
                    reader.poll(0.2)
                    return len(reader.records) >= len(VALID) + 1

                assert wait_until(all_out, 60), "not every input came out"
                reader.poll(2.0)
                outputs = Counter(
                    orjson.loads(value or b"")["url"] for _, value, _ in reader.records
                )
        finally:
            front.stop()
            feed.stop()
        assert failures == []
        assert outputs == Counter(url.decode() for url in [*VALID, LONG]), "each input once"
    finally:
        delete_topics(settings)


class Stuck:
    """Makes the decision of :data:`BUGGY` block until ``release`` is set, as a Kafka
    client call that does not return would."""

    def __init__(self, live_maps: LiveMaps) -> None:
        self.release = threading.Event()
        self.reached = threading.Event()
        self._decide = live_maps.decide
        live_maps.decide = self.decide

    def decide(self, url: NormalizedURL, original: str | None = None) -> Decision:
        if url.url == BUGGY:
            self.reached.set()
            self.release.wait()
        return self._decide(url, original)


@pytest.mark.kafka
@pytest.mark.timeout(240)
def test_a_stuck_front_says_where_and_loses_its_partitions_to_the_other_member(
    isolated: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """One front of the group is stuck in a call: it logs where, says it is stuck (its
    process then exits, for the worker to start a new one), and the group gives its
    partitions to the other front once the stuck one has not polled for
    ``max_poll_interval_ms``, so every input comes out; when the call returns, the
    stuck front is fenced and commits nothing."""
    failures: list[BaseException] = []
    stuck_maps = LiveMaps(reverify_after=3600)
    stuck = Stuck(stuck_maps)
    exactly_once = isolated.with_overrides(processing_guarantee="exactly_once")
    stuck_failures: list[BaseException] = []
    feed = MapFeed(exactly_once, stuck_maps, stuck_failures.append)
    front = CanonicalizerFront(exactly_once, stuck_maps, feed, stuck_failures.append)
    front.stall_seconds = 1.0
    front.stuck_seconds = 2.0
    front.max_poll_interval_ms = 12_000
    assert not front.stuck(), "not stuck before its loop runs"
    feed.start()
    front.start()
    other: CanonicalizerFront | None = None
    other_feed: MapFeed | None = None
    try:
        assert stuck.reached.wait(60), "the input that blocks was not reached"

        def reported() -> bool:
            front.report_stall()
            return "no batch taken" in caplog.text

        assert wait_until(reported, 30), "the stall is not reported"
        assert "decide" in caplog.text, "the stack of the stuck loop is logged"
        assert wait_until(front.stuck, 10), "a loop stuck for stuck_seconds is stuck"
        other_maps = LiveMaps(reverify_after=3600)
        other, other_feed = start_front(exactly_once, other_maps, OnBug.STOP, failures)
        assert_every_input_out_and_only_bad_input_dead(exactly_once)
    finally:
        stuck.release.set()
        for running in (front, other):
            if running is not None:
                running.stop()
        for following in (feed, other_feed):
            if following is not None:
                following.stop()
    assert failures == []
    assert all(
        isinstance(error, KafkaException) and error.args[0].code() == KafkaError._FENCED
        for error in stuck_failures
    ), f"the stuck front, once it returns, can only be fenced: {stuck_failures}"
