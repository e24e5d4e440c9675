"""Ordered acknowledgements, with fake events (a pure unit: only ``message.tp`` is read)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from faust.types import TP, EventT

from streams.agents.acks import OrderedAcks


def event(partition: int, offset: int) -> EventT[Any]:
    message = SimpleNamespace(tp=TP("requests", partition), offset=offset)
    return cast(EventT[Any], SimpleNamespace(message=message))


class Acked:
    def __init__(self) -> None:
        self.offsets: list[tuple[int, int]] = []

    async def __call__(self, acked: EventT[Any]) -> bool:
        self.offsets.append((acked.message.tp.partition, acked.message.offset))
        return True


async def test_an_event_is_acked_only_after_every_earlier_event_of_its_partition() -> None:
    acked = Acked()
    acks = OrderedAcks(acked)
    tickets = [acks.track(event(0, offset)) for offset in range(3)]
    other = acks.track(event(1, 0))
    await acks.done(tickets[2])
    await acks.done(tickets[1])
    assert acked.offsets == [] and len(acks) == 4
    await acks.done(other)
    assert acked.offsets == [(1, 0)], "another partition does not wait"
    await acks.done(tickets[0])
    assert acked.offsets == [(1, 0), (0, 0), (0, 1), (0, 2)]
    assert len(acks) == 0
