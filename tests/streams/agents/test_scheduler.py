"""The probe scheduler, with a fake prober and fake events (a pure unit)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from types import SimpleNamespace
from typing import Any, cast

from faust.types import TP, EventT

from streams.agents.acks import OrderedAcks
from streams.agents.probe_processor import ProbeOutcome
from streams.agents.scheduler import DomainScheduler, Publish
from streams.messages import ProbeRequest, RequestedPattern
from streams.worker.errorpolicy import BugPolicy, OnBug


def request(domain: str, shape: str = "/p") -> ProbeRequest:
    return ProbeRequest(
        domain, shape, {f"{shape}?id": RequestedPattern("time-limit", "", 1, 0.0)}, (), 0.0
    )


def event(offset: int) -> EventT[Any]:
    message = SimpleNamespace(tp=TP("requests", 0), offset=offset)
    return cast(EventT[Any], SimpleNamespace(message=message))


class FakeProber:
    """Learns a domain when its gate opens; fails the first ``failures`` runs."""

    def __init__(self, failures: int = 0) -> None:
        self.gates: dict[str, asyncio.Event] = {}
        self.runs: list[list[tuple[str, str]]] = []
        self.failures = failures

    def gate(self, domain: str) -> asyncio.Event:
        return self.gates.setdefault(domain, asyncio.Event())

    async def handle(
        self, requests: Iterable[ProbeRequest], publish: Publish | None = None
    ) -> list[ProbeOutcome]:
        batch = [(r.domain, r.shape) for r in requests]
        await self.gate(batch[0][0]).wait()
        if self.failures:
            self.failures -= 1
            raise AttributeError("a bug in the learner")
        self.runs.append(batch)
        outcome = ProbeOutcome(batch[0][0], None, [], 0, [])
        if publish is not None:
            await publish(outcome)
        return [outcome]


async def no_wait(seconds: float) -> None:
    await asyncio.sleep(0)


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def scheduler_of(
    prober: FakeProber,
    acked: list[int],
    guard: Callable[[Callable[[], Awaitable[None]], str], Awaitable[None]],
    published: list[str],
) -> DomainScheduler:
    async def ack(done: EventT[Any]) -> bool:
        acked.append(done.message.offset)
        return True

    async def publish(outcome: ProbeOutcome) -> None:
        published.append(outcome.domain)

    return DomainScheduler(prober, publish, OrderedAcks(ack), guard, gather_seconds=0.0)


async def test_a_slow_domain_holds_up_neither_other_domains_nor_its_own_next_requests() -> None:
    prober = FakeProber()
    acked: list[int] = []
    published: list[str] = []
    policy = BugPolicy(OnBug.STOP, lambda error: None)
    scheduler = scheduler_of(prober, acked, policy.run, published)
    for offset, domain in enumerate(["slow.example", "fast.example"]):
        scheduler.submit(request(domain), scheduler.acks.track(event(offset)))
    await settle()
    scheduler.submit(request("slow.example", "/q"), scheduler.acks.track(event(2)))
    scheduler.submit(request("slow.example", "/r"), scheduler.acks.track(event(3)))
    prober.gate("fast.example").set()
    await settle()
    assert published == ["fast.example"]
    assert acked == [], "offset 1 waits for offset 0, still being learned"
    prober.gate("slow.example").set()
    await settle()
    assert prober.runs == [
        [("fast.example", "/p")],
        [("slow.example", "/p")],
        [("slow.example", "/q"), ("slow.example", "/r")],
    ]
    assert acked == [0, 1, 2, 3]
    await scheduler.close()


async def test_a_bug_while_learning_is_retried_and_acked_only_once_it_succeeds() -> None:
    prober = FakeProber(failures=2)
    acked: list[int] = []
    published: list[str] = []
    policy = BugPolicy(OnBug.RETRY, lambda error: None, sleep=no_wait)
    scheduler = scheduler_of(prober, acked, policy.run, published)
    prober.gate("a.example").set()
    scheduler.submit(request("a.example"), scheduler.acks.track(event(0)))
    await settle()
    assert policy.bugs == 2
    assert prober.runs == [[("a.example", "/p")]] and acked == [0]
    await scheduler.close()


async def test_a_bug_while_learning_stops_the_worker_and_acks_nothing() -> None:
    prober = FakeProber(failures=1)
    acked: list[int] = []
    published: list[str] = []
    stops: list[BaseException] = []
    policy = BugPolicy(OnBug.STOP, stops.append)
    scheduler = scheduler_of(prober, acked, policy.run, published)
    prober.gate("a.example").set()
    scheduler.submit(request("a.example"), scheduler.acks.track(event(0)))
    await settle()
    assert [type(error) for error in stops] == [AttributeError]
    assert acked == [] and published == []
    await scheduler.close()
    assert scheduler.failure is None
