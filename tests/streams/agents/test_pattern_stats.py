"""The pattern-stats agent's timer, without Kafka."""

from __future__ import annotations

import asyncio

from miqps.urls import parse
from streams.agents.deadlines import DeadlineTracker
from streams.agents.pattern_stats import restore_deadlines, step_when_held
from streams.agents.pattern_stats_processor import PatternStatsProcessor
from streams.agents.shape_stats import ShapeStats
from streams.messages import Observation
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


async def test_a_shape_is_decided_only_once_its_domain_s_maps_partition_is_restored() -> None:
    """Until the restore, the live maps do not know the domain is learned: deciding then
    would ask again for patterns learned long ago."""
    learned: set[str] = set()
    restored = asyncio.Event()

    async def maps_held(domain: str) -> None:
        await restored.wait()

    processor = PatternStatsProcessor(
        POLICY, ALLOWLIST, lambda domain, pattern, basis: domain not in learned
    )
    url = parse(f"http://{LEARNED}/p?id=1&ref=x")
    observations = [Observation(LEARNED, "/p", url.pattern, url, 1, "") for _ in range(3)]
    assert processor.apply(None, observations, 0.0).deadline is not None  # without the map
    step = asyncio.ensure_future(
        step_when_held(maps_held, processor, lambda: None, observations, 0.0)
    )
    await asyncio.sleep(0.1)
    assert not step.done()
    learned.add(LEARNED)  # the restore brings the domain's map
    restored.set()
    decided = await asyncio.wait_for(step, 1.0)
    assert decided.request is None and decided.deadline is None
