"""The pattern-stats agent: statistics and samples of unlearned patterns, and probe requests.

The canonicalizer front forwards samples of unlearned patterns to ``miqps.pattern-samples``,
repartitioned by domain (packs of samples, each in its domains' partition), so one worker
owns each domain's statistics. The samples of one (domain, shape) in a pack are applied
with one read and one write of its record.
They live in a RocksDB table with a changelog topic, so a restarted or rebalanced worker
gets them back from Kafka. Patterns seen once and never again still get probed: a timer
sends a ``due`` message for them after ``rare_after`` seconds, through the same topic, so
that it is handled in the right partition. The timer lives in memory; after every
recovery (a restart, a rebalance) the worker scans the records of the partitions it now
holds and sets it again for the shapes whose patterns still wait for their time limit.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections.abc import Iterable

import faust
import orjson
from faust.types import EventT

from miqps.urls import InvalidURL
from streams.codecs import BadInput, Source, encode_dead_letter
from streams.runtime import Runtime
from streams.settings import LearningPolicy
from streams.stats import Observation, ShapeStats, decode_samples, read_observation, stats_key
from streams.tables import PATTERN_STATS_TABLE, rocksdb_options
from streams.topics import raw_topic

log = logging.getLogger(__name__)

MAX_TRACKED_DEADLINES = 100_000
MAX_PENDING_CHANGELOG = 100
RESTORE_YIELD_EVERY = 256


class DeadlineTracker:
    """Shapes waiting for their time limit, earliest deadline first."""

    def __init__(self, max_entries: int = MAX_TRACKED_DEADLINES) -> None:
        self.max_entries = max_entries
        self._heap: list[tuple[float, str, str]] = []

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, deadline: float, domain: str, shape: str) -> None:
        if len(self._heap) < self.max_entries:
            heapq.heappush(self._heap, (deadline, domain, shape))

    def pop_due(self, now: float) -> list[tuple[str, str]]:
        due: list[tuple[str, str]] = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, domain, shape = heapq.heappop(heap)
            due.append((domain, shape))
        return due


async def restore_deadlines(
    records: Iterable[tuple[bytes, bytes]], tracker: DeadlineTracker, policy: LearningPolicy
) -> int:
    """Set the timer again for every stored shape with a pattern still waiting for its
    time limit; returns how many. Yields to the event loop every few records, so that a
    large table does not hold up heartbeats."""
    restored = 0
    for number, (_, stored) in enumerate(records, 1):
        if number % RESTORE_YIELD_EVERY == 0:
            await asyncio.sleep(0)
        try:
            stats = ShapeStats.loads(stored)
        except (KeyError, TypeError, ValueError):
            continue
        deadline = stats.time_limit(policy)
        if deadline is not None:
            tracker.add(deadline, stats.domain, stats.shape)
            restored += 1
    return restored


def register(app: faust.App, runtime: Runtime) -> None:
    settings = runtime.settings
    policy = settings.policy
    allowlist = runtime.live_maps.layers.allowlist
    partitions = runtime.partitions[settings.topics.samples]
    samples_topic = raw_topic(app, settings.topics.samples, partitions)
    probe_topic = raw_topic(app, settings.topics.probe_requests)
    dlq_topic = raw_topic(app, settings.topics.dlq)
    table = app.Table(
        PATTERN_STATS_TABLE,
        partitions=partitions,
        key_type=bytes,
        value_type=bytes,
        options=rocksdb_options(settings),
        help="Per (domain, path shape): pattern counts, distinct values, sample URLs.",
    )
    tracker = DeadlineTracker()
    live_maps = runtime.live_maps

    @table.on_recover
    async def restore_timer() -> None:
        restored = await restore_deadlines(table.items(), tracker, policy)
        log.info("pattern-stats: time limits set again for %d shapes after recovery", restored)

    def needs_learning(domain: str, pattern: str, basis: str) -> bool:
        compiled = live_maps.get(domain)
        rule = compiled.rules.get(pattern) if compiled is not None else None
        if rule is None:
            return True
        return bool(basis) and rule.decided_at == basis

    async def dead_letter(event: EventT[bytes], reason: str,
                          original: bytes | None = None) -> None:
        message = event.message
        record = encode_dead_letter(
            reason, original if original is not None else message.value, message.key,
            Source(message.topic, message.partition, message.offset,
                   int(message.timestamp * 1000) if message.timestamp else None),
            "pattern-stats", settings.topic_max_message_bytes // 2,
        )
        await dlq_topic.send(key=message.key or b"", value=record)

    async def handle(event: EventT[bytes]) -> None:
        try:
            items = decode_samples(event.value)
        except BadInput as error:
            await dead_letter(event, error.reason)
            return
        groups: dict[bytes, list[Observation]] = {}
        for item in items:
            try:
                observation = read_observation(item)
            except (BadInput, InvalidURL, KeyError, TypeError, ValueError) as error:
                reason = getattr(error, "reason", None) or f"bad sample: {error!r}"
                await dead_letter(event, reason, orjson.dumps(item))
                continue
            key = stats_key(observation.domain, observation.shape)
            groups.setdefault(key, []).append(observation)
        now = time.time()
        for key, observations in groups.items():
            await update(key, observations, now)
            await changelog_ebb(MAX_PENDING_CHANGELOG)
        await changelog_ebb(0)

    async def changelog_ebb(limit: int) -> None:
        """Keep the changelog writes buffered in Faust's producer bounded (memory), and let
        them drain after each pack: Faust flushes that buffer before it commits, and a
        buffer that never empties would keep offsets from being committed."""
        buffer = app.producer.buffer
        deadline = time.monotonic() + 10.0
        while buffer.size > limit and time.monotonic() < deadline:
            await asyncio.sleep(0.002)

    async def update(key: bytes, observations: list[Observation], now: float) -> None:
        domain, shape = observations[0].domain, observations[0].shape
        stored = table.get(key)
        stats = ShapeStats.loads(stored) if stored else ShapeStats(domain, shape)
        started = False
        triggers: list[str | None] = []
        for observation in observations:
            if observation.pattern:
                started |= stats.observe(observation.pattern, observation.url,
                                         observation.count, observation.basis, now, policy,
                                         allowlist)
                triggers.append(observation.pattern)
            else:
                triggers.append(None)
        due: dict[str, str] = {}
        for trigger in dict.fromkeys(triggers):
            due = stats.due(now, policy, allowlist,
                            lambda key_, basis_: needs_learning(domain, key_, basis_), trigger)
            if due:
                break
        if due:
            request = stats.request(due, now)
            await probe_topic.send(key=domain.encode(), value=request.dumps())
            log.info("probe requested: %s %s (%s)", domain, ", ".join(sorted(due)),
                     ", ".join(sorted(set(due.values()))))
        if due or any(triggers):  # a bare time-limit tick that asks nothing changes nothing
            table[key] = stats.dumps()
        if started:
            tracker.add(now + policy.rare_after, domain, shape)

    sweep_every = max(0.5, min(10.0, policy.rare_after / 4))

    async def send_due_ticks() -> None:
        while True:
            await asyncio.sleep(sweep_every)
            for domain, shape in tracker.pop_due(time.time()):
                tick = orjson.dumps([{"kind": "due", "domain": domain, "shape": shape}])
                await samples_topic.send(key=domain.encode(), value=tick)

    @app.agent(samples_topic, name="pattern-stats", concurrency=1)
    async def pattern_stats(stream: faust.StreamT[bytes]) -> None:
        await runtime.maps_ready()
        sweeper = asyncio.ensure_future(send_due_ticks())
        try:
            async for event in stream.events():
                try:
                    await handle(event)
                except (KeyError, TypeError, ValueError, AttributeError) as error:
                    log.exception("pattern-stats: cannot handle %s", event.message.tp)
                    await dead_letter(event, f"pattern-stats failed: {error!r}")
        finally:
            sweeper.cancel()
