"""The maps the Faust process of a worker holds: those of the domains its agents own.

The pattern-stats agent reads ``miqps.pattern-samples`` and the probing agent
``miqps.probe-requests``; both are co-partitioned with ``miqps.maps`` (one partition count,
murmur2 by domain, checked before the worker consumes anything:
:mod:`streams.kafka.copartition`), so a domain of partition *p* of theirs has its map in
partition *p* of the maps topic. The process's map feed is partitioned
(:class:`~streams.maps.feed.MapFeed`) and follows the maps partitions numbered as the
partitions of those topics that Faust assigns it (:meth:`OwnedMaps.assigned`, from the
app's ``on_partitions_assigned`` signal).

No agent decides on a domain before its maps partition is restored: it awaits
:meth:`OwnedMaps.held` first, which returns once the partition of the domain has been read
from its beginning up to where it ended when it was taken. A domain whose partition is not
followed (an event read just before its partition was given up, a probe run that
outlived its partition) has its partition followed again, and restored, before the
agent goes on: an agent never reads a missing map as "no map". Such a partition is given
up at the next assignment that does not hold it.

Faust's consumer (aiokafka) is assigned partitions eagerly: every rebalance revokes the
whole assignment, then assigns the new one whole, so the partitions given up are only
known at the assignment (:class:`~streams.front.ownership.OwnedPartitions`), and a
partition kept across a rebalance is not read again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Iterable
from typing import Protocol

from streams.front.ownership import OwnedPartitions
from streams.kafka.partitioning import key_partition
from streams.maps.feed import Restore

log = logging.getLogger(__name__)

RESTORE_POLL_SECONDS = 0.02


class TopicPartition(Protocol):
    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...


class Feed(Protocol):
    """What :class:`OwnedMaps` asks of a partitioned :class:`~streams.maps.feed.MapFeed`."""

    def follow(self, partitions: Iterable[int]) -> dict[int, Restore]: ...

    def unfollow(self, partitions: Iterable[int]) -> None: ...


class OwnedMaps:
    """The maps partitions the Faust process follows, and the restore of each."""

    def __init__(self, feed: Feed, topics: Collection[str], partitions: int) -> None:
        """``topics``: the domain-keyed topics whose assigned partitions are followed;
        ``partitions``: their partition count (the maps topic's)."""
        self.feed = feed
        self.topics = frozenset(topics)
        self.partitions = partitions
        self._owned = OwnedPartitions(incremental=False)
        self.restores: dict[int, Restore] = {}
        """The partitions followed, each with its restore (done or not)."""
        self.followed_again = 0
        """Partitions followed for a domain whose partition was not followed."""

    def assigned(self, assigned: Iterable[TopicPartition]) -> None:
        """Faust's whole new assignment: follow the maps partitions of the domain-keyed
        topics' partitions in it, and give up the others."""
        moves = self._owned.assigned(tp.partition for tp in assigned if tp.topic in self.topics)
        if moves.give_up:
            for partition in moves.give_up:
                self.restores.pop(partition, None)
            self.feed.unfollow(moves.give_up)
        if moves.take or moves.first:
            self.restores.update(self.feed.follow(moves.take))
        if moves.give_up or moves.take:
            log.info(
                "maps partitions followed: %s (taken: %s; given up: %s)",
                _listed(self.restores),
                _listed(moves.take),
                _listed(moves.give_up),
            )

    def partition_of(self, domain: str) -> int:
        return key_partition(domain.encode(), self.partitions)

    def restore_of(self, partition: int) -> Restore:
        """The restore of ``partition``, which is followed from now on if it was not."""
        restore = self.restores.get(partition)
        if restore is None:
            log.info(
                "maps partition %d followed again, for a domain of a partition not held "
                "(it is given up at the next assignment without it)",
                partition,
            )
            self._owned.owned.add(partition)
            restore = self.restores[partition] = self.feed.follow([partition])[partition]
            self.followed_again += 1
        return restore

    async def held(self, domain: str) -> None:
        """Return once the maps partition of ``domain`` is followed and restored."""
        partition = self.partition_of(domain)
        # Each lap asks again: a partition given up meanwhile is followed again.
        while not self.restore_of(partition).done.is_set():
            await asyncio.sleep(RESTORE_POLL_SECONDS)

    def restoring(self) -> int:
        """Partitions followed and not restored yet."""
        return sum(1 for restore in self.restores.values() if not restore.done.is_set())


def _listed(partitions: Iterable[int]) -> str:
    return ", ".join(str(p) for p in sorted(partitions)) or "none"
