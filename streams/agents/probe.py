"""The probing agent: probe requests -> ``miqps.maps`` (whole domain map, and its version on
``miqps.map-history``) + ``miqps.map-updates``, taking pages from the observations a crawler
sent (:mod:`streams.agents.observe`) before it fetches them; a learning run first waits,
for a while at most, for the restore of its domain's observations partition
(:mod:`streams.agents.observe_restore`).

A run reads its domain's map only once the maps partition of the domain is restored in
this process (:meth:`~streams.worker.ownedmaps.OwnedMaps.held`), so a domain learned before
is never taken for one without a map. Domains are learned concurrently, one run per
domain at a time (:class:`DomainScheduler`).
Acknowledgements stay in offset order within each partition (:class:`OrderedAcks`). Maps
and audit records are handed to the producer before the events that asked for them are
acked, and Faust flushes the producer before it commits; exactly once, a map's records are
committed in one Kafka transaction first (:func:`streams.maps.history.write`). A request
that cannot be read goes to the dead-letter topic; a bug of ours follows the error policy
(``MIQPS_ON_BUG``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from functools import partial
from typing import cast

import faust
import orjson
from faust.types import EventT

from miqps.fetch import Fetcher
from miqps.observations import ObservedPages, RecalledPages
from streams.agents import observe, source_of
from streams.agents.acks import OrderedAcks, Ticket
from streams.agents.probe_processor import ProbeOutcome, Probing
from streams.agents.scheduler import DomainScheduler
from streams.kafka.tables import PROBE_DEMAND_TABLE, rocksdb_options
from streams.kafka.topics import raw_topic
from streams.maps.history import (
    FaustSink,
    Publication,
    probe_producer,
    publish_map,
    transactional_writer,
    write,
)
from streams.messages import BadInput, DeadLetter, ProbeRequest
from streams.ops.metrics import ProbeAgentState
from streams.worker.runtime import Runtime

log = logging.getLogger(__name__)

MAX_EVENTS_IN_FLIGHT = 2000
PUBLICATION_PATIENCE = 120.0
"""Exactly once, how long a map publication Kafka failed is written again (a broker
restarting, a partition's leader moving) before it counts as a bug of the probe run."""


def register(app: faust.App, runtime: Runtime) -> None:
    settings = runtime.settings
    requests_topic = raw_topic(app, settings.topics.probe_requests)
    demand = app.Table(
        PROBE_DEMAND_TABLE,
        partitions=runtime.partitions[settings.topics.probe_requests],
        key_type=bytes,
        value_type=bytes,
        options=rocksdb_options(settings),
        help="Per domain: probe requests received and when the last one came. Besides "
        "monitoring, it gives every role's app a changelogged table: Faust uses its "
        "own assignor only for such apps (round-robin otherwise), and workers whose "
        "assignors differ cannot share a consumer group.",
    )
    sink = FaustSink(app)
    writer = transactional_writer(
        settings, "probe", patience=PUBLICATION_PATIENCE, fences_predecessor=True
    )
    dlq_topic = raw_topic(app, settings.topics.dlq)

    async def dead_letter(event: EventT[bytes], reason: str) -> None:
        message = event.message
        record = DeadLetter.of(
            reason,
            message.value,
            message.key,
            source_of(message),
            "probe",
            settings.topic_max_message_bytes // 2,
        )
        await dlq_topic.send(key=message.key or b"", value=record.to_bytes())

    async def publish(outcome: ProbeOutcome) -> None:
        key = outcome.domain.encode()
        publication = Publication()
        if outcome.published is not None:
            await publish_map(
                publication, settings.topics, outcome.published, *probe_producer(outcome.audits)
            )
        for audit in outcome.audits:
            await publication.send(settings.topics.map_updates, key, audit.to_bytes())
        await write(publication, sink, writer)
        runtime.metrics.map_updates.count(outcome.audits)
        if outcome.audit is not None or outcome.audit_requests:
            runtime.metrics.audits.count(outcome.audit, outcome.audit_requests)
        if outcome.skipped:
            log.info(
                "probe %s: already decided, skipped: %s", outcome.domain, ", ".join(outcome.skipped)
            )

    def count_demand(request: ProbeRequest) -> None:
        key = request.domain.encode()
        stored = demand.get(key)
        requests = orjson.loads(stored)["requests"] if stored else 0
        demand[key] = orjson.dumps(
            {"requests": requests + 1, "last_at": time.time(), "patterns": len(request.patterns)}
        )

    bugs = runtime.bug_policy()
    pages = ObservedPages(settings.observed_pages) if settings.observed_pages else None
    recalled = (
        RecalledPages(settings.recalled_pages, settings.recall_seconds)
        if settings.recalled_pages and settings.recall_seconds
        else None
    )
    restores = observe.register(app, runtime, pages, dead_letter) if pages is not None else None

    @app.agent(requests_topic, name="probe", concurrency=1)
    async def probe(agent_stream: faust.StreamT[bytes]) -> None:
        await runtime.maps_ready()
        stream = cast(faust.Stream[bytes], cast(faust.Stream[bytes], agent_stream).noack())
        acks = OrderedAcks(stream.ack)
        async with Fetcher(settings.fetch) as fetcher:
            probing = Probing(
                runtime.live_maps,
                fetcher,
                config=settings.learn,
                max_flip_share=settings.max_flip_share,
                audit_share=settings.audit_share,
                observations=pages,
                observed_samples=settings.policy.max_pool_urls,
                recalled=recalled,
                maps_held=runtime.maps.held,
                observations_held=restores.held if restores is not None else None,
            )
            scheduler = DomainScheduler(probing, publish, acks, bugs.run)
            runtime.metrics.follow_probing(
                ProbeAgentState(scheduler, acks.__len__, fetcher.stats, recalled)
            )

            async def take(event: EventT[bytes], ticket: Ticket) -> None:
                try:
                    request = ProbeRequest.from_bytes(event.value)
                except BadInput as error:
                    await dead_letter(event, error.reason)
                    await acks.done(ticket)
                    return
                count_demand(request)
                scheduler.submit(request, ticket)

            try:
                async for event in stream.events():
                    if scheduler.failure is not None:
                        raise scheduler.failure
                    ticket = acks.track(event)
                    await bugs.run(
                        partial(take, event, ticket),
                        f"probe request at {event.message.tp}:{event.message.offset}",
                    )
                    while len(acks) >= MAX_EVENTS_IN_FLIGHT and scheduler.failure is None:
                        await asyncio.sleep(0.05)
            finally:
                await scheduler.close()
                if writer is not None:
                    writer.close()
