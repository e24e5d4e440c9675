"""Acknowledging events in offset order within each partition, whatever order their work
finishes in: Faust 0.15 can commit past an unacknowledged offset when acks arrive out of
order (faust-streaming issue #606)."""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from faust.types import TP, EventT


class Ticket:
    __slots__ = ("done", "event")

    def __init__(self, event: EventT[Any]) -> None:
        self.event = event
        self.done = False


class OrderedAcks:
    """Acks an event only when it and every earlier event of its partition are done."""

    def __init__(self, ack: Callable[[EventT[Any]], Awaitable[bool]]) -> None:
        self._ack = ack
        self._pending: dict[TP, deque[Ticket]] = {}

    def __len__(self) -> int:
        return sum(len(queue) for queue in self._pending.values())

    def track(self, event: EventT[Any]) -> Ticket:
        """Take ``event`` in, in the order it was read."""
        ticket = Ticket(event)
        self._pending.setdefault(event.message.tp, deque()).append(ticket)
        return ticket

    async def done(self, ticket: Ticket) -> None:
        ticket.done = True
        queue = self._pending.get(ticket.event.message.tp)
        while queue and queue[0].done:
            await self._ack(queue.popleft().event)
