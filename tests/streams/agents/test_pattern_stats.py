"""The pattern-stats agent's timer, without Kafka."""

from __future__ import annotations

from miqps.urls import parse
from streams.agents.deadlines import DeadlineTracker
from streams.agents.pattern_stats import restore_deadlines
from streams.agents.pattern_stats_processor import PatternStatsProcessor
from streams.agents.shape_stats import ShapeStats
from streams.settings import LearningPolicy

POLICY = LearningPolicy(rare_after=100.0, retry_after=50.0)
ALLOWLIST: frozenset[str] = frozenset()
LEARNED = "learned.example"


def unless_learned(domain: str, pattern: str, basis: str) -> bool:
    return domain != LEARNED


def stats_record(domain: str, first_seen: float, requested_at: float | None) -> bytes:
    stats = ShapeStats(domain, "/p")
    url = parse(f"http://{domain}/p?id=1&ref=x")
    stats.observe(url.pattern, url, 1, "", first_seen, POLICY, ALLOWLIST)
    if requested_at is not None:
        stats.request({url.pattern: "time-limit"}, requested_at)
    return stats.dumps()


async def test_a_restore_sets_the_timer_again_for_shapes_waiting_for_a_time() -> None:
    records = [
        (b"a", stats_record("waiting.example", 1000.0, None)),
        (b"b", stats_record("requested.example", 1000.0, 1100.0)),
        (b"c", stats_record(LEARNED, 1000.0, 1100.0)),
        (b"d", b"not a stats record"),
    ]
    tracker = DeadlineTracker()
    processor = PatternStatsProcessor(POLICY, ALLOWLIST, unless_learned)
    assert await restore_deadlines(records, tracker, processor, now=0.0) == 2
    assert tracker.pop_due(1099.0) == []
    assert tracker.pop_due(1100.0) == [("waiting.example", "/p")]
    assert tracker.pop_due(1149.0) == []
    assert tracker.pop_due(1150.0) == [("requested.example", "/p")], "its answer may be lost"
    assert len(tracker) == 0
