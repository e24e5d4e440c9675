"""The probing agent: probe requests -> ``miqps.maps`` (whole domain map) + ``miqps.map-updates``.

Domains are learned concurrently, one run per domain at a time: requests for a domain that
is being learned wait and are merged into its next run, so a slow domain never holds up the
others. Acknowledgements stay in offset order within each partition (an event is acked
only when it and every earlier event of its partition are done): Faust 0.15 can commit past
an unacked offset when acks arrive out of order (faust-streaming issue #606). Maps and audit
records are handed to the producer before the events that asked for them are acked, and
Faust flushes the producer before it commits.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import cast

import faust
import orjson
from faust.types import TP, EventT

from miqps.fetch import FetchConfig, Fetcher
from streams.codecs import BadInput, Source, decode_document, encode_dead_letter
from streams.probing import ProbeOutcome, Probing
from streams.runtime import Runtime
from streams.stats import ProbeRequest
from streams.tables import PROBE_DEMAND_TABLE, rocksdb_options
from streams.topics import raw_topic

log = logging.getLogger(__name__)

MAX_PARALLEL_DOMAINS = 16
GATHER_SECONDS = 0.5
MAX_EVENTS_IN_FLIGHT = 2000


def fetch_config(runtime: Runtime) -> FetchConfig:
    settings = runtime.settings
    return FetchConfig(
        proxy=settings.proxy,
        allow_private=settings.allow_private,
        per_host_concurrency=settings.probe_concurrency_per_host,
        per_host_rate=settings.probe_rate_per_host,
        timeout=settings.probe_timeout,
    )


class Ticket:
    __slots__ = ("done", "event")

    def __init__(self, event: EventT[bytes]) -> None:
        self.event = event
        self.done = False


class OrderedAcks:
    """Acks events per partition in offset order, in whatever order their work finishes."""

    def __init__(self, ack: Callable[[EventT[bytes]], Awaitable[bool]]) -> None:
        self._ack = ack
        self._pending: dict[TP, deque[Ticket]] = {}

    def __len__(self) -> int:
        return sum(len(queue) for queue in self._pending.values())

    def track(self, event: EventT[bytes]) -> Ticket:
        ticket = Ticket(event)
        self._pending.setdefault(event.message.tp, deque()).append(ticket)
        return ticket

    async def done(self, ticket: Ticket) -> None:
        ticket.done = True
        queue = self._pending.get(ticket.event.message.tp)
        while queue and queue[0].done:
            await self._ack(queue.popleft().event)


class DomainScheduler:
    """One learning run per domain at a time, at most ``max_parallel`` domains at once."""

    def __init__(
        self,
        probing: Probing,
        publish: Callable[[ProbeOutcome], Awaitable[None]],
        acks: OrderedAcks,
        max_parallel: int = MAX_PARALLEL_DOMAINS,
    ) -> None:
        self.probing = probing
        self.publish = publish
        self.acks = acks
        self.failure: BaseException | None = None
        self._queued: dict[str, list[tuple[ProbeRequest, Ticket]]] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._slots = asyncio.Semaphore(max_parallel)

    def submit(self, request: ProbeRequest, ticket: Ticket) -> None:
        self._queued.setdefault(request.domain, []).append((request, ticket))
        if request.domain not in self._tasks:
            task = asyncio.ensure_future(self._run(request.domain))
            self._tasks[request.domain] = task

    async def _run(self, domain: str) -> None:
        """Requests of a domain that arrive together (one burst of samples usually asks for
        several shapes) wait ``GATHER_SECONDS`` to be learned in one run, smallest first."""
        try:
            await asyncio.sleep(GATHER_SECONDS)
            async with self._slots:
                while domain in self._queued:
                    batch = self._queued.pop(domain)
                    await self.probing.handle([request for request, _ in batch], self.publish)
                    for _, ticket in batch:
                        await self.acks.done(ticket)
        except BaseException as error:
            self.failure = error
            raise
        finally:
            del self._tasks[domain]

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


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
    maps_topic = raw_topic(app, settings.topics.maps)
    updates_topic = raw_topic(app, settings.topics.map_updates)
    dlq_topic = raw_topic(app, settings.topics.dlq)

    async def dead_letter(event: EventT[bytes], reason: str) -> None:
        message = event.message
        record = encode_dead_letter(
            reason, message.value, message.key,
            Source(message.topic, message.partition, message.offset,
                   int(message.timestamp * 1000) if message.timestamp else None),
            "probe", settings.topic_max_message_bytes // 2,
        )
        await dlq_topic.send(key=message.key or b"", value=record)

    async def publish(outcome: ProbeOutcome) -> None:
        key = outcome.domain.encode()
        if outcome.published is not None:
            await maps_topic.send(key=key, value=outcome.published.dumps().encode())
        for audit in outcome.audits:
            await updates_topic.send(key=key, value=orjson.dumps(audit))
        if outcome.skipped:
            log.info("probe %s: already decided, skipped: %s", outcome.domain,
                     ", ".join(outcome.skipped))

    def count_demand(request: ProbeRequest) -> None:
        key = request.domain.encode()
        stored = demand.get(key)
        requests = orjson.loads(stored)["requests"] if stored else 0
        demand[key] = orjson.dumps({"requests": requests + 1, "last_at": time.time(),
                                    "patterns": len(request.patterns)})

    @app.agent(requests_topic, name="probe", concurrency=1)
    async def probe(agent_stream: faust.StreamT[bytes]) -> None:
        await runtime.maps_ready()
        stream = cast(faust.Stream[bytes], cast(faust.Stream[bytes], agent_stream).noack())
        acks = OrderedAcks(stream.ack)
        async with Fetcher(fetch_config(runtime)) as fetcher:
            probing = Probing(runtime.live_maps, fetcher, max_flip_share=settings.max_flip_share)
            scheduler = DomainScheduler(probing, publish, acks)
            try:
                async for event in stream.events():
                    if scheduler.failure is not None:
                        raise scheduler.failure
                    ticket = acks.track(event)
                    try:
                        request = ProbeRequest.from_json(
                            decode_document(event.value, "a probe request"))
                    except BadInput as error:
                        await dead_letter(event, error.reason)
                        await acks.done(ticket)
                        continue
                    except (KeyError, TypeError, ValueError) as error:
                        await dead_letter(event, f"not a probe request: {error!r}")
                        await acks.done(ticket)
                        continue
                    count_demand(request)
                    scheduler.submit(request, ticket)
                    while len(acks) >= MAX_EVENTS_IN_FLIGHT and scheduler.failure is None:
                        await asyncio.sleep(0.05)
            finally:
                await scheduler.close()
