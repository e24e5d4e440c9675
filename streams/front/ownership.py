"""With ``MIQPS_INPUT_KEYED_BY_DOMAIN``, the maps partitions a canonicalizer front follows:
the numbers of the input partitions it is assigned, since a domain is in the same
partition of ``urls.raw`` and ``miqps.maps`` (docs/STREAMS.md, "Co-partitioning by
domain").

A rebalance moves only what moved: a partition kept across it is not read again. Under
the cooperative protocol (the front's default, ``MIQPS_FRONT_REBALANCE``) the callbacks
name only the partitions that move. Under the eager protocol every rebalance revokes the
whole assignment and then assigns the new one whole, so the maps partitions given up are
only known at the assignment.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Moves:
    """What a rebalance callback changes in the maps partitions followed."""

    take: frozenset[int]
    """Partitions to follow from their beginning (restored before their inputs are read)."""
    give_up: frozenset[int]
    """Partitions to stop following, removing the maps of the domains they brought."""
    first: bool = False
    """The first assignment: what it takes (even nothing) is what a kept store keeps."""


NO_MOVES = Moves(frozenset(), frozenset())


class OwnedPartitions:
    """The maps partitions followed, as the rebalance callbacks change them."""

    def __init__(self, incremental: bool) -> None:
        self.incremental = incremental
        self.owned: set[int] = set()
        self._first_made = False
        self._left = False

    def assigned(self, partitions: Iterable[int]) -> Moves:
        """The input partitions of an assignment: all of them (eager, or the first after
        the consumer left the group), or the ones added (incremental).

        The first assignment says what a kept store keeps: eager, even an empty one;
        incremental, the first that holds a partition, since a member joining a group is
        first assigned nothing while the partitions it is to take are revoked elsewhere."""
        assigned = set(partitions)
        take = frozenset(assigned - self.owned)
        first = not self._first_made and (bool(assigned) or not self.incremental)
        self._first_made |= first
        if self.incremental and not self._left:
            self.owned |= assigned
            return Moves(take, frozenset(), first)
        self._left = False
        give_up = frozenset(self.owned - assigned)
        self.owned = assigned
        return Moves(take, give_up, first)

    def revoked(self, partitions: Iterable[int]) -> Moves:
        """The input partitions of a revocation (or a loss). Eager, the whole assignment
        is revoked before the next one, so nothing is given up until that one says what
        stays."""
        if not self.incremental:
            return NO_MOVES
        give_up = frozenset(self.owned.intersection(partitions))
        self.owned -= give_up
        return Moves(frozenset(), give_up)

    def left(self) -> Moves:
        """The consumer leaves the group (the front stops, or starts new clients): its
        partitions are revoked, but it gives nothing up, so that a kept store keeps their
        maps; the next assignment, whole, says what stays."""
        self._left = True
        return NO_MOVES


def incremental_assignment(config: Mapping[str, Any]) -> bool:
    """Whether a consumer with ``config`` is assigned partitions incrementally: the
    cooperative-sticky assignor, or the consumer group protocol of KIP-848."""
    strategy = str(config.get("partition.assignment.strategy", ""))
    protocol = str(config.get("group.protocol", "classic"))
    return protocol.lower() == "consumer" or "cooperative" in strategy.lower()
