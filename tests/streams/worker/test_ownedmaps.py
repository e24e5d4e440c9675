"""The maps partitions the Faust process follows, as Faust assigns its agents' partitions,
and the agents' wait for a domain's partition to be restored, without Kafka."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import NamedTuple

from streams.kafka.partitioning import key_partition
from streams.maps.feed import Restore
from streams.worker.ownedmaps import OwnedMaps

SAMPLES = "miqps.pattern-samples"
REQUESTS = "miqps.probe-requests"
PARTITIONS = 4


class TP(NamedTuple):
    topic: str
    partition: int


class Feed:
    """Records what is followed; restores are done when the test says so."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[int]]] = []
        self.restores: dict[int, Restore] = {}

    def follow(self, partitions: Iterable[int]) -> dict[int, Restore]:
        taken = {p: Restore(p) for p in sorted(partitions)}
        self.calls.append(("follow", sorted(taken)))
        self.restores.update(taken)
        return taken

    def unfollow(self, partitions: Iterable[int]) -> None:
        self.calls.append(("unfollow", sorted(partitions)))

    def restore(self, partition: int) -> None:
        self.restores[partition].done.set()


def owned_maps(feed: Feed) -> OwnedMaps:
    return OwnedMaps(feed, (SAMPLES, REQUESTS), PARTITIONS)


def domain_in(partition: int) -> str:
    return next(
        domain
        for n in range(1000)
        if key_partition((domain := f"d{n}.example").encode(), PARTITIONS) == partition
    )


def test_the_partitions_of_the_agents_topics_are_followed_and_the_others_not() -> None:
    feed = Feed()
    maps = owned_maps(feed)
    maps.assigned(
        {TP(SAMPLES, 0), TP(REQUESTS, 0), TP(REQUESTS, 2), TP("miqps-pattern-stats-changelog", 3)}
    )
    assert feed.calls == [("follow", [0, 2])]
    assert sorted(maps.restores) == [0, 2]


def test_a_rebalance_gives_up_what_moved_and_does_not_read_again_what_stayed() -> None:
    feed = Feed()
    maps = owned_maps(feed)
    maps.assigned({TP(SAMPLES, 0), TP(SAMPLES, 1)})
    maps.assigned({TP(SAMPLES, 1), TP(SAMPLES, 3)})
    assert feed.calls == [("follow", [0, 1]), ("unfollow", [0]), ("follow", [3])]
    assert sorted(maps.restores) == [1, 3]
    assert maps.restoring() == 2
    feed.restore(1)
    assert maps.restoring() == 1


async def test_an_agent_waits_for_its_domain_s_partition_to_be_restored() -> None:
    feed = Feed()
    maps = owned_maps(feed)
    maps.assigned({TP(REQUESTS, 1), TP(REQUESTS, 2)})
    waiting = asyncio.ensure_future(maps.held(domain_in(2)))
    await asyncio.sleep(0.1)
    assert not waiting.done()
    feed.restore(1)
    await asyncio.sleep(0.1)
    assert not waiting.done()
    feed.restore(2)
    await asyncio.wait_for(waiting, 1.0)
    await asyncio.wait_for(maps.held(domain_in(2)), 0.1)


async def test_a_domain_of_a_partition_not_followed_has_it_followed_and_restored_first() -> None:
    feed = Feed()
    maps = owned_maps(feed)
    maps.assigned({TP(SAMPLES, 0)})
    waiting = asyncio.ensure_future(maps.held(domain_in(3)))
    await asyncio.sleep(0.1)
    assert not waiting.done()
    assert feed.calls == [("follow", [0]), ("follow", [3])]
    feed.restore(3)
    await asyncio.wait_for(waiting, 1.0)
    assert maps.followed_again == 1
    maps.assigned({TP(SAMPLES, 0)})  # the next assignment without it gives it up
    assert feed.calls[-1] == ("unfollow", [3])
    assert sorted(maps.restores) == [0]


async def test_a_partition_given_up_while_an_agent_waits_is_followed_again() -> None:
    feed = Feed()
    maps = owned_maps(feed)
    maps.assigned({TP(SAMPLES, 0), TP(SAMPLES, 1)})
    waiting = asyncio.ensure_future(maps.held(domain_in(1)))
    await asyncio.sleep(0.05)
    given_up = feed.restores[1]
    maps.assigned({TP(SAMPLES, 0)})
    await asyncio.sleep(0.1)
    assert feed.calls[-2:] == [("unfollow", [1]), ("follow", [1])]
    given_up.done.set()  # the old restore does not count: its maps were removed
    await asyncio.sleep(0.1)
    assert not waiting.done()
    feed.restore(1)
    await asyncio.wait_for(waiting, 1.0)
