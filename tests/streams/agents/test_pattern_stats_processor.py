"""The pattern-stats decisions, without a broker: what to store, what to ask, when to tick."""

from __future__ import annotations

from miqps.urls import parse, split_pattern
from streams.agents.pattern_stats_processor import MIN_TICK_DELAY, PatternStatsProcessor, Step
from streams.agents.shape_stats import ENOUGH_SAMPLES, RETRY, TIME_LIMIT, ShapeStats
from streams.messages import Observation
from streams.settings import LearningPolicy

POLICY = LearningPolicy(
    min_distinct_values=3, saturation_urls=10, rare_after=60.0, retry_after=20.0
)
DOMAIN = "a.example"


class Maps:
    """Which patterns the live map has learned."""

    def __init__(self) -> None:
        self.learned: set[str] = set()

    def needs_learning(self, domain: str, pattern: str, basis: str) -> bool:
        return pattern not in self.learned


def seen(*urls: str) -> list[Observation]:
    observations = []
    for text in urls:
        url = parse(text)
        observations.append(
            Observation(DOMAIN, split_pattern(url.pattern)[0], url.pattern, url, 1, "")
        )
    return observations


def tick(shape: str = "/p") -> list[Observation]:
    return [Observation(DOMAIN, shape, "", None, 0, "")]


def run(
    processor: PatternStatsProcessor,
    stored: bytes | None,
    observations: list[Observation],
    now: float,
) -> tuple[bytes | None, Step]:
    step = processor.apply(stored, observations, now)
    return (step.record if step.record is not None else stored), step


def test_a_pattern_seen_once_is_asked_for_at_its_time_limit() -> None:
    processor = PatternStatsProcessor(POLICY, frozenset(), Maps().needs_learning)
    stored, step = run(processor, None, seen("http://a.example/p?id=1&ref=x"), 100.0)
    assert step.record is not None and step.request is None
    assert step.deadline == 160.0
    stored, step = run(processor, stored, tick(), 160.0)
    assert step.request is not None
    assert step.request.patterns["/p?id&ref"].reason == TIME_LIMIT
    assert step.request.urls == ("http://a.example/p?id=1&ref=x",)
    assert step.record is not None and step.deadline == 180.0


def test_an_unanswered_request_is_sent_again_later_each_time_until_it_is_answered() -> None:
    maps = Maps()
    processor = PatternStatsProcessor(POLICY, frozenset(), maps.needs_learning)
    stored, _ = run(processor, None, seen("http://a.example/p?id=1"), 0.0)
    sent = []
    now = 60.0
    for _ in range(4):
        stored, step = run(processor, stored, tick(), now)
        assert step.request is not None and step.deadline is not None
        sent.append((now, step.request.patterns["/p?id"].reason))
        stored, early = run(processor, stored, tick(), step.deadline - 1.0)
        assert early.request is None and early.record is None, "a tick too early asks nothing"
        now = step.deadline
    assert sent == [(60.0, TIME_LIMIT), (80.0, RETRY), (120.0, RETRY), (200.0, RETRY)]
    maps.learned.add("/p?id")
    stored, step = run(processor, stored, tick(), 1000.0)
    assert step == Step(None, None, None), "answered: nothing to ask, write or wait for"


def test_a_pattern_with_enough_distinct_values_is_asked_for_at_once_with_its_siblings() -> None:
    processor = PatternStatsProcessor(POLICY, frozenset(), Maps().needs_learning)
    stored, step = run(
        processor, None, seen("http://a.example/p?id=1&utm=a", "http://a.example/p?id=2&utm=b"), 0.0
    )
    assert step.request is None
    stored, step = run(
        processor, stored, seen("http://a.example/p?id=3&utm=c", "http://a.example/p?id=4"), 1.0
    )
    assert step.request is not None
    assert {pattern: info.reason for pattern, info in step.request.patterns.items()} == {
        "/p?id": ENOUGH_SAMPLES,
        "/p?id&utm": ENOUGH_SAMPLES,
    }
    assert step.deadline == 21.0
    stored, step = run(processor, stored, seen("http://a.example/p?id=5&utm=d"), 2.0)
    assert step.request is None, "one request, never a storm"
    assert step.record is not None, "the new sighting is counted"


def test_a_deadline_in_the_past_is_moved_to_just_after_now() -> None:
    processor = PatternStatsProcessor(POLICY, frozenset(), Maps().needs_learning)
    stored, _ = run(processor, None, seen("http://a.example/p?id=1&x=1"), 0.0)
    stored, step = run(processor, stored, seen("http://a.example/p?id=2&y=1"), 100.0)
    assert step.request is None, "the sighting of /p?id&y does not ask for it yet"
    assert step.deadline == 100.0 + MIN_TICK_DELAY, "/p?id&x is past its time limit"
    _, step = run(processor, stored, tick(), step.deadline)
    assert step.request is not None and set(step.request.patterns) == {"/p?id&x"}


def test_the_record_written_is_the_state_the_next_step_reads() -> None:
    processor = PatternStatsProcessor(POLICY, frozenset(), Maps().needs_learning)
    stored, _ = run(processor, None, seen("http://a.example/p?id=1"), 0.0)
    stored, _ = run(processor, stored, tick(), 60.0)
    assert stored is not None
    stats = ShapeStats.loads(stored)
    assert stats.patterns["/p?id"].requested_at == 60.0
    assert stats.patterns["/p?id"].requests == 1
    shape_deadline = processor.deadline_of(stored, 0.0)
    assert shape_deadline is not None
    assert (shape_deadline.domain, shape_deadline.shape, shape_deadline.deadline) == (
        DOMAIN,
        "/p",
        80.0,
    )
