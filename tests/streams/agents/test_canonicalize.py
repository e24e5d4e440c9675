"""The pattern-stats agent's timer, without Kafka."""

from __future__ import annotations

from miqps.urls import parse
from streams.agents.canonicalize import DeadlineTracker, restore_deadlines
from streams.settings import LearningPolicy
from streams.stats import ShapeStats

POLICY = LearningPolicy(rare_after=100.0)
ALLOWLIST: frozenset[str] = frozenset()


def test_deadlines_come_due_earliest_first_whatever_the_order_they_were_set_in() -> None:
    tracker = DeadlineTracker()
    tracker.add(30.0, "late.example", "/a")
    tracker.add(10.0, "early.example", "/b")
    tracker.add(20.0, "middle.example", "/c")
    assert tracker.pop_due(15.0) == [("early.example", "/b")]
    assert tracker.pop_due(40.0) == [("middle.example", "/c"), ("late.example", "/a")]
    assert len(tracker) == 0


def stats_record(domain: str, first_seen: float, requested_at: float | None) -> bytes:
    stats = ShapeStats(domain, "/p")
    url = parse(f"http://{domain}/p?id=1&ref=x")
    stats.observe(url.pattern, url, 1, "", first_seen, POLICY, ALLOWLIST)
    if requested_at is not None:
        stats.request({url.pattern: "time-limit"}, requested_at)
    return stats.dumps()


async def test_a_restore_sets_the_timer_again_only_for_shapes_still_waiting() -> None:
    records = [
        (b"a", stats_record("waiting.example", 1000.0, None)),
        (b"b", stats_record("requested.example", 1000.0, 1100.0)),
        (b"c", b"not a stats record"),
    ]
    tracker = DeadlineTracker()
    assert await restore_deadlines(records, tracker, POLICY) == 1
    assert tracker.pop_due(1099.0) == []
    assert tracker.pop_due(1100.0) == [("waiting.example", "/p")]
