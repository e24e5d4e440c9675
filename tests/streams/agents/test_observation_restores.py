"""The restores of the observing agent's partitions, without Kafka: a partition assigned is
read again up to the committed offset into the pages held, latest first, with what is read
live meanwhile standing; invalid records are counted, not dead-lettered; a partition given up
has its pages dropped; a probe run waits for its domain's partition, a while at most."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterator
from typing import NamedTuple

import pytest

from miqps.observations import ObservedPages, observation_record, read_observation
from streams.agents.observe_restore import ObservationRestores
from streams.kafka.partitioning import key_partition
from streams.ops.metrics import ObservationCounts

TOPIC = "miqps.observations"
PARTITIONS = 2
CAP = 1 << 20


class TP(NamedTuple):
    topic: str
    partition: int


def domain_in(partition: int) -> str:
    return next(
        domain
        for n in range(1000)
        if key_partition((domain := f"d{n}.example").encode(), PARTITIONS) == partition
    )


def url_of(domain: str, item: int) -> str:
    return f"http://{domain}/p?id={item}"


def record(domain: str, item: int, text: str = "", status: int = 200) -> bytes:
    body = f"<html><body><main><h1>Item {item}</h1><p>{text} About {item}.</p></main></body></html>"
    return observation_record(url_of(domain, item), status, body.encode())


class Reader:
    """Partitions as lists of values, committed offsets as given; a partition can be held
    back until the test lets it go."""

    def __init__(self, records: dict[int, list[bytes | None]], committed: dict[int, int]) -> None:
        self.records = records
        self.offsets = committed
        self.gates: dict[int, threading.Event] = {}
        self.read: list[tuple[int, int]] = []
        self.closed = False

    def committed(self, partition: int) -> int:
        return self.offsets.get(partition, -1)

    def values(
        self, partition: int, end: int, stopping: Callable[[], bool]
    ) -> Iterator[bytes | None]:
        gate = self.gates.get(partition)
        if gate is not None:
            gate.wait(10)
        self.read.append((partition, end))
        for value in self.records.get(partition, [])[:end]:
            if stopping():
                return
            yield value

    def close(self) -> None:
        self.closed = True


def restores_of(
    reader: Reader, pages: ObservedPages | None = None, patience: float = 5.0
) -> tuple[ObservationRestores, ObservedPages, ObservationCounts]:
    pages = pages if pages is not None else ObservedPages(100)
    counts = ObservationCounts(pages)
    restores = ObservationRestores(
        TOPIC, PARTITIONS, pages, counts, CAP, lambda: reader, patience=patience
    )
    return restores, pages, counts


async def restored(restores: ObservationRestores) -> None:
    for _ in range(1000):
        if restores.restoring() == 0:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("not restored")


async def test_a_partition_assigned_is_read_again_up_to_the_committed_offset(
    caplog: pytest.LogCaptureFixture,
) -> None:
    mine, other = domain_in(1), domain_in(0)
    values: list[bytes | None] = [
        record(mine, 1, "older"),
        record(mine, 2),
        b"{not an observation",
        record(mine, 3, status=503),
        record(mine, 1, "newer"),
        record(mine, 4, "after the committed offset: the agent reads it"),
    ]
    reader = Reader({1: values, 0: [record(other, 1)]}, {1: 5})
    restores, pages, counts = restores_of(reader)
    caplog.set_level(logging.INFO)
    restores.assigned({TP(TOPIC, 0), TP(TOPIC, 1), TP("miqps.probe-requests", 1)})
    assert counts.restoring() == 2
    await restored(restores)
    restores.stop()

    assert reader.read == [(1, 5)]  # partition 0: no offset committed, nothing to read again
    assert reader.closed
    assert pages.holds(url_of(mine, 1)) and pages.holds(url_of(mine, 2))
    assert not pages.holds(url_of(mine, 3)) and not pages.holds(url_of(mine, 4))
    newer = ObservedPages(1)
    newer.add(read_observation(record(mine, 1, "newer"), max_bytes=CAP))
    assert taken(pages, url_of(mine, 1)) == taken(newer, url_of(mine, 1))
    assert counts.restored == {"kept": 3, "no evidence": 1, "invalid": 1}
    assert counts.by_outcome == {"kept": 0, "no evidence": 0, "invalid": 0}  # none read live
    assert counts.restores == 2 and counts.restoring() == 0
    names = {family.name for family in counts.families()}
    assert {
        "miqps_observations_restored",
        "miqps_observations_restores",
        "miqps_observations_restore_seconds",
        "miqps_observations_partitions_restoring",
    } <= names
    lines = [r.getMessage() for r in caplog.records if "observations" in r.getMessage()]
    assert any(
        f"{TOPIC}[1] restored: 5 records up to offset 5 (3 kept, 1 no evidence, 1 invalid, "
        "not dead-lettered again), 2 pages held" in line
        for line in lines
    ), lines
    assert any(f"{TOPIC}[0] restored: 0 records, no offset committed" in line for line in lines)


def taken(pages: ObservedPages, url: str) -> object:
    outcome = pages.observed(url)
    assert outcome is not None and outcome.snapshot is not None
    return outcome.snapshot.blocks


async def test_what_the_agent_reads_during_the_restore_stands() -> None:
    mine = domain_in(1)
    reader = Reader({1: [record(mine, 1, "older"), record(mine, 2, "older")]}, {1: 2})
    reader.gates[1] = threading.Event()
    restores, pages, _ = restores_of(reader)
    restores.assigned({TP(TOPIC, 1)})
    # The agent reads on from the committed offset while the restore is held back.
    live = read_observation(record(mine, 1, "newer"), max_bytes=CAP)
    pages.add(live, 1)
    reader.gates[1].set()
    await restored(restores)
    restores.stop()
    newer = ObservedPages(1)
    newer.add(live)
    assert taken(pages, url_of(mine, 1)) == taken(newer, url_of(mine, 1))
    assert pages.holds(url_of(mine, 2))


async def test_a_partition_given_up_has_its_pages_dropped_and_is_not_merged() -> None:
    mine = domain_in(1)
    reader = Reader({1: [record(mine, 1)], 0: [record(domain_in(0), 1)]}, {1: 1, 0: 1})
    restores, pages, counts = restores_of(reader)
    restores.assigned({TP(TOPIC, 0), TP(TOPIC, 1)})
    await restored(restores)
    assert len(pages) == 2
    reader.gates[1] = threading.Event()
    restores.assigned({TP(TOPIC, 0)})  # given up: its page dropped
    assert len(pages) == 1 and not pages.holds(url_of(mine, 1))
    restores.assigned({TP(TOPIC, 0), TP(TOPIC, 1)})  # taken again, restore held back
    restores.assigned({TP(TOPIC, 0)})  # and given up before it ends
    reader.gates[1].set()
    await asyncio.sleep(0.2)
    restores.stop()
    assert len(pages) == 1 and not pages.holds(url_of(mine, 1))
    assert counts.restores == 2 and sorted(restores.restores) == [0]


async def test_a_probe_run_waits_for_its_domain_s_partition_a_while_at_most() -> None:
    mine, other = domain_in(1), domain_in(0)
    reader = Reader({1: [record(mine, 1)], 0: [record(other, 1)]}, {1: 1, 0: 1})
    reader.gates[1] = threading.Event()
    restores, pages, _ = restores_of(reader, patience=0.3)
    await restores.held(mine)  # not assigned: nothing to wait for
    restores.assigned({TP(TOPIC, 0), TP(TOPIC, 1)})
    waiting = asyncio.ensure_future(restores.held(mine))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    reader.gates[1].set()
    await asyncio.wait_for(waiting, 10)
    assert pages.holds(url_of(mine, 1))  # held returns once the pages are merged
    await restores.held(other)

    # A restore that takes too long: the run goes on after the patience.
    restores.assigned({TP(TOPIC, 0)})
    reader.gates[1] = threading.Event()
    restores.assigned({TP(TOPIC, 0), TP(TOPIC, 1)})
    loop = asyncio.get_running_loop()
    started = loop.time()
    await restores.held(mine)
    assert 0.25 <= loop.time() - started < 5
    reader.gates[1].set()
    await restored(restores)
    restores.stop()


class FailingReader(Reader):
    def committed(self, partition: int) -> int:
        raise RuntimeError("no broker")


async def test_a_restore_that_fails_is_said_and_waited_for_no_longer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    mine = domain_in(1)
    restores, pages, counts = restores_of(FailingReader({1: [record(mine, 1)]}, {}))
    restores.assigned({TP(TOPIC, 1)})
    await asyncio.wait_for(restores.held(mine), 10)
    restores.stop()
    assert not pages.holds(url_of(mine, 1)) and counts.restores == 0
    assert any(
        f"{TOPIC}[1] not restored (RuntimeError: no broker)" in r.getMessage()
        for r in caplog.records
    )
    pages.add(read_observation(record(mine, 1), max_bytes=CAP), 1)  # live reads go on
    assert pages.holds(url_of(mine, 1))
