"""The pattern-stats agent: statistics and samples of unlearned patterns, and probe requests.

The canonicalizer front forwards samples of unlearned patterns to ``miqps.pattern-samples``,
repartitioned by domain (packs of samples, each in its domains' partition), so one worker
owns each domain's statistics. The samples of one (domain, shape) in a pack are applied
with one read and one write of its record; :class:`PatternStatsProcessor` decides what to
write, what to request and when to look again, and this agent only reads, writes and sends.

Whether a pattern needs learning is read from the live maps once the maps partition of
its domain is restored in this process (:meth:`~streams.worker.ownedmaps.OwnedMaps.held`).
The records live in a RocksDB table with a changelog topic, so a restarted or rebalanced
worker gets them back from Kafka. Patterns seen once and never again still get probed, and
a request that was never answered is sent again: a timer sends a ``due`` message for the
shape when its deadline comes, through the same topic, so that it is handled in the right
partition. The timer lives in memory; after every recovery (a restart, a rebalance) the
worker scans the records of the partitions it now holds and sets it again.

Faust's consumer can drop messages of this topic around a rebalance (faust-streaming
0.15: ``Consumer._drain_messages`` marks a message read that it never handed to the
stream, then drops the copy fetched again after the rebalance's seek, and its commit can
pass the offset of a message never acknowledged; docs/STREAMS.md, known limits). So
neither a tick nor a sample is trusted to arrive: a shape whose tick was sent ticks again
after ``retry_after`` unless handling shows its record has nothing waiting for a time (an
extra tick asks nothing), and the front forwards a sample again while its pattern is still
unlearned
(:class:`~streams.front.sampler.LocalSampler`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from functools import partial
from typing import cast

import faust
import orjson
from faust.types import EventT

from miqps.urls import InvalidURL
from streams.agents import source_of
from streams.agents.deadlines import DeadlineTracker
from streams.agents.pattern_stats_processor import PatternStatsProcessor, Step
from streams.agents.shape_stats import stats_key
from streams.kafka.tables import PATTERN_STATS_TABLE, rocksdb_options
from streams.kafka.topics import raw_topic
from streams.messages import (
    BadInput,
    DeadLetter,
    DueSample,
    Observation,
    SamplePack,
    read_observation,
    read_sample_items,
)
from streams.worker.runtime import Runtime

log = logging.getLogger(__name__)

MAX_PENDING_CHANGELOG = 100
RESTORE_YIELD_EVERY = 256


async def restore_deadlines(
    records: Iterable[tuple[bytes, bytes]],
    tracker: DeadlineTracker,
    processor: PatternStatsProcessor,
    now: float,
) -> int:
    """Set the timer again for every stored shape with a pattern still waiting for a time;
    returns how many. Yields to the event loop every few records, so that a large table
    does not hold up heartbeats. A record that cannot be read is skipped: the table holds
    only what this agent wrote, and its next sample rewrites it."""
    restored = 0
    for number, (_, stored) in enumerate(records, 1):
        if number % RESTORE_YIELD_EVERY == 0:
            await asyncio.sleep(0)
        try:
            waiting = processor.deadline_of(stored, now)
        except (KeyError, TypeError, ValueError):
            log.warning("pattern-stats: unreadable record skipped in the timer scan")
            continue
        if waiting is not None:
            tracker.add(waiting.deadline, waiting.domain, waiting.shape)
            restored += 1
    return restored


async def step_when_held(
    maps_held: Callable[[str], Awaitable[None]],
    processor: PatternStatsProcessor,
    stored: Callable[[], bytes | None],
    observations: Sequence[Observation],
    now: float,
) -> Step:
    """The step of one (domain, shape), once ``maps_held`` says the live maps hold the
    domain's map: what is learned already is read from them, and a map not restored yet
    would ask for patterns learned long ago. ``stored`` reads its record then."""
    await maps_held(observations[0].domain)
    return processor.apply(stored(), observations, now)


def register(app: faust.App, runtime: Runtime) -> None:
    settings = runtime.settings
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
    bugs = runtime.bug_policy()
    processor = PatternStatsProcessor(
        settings.policy, live_maps.layers.allowlist, live_maps.needs_learning
    )

    @table.on_recover
    async def restore_timer() -> None:
        restored = await restore_deadlines(table.items(), tracker, processor, time.time())
        log.info("pattern-stats: time limits set again for %d shapes after recovery", restored)

    async def dead_letter(event: EventT[bytes], reason: str, original: bytes | None = None) -> None:
        message = event.message
        record = DeadLetter.of(
            reason,
            original if original is not None else message.value,
            message.key,
            source_of(message),
            "pattern-stats",
            settings.topic_max_message_bytes // 2,
        )
        await dlq_topic.send(key=message.key or b"", value=record.to_bytes())

    async def handle(event: EventT[bytes]) -> None:
        try:
            items = read_sample_items(event.value)
        except BadInput as error:
            await dead_letter(event, error.reason)
            return
        groups: dict[bytes, list[Observation]] = {}
        for item in items:
            try:
                observation = read_observation(item)
            except (BadInput, InvalidURL) as error:
                await dead_letter(event, error.reason, orjson.dumps(item))
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
        step = await step_when_held(
            runtime.maps.held, processor, partial(table.get, key), observations, now
        )
        if step.request is not None:
            await probe_topic.send(key=domain.encode(), value=step.request.to_bytes())
            patterns = step.request.patterns
            log.info(
                "probe requested: %s %s (%s)",
                domain,
                ", ".join(sorted(patterns)),
                ", ".join(sorted({info.reason for info in patterns.values()})),
            )
        if step.record is not None:
            table[key] = step.record
        if step.deadline is None:
            tracker.discard(domain, shape)  # a sent tick's follow-up too: it was handled
        else:
            tracker.add(step.deadline, domain, shape)

    sweep_every = max(
        0.5, min(10.0, min(settings.policy.rare_after, settings.policy.retry_after) / 4)
    )

    async def send_due_ticks() -> None:
        while True:
            await asyncio.sleep(sweep_every)
            now = time.time()
            for domain, shape in tracker.pop_due(now):
                tick = SamplePack((DueSample(domain, shape),))
                await samples_topic.send(key=domain.encode(), value=tick.to_bytes())
                # Again, unless the tick is handled before (a tick can be lost).
                tracker.add(now + settings.policy.retry_after, domain, shape)

    @app.agent(samples_topic, name="pattern-stats", concurrency=1)
    async def pattern_stats(agent_stream: faust.StreamT[bytes]) -> None:
        await runtime.maps_ready()
        stream = cast(faust.Stream[bytes], cast(faust.Stream[bytes], agent_stream).noack())
        sweeper = asyncio.ensure_future(send_due_ticks())
        try:
            async for event in stream.events():
                await bugs.run(
                    partial(handle, event),
                    f"pattern-stats at {event.message.tp}:{event.message.offset}",
                )
                await stream.ack(event)
        finally:
            sweeper.cancel()
