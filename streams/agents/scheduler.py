"""Scheduling probe requests: one learning run per domain at a time, at most
``max_parallel`` domains at once, so a slow domain never holds up the others."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

from streams.agents.acks import OrderedAcks, Ticket
from streams.agents.probe_processor import ProbeOutcome
from streams.messages import ProbeRequest

MAX_PARALLEL_DOMAINS = 16
GATHER_SECONDS = 0.5

Publish = Callable[[ProbeOutcome], Awaitable[None]]
Guard = Callable[[Callable[[], Awaitable[None]], str], Awaitable[None]]
"""Runs work under the error policy (``BugPolicy.run``): returns once the work succeeded."""


class Prober(Protocol):
    async def handle(
        self, requests: Iterable[ProbeRequest], publish: Publish | None = None
    ) -> list[ProbeOutcome]: ...


class DomainScheduler:
    """Requests of a domain that is being learned wait and are merged into its next run."""

    def __init__(
        self,
        probing: Prober,
        publish: Publish,
        acks: OrderedAcks,
        guard: Guard,
        max_parallel: int = MAX_PARALLEL_DOMAINS,
        gather_seconds: float = GATHER_SECONDS,
    ) -> None:
        self.probing = probing
        self.publish = publish
        self.acks = acks
        self.guard = guard
        self.gather_seconds = gather_seconds
        self.failure: Exception | None = None
        self._queued: dict[str, list[tuple[ProbeRequest, Ticket]]] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._slots = asyncio.Semaphore(max_parallel)

    def submit(self, request: ProbeRequest, ticket: Ticket) -> None:
        self._queued.setdefault(request.domain, []).append((request, ticket))
        if request.domain not in self._tasks:
            self._tasks[request.domain] = asyncio.ensure_future(self._run(request.domain))

    async def _run(self, domain: str) -> None:
        """Requests of a domain that arrive together (one burst of samples usually asks for
        several shapes) wait ``gather_seconds`` to be learned in one run. The events that
        asked are acknowledged only after the run's outcomes were handed to ``publish``."""
        try:
            await asyncio.sleep(self.gather_seconds)
            async with self._slots:
                while domain in self._queued:
                    batch = self._queued.pop(domain)

                    async def learn(batch: list[tuple[ProbeRequest, Ticket]] = batch) -> None:
                        await self.probing.handle([request for request, _ in batch], self.publish)

                    await self.guard(learn, f"probe {domain}")
                    for _, ticket in batch:
                        await self.acks.done(ticket)
        except Exception as error:  # outside the guard: acknowledging failed
            self.failure = error
            raise
        finally:
            del self._tasks[domain]

    def load(self) -> tuple[int, int]:
        """(requests waiting for their domain's next run, domains with a run due or under way)."""
        return sum(len(queued) for queued in self._queued.values()), len(self._tasks)

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
