"""The observing agent: ``miqps.observations`` -> the probing worker's observed pages.

A crawler sends what it fetched (:mod:`miqps.observations` says the record); the probing
agent of the same worker then takes a URL's first page from there instead of fetching it.
The topic is keyed by domain, like the probe requests, so a domain's observations reach the
worker that probes it. The pages are held in memory (``MIQPS_OBSERVED_PAGES`` at most), each
filed under the partition it was read from. A record that is not an observation goes to the
dead-letter topic with its reason.

The agent reads on from its group's committed offset; what comes before it in a partition
the process is assigned (observations sent before the worker started, or while another
worker owned their domain's partition) is read again by a restore
(:mod:`streams.agents.observe_restore`), and a partition given up has its pages dropped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, cast

import faust
from faust.types import TP, EventT

from miqps.observations import InvalidObservation, ObservedPages, read_observation
from streams.agents.observe_restore import KafkaPartitionReader, ObservationRestores
from streams.kafka.topics import raw_topic
from streams.ops.metrics import ObservationCounts
from streams.worker.runtime import Runtime

DeadLetter = Callable[[EventT[bytes], str], Awaitable[None]]


def register(
    app: faust.App, runtime: Runtime, pages: ObservedPages, dead_letter: DeadLetter
) -> ObservationRestores:
    """Register the observing agent, and the restores of its partitions (returned: the
    probing agent waits for them, :meth:`ObservationRestores.held`)."""
    settings = runtime.settings
    counts = runtime.metrics.follow_observations(pages)
    max_bytes = settings.fetch.max_bytes
    topic = settings.topics.observations
    restores = ObservationRestores(
        topic,
        runtime.partitions[topic],
        pages,
        counts,
        max_bytes,
        lambda: KafkaPartitionReader(settings, topic),
        patience=settings.observations_restore_wait,
    )
    runtime.on_stop.append(restores.stop)

    async def restore_assigned(sender: Any, /, *args: Any, signal: Any, **_: Any) -> None:
        assigned: set[TP] = args[0]
        restores.assigned(assigned)

    app.on_partitions_assigned.connect(restore_assigned)

    @app.agent(raw_topic(app, settings.topics.observations), name="observe", concurrency=1)
    async def observe(agent_stream: faust.StreamT[bytes]) -> None:
        stream = cast(faust.Stream[bytes], agent_stream)
        async for event in stream.events():
            await take(event, pages, counts, max_bytes, dead_letter)

    return restores


async def take(
    event: EventT[bytes],
    pages: ObservedPages,
    counts: ObservationCounts,
    max_bytes: int,
    dead_letter: DeadLetter,
) -> None:
    """Keep the page of one record, filed under its partition, or dead-letter it. A body is
    parsed off the event loop, as a probe's page is."""
    try:
        observation = await asyncio.to_thread(read_observation, event.value, max_bytes=max_bytes)
    except InvalidObservation as error:
        counts.by_outcome["invalid"] += 1
        await dead_letter(event, error.reason)
        return
    kept = pages.add(observation, event.message.partition)
    counts.by_outcome["kept" if kept else "no evidence"] += 1
