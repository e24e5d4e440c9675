"""The maps partitions a front with keyed input follows (:mod:`streams.front.ownership`):
a rebalance takes and gives up only what moved, under the eager protocol (whole
assignments, the revocation first) and the incremental one (only what moves)."""

from __future__ import annotations

import pytest

from streams.front.ownership import Moves, OwnedPartitions, incremental_assignment


def moves(take: set[int], give_up: set[int], *, first: bool = False) -> Moves:
    return Moves(frozenset(take), frozenset(give_up), first)


def test_eager_rebalances_take_and_give_up_only_what_moved() -> None:
    owned = OwnedPartitions(incremental=False)
    assert owned.assigned([0, 1, 2, 3]) == moves({0, 1, 2, 3}, set(), first=True)
    # A second member joins: everything is revoked, then half comes back.
    assert owned.revoked([0, 1, 2, 3]) == moves(set(), set())
    assert owned.owned == {0, 1, 2, 3}
    assert owned.assigned([0, 1]) == moves(set(), {2, 3})
    # It leaves again: the two kept are not taken again.
    assert owned.revoked([0, 1]) == moves(set(), set())
    assert owned.assigned([1, 0, 3, 2]) == moves({2, 3}, set())
    # Another assignment altogether, and an empty one.
    assert owned.revoked([0, 1, 2, 3]) == moves(set(), set())
    assert owned.assigned([1, 5]) == moves({5}, {0, 2, 3})
    assert owned.assigned([]) == moves(set(), {1, 5})
    assert owned.owned == set()


def test_incremental_rebalances_name_only_what_moves() -> None:
    owned = OwnedPartitions(incremental=True)
    assert owned.assigned([0, 1, 2, 3]) == moves({0, 1, 2, 3}, set(), first=True)
    assert owned.revoked([2, 3]) == moves(set(), {2, 3})
    assert owned.assigned([]) == moves(set(), set())
    assert owned.owned == {0, 1}
    assert owned.assigned([3]) == moves({3}, set())
    assert owned.revoked([3, 7]) == moves(set(), {3})  # 7 was never held
    assert owned.revoked([0, 1]) == moves(set(), {0, 1})
    assert owned.owned == set()


def test_the_first_eager_assignment_says_so_even_when_empty() -> None:
    """What it takes, even nothing, is what a kept live-map store keeps."""
    owned = OwnedPartitions(incremental=False)
    assert owned.assigned([]) == moves(set(), set(), first=True)
    assert owned.assigned([2]) == moves({2}, set())


def test_the_first_incremental_assignment_is_the_first_that_holds_a_partition() -> None:
    """A member joining a cooperative group is first assigned nothing, while what it is to
    take is revoked from the others: that says nothing of what a kept store keeps."""
    owned = OwnedPartitions(incremental=True)
    assert owned.assigned([]) == moves(set(), set())
    assert owned.assigned([2, 3]) == moves({2, 3}, set(), first=True)
    assert owned.assigned([1]) == moves({1}, set())


@pytest.mark.parametrize("incremental", [False, True])
def test_leaving_the_group_gives_nothing_up_until_the_next_assignment(incremental: bool) -> None:
    """A front that stops keeps its partitions' maps (a kept store serves its next start);
    one that starts new clients takes the next assignment whole."""
    owned = OwnedPartitions(incremental)
    assert owned.assigned([0, 1, 2]) == moves({0, 1, 2}, set(), first=True)
    assert owned.left() == moves(set(), set())
    assert owned.owned == {0, 1, 2}
    assert owned.assigned([1, 3]) == moves({3}, {0, 2})
    assert owned.revoked([3]) == (moves(set(), {3}) if incremental else moves(set(), set()))


@pytest.mark.parametrize(
    ("config", "incremental"),
    [
        ({}, False),
        ({"partition.assignment.strategy": "range,roundrobin"}, False),
        ({"partition.assignment.strategy": "cooperative-sticky"}, True),
        ({"group.protocol": "consumer"}, True),
        ({"group.protocol": "classic"}, False),
    ],
)
def test_the_protocol_is_read_from_the_consumer_configuration(
    config: dict[str, str], incremental: bool
) -> None:
    assert incremental_assignment(config) is incremental
