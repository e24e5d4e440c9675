"""How a front with keyed input moves its maps partitions in the rebalance callbacks
(:meth:`CanonicalizerFront._on_assign`, ``_on_revoke``), with a recording consumer: a
newly assigned input partition is paused until its maps partition is restored, a kept one
is neither read again nor paused, and a partition given up stops being followed."""

from __future__ import annotations

import pytest
from confluent_kafka import TopicPartition

from streams.front.loop import CanonicalizerFront
from streams.maps.feed import MapFeed
from streams.maps.live import LiveMaps
from streams.settings import Settings

RAW = Settings().topics.raw


class RecordingConsumer:
    """What the callbacks ask of the consumer, and the assignment that results."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[int]]] = []
        self.assigned: set[int] = set()

    def _call(self, name: str, partitions: list[TopicPartition]) -> None:
        assert all(p.topic == RAW for p in partitions)
        self.calls.append((name, sorted(p.partition for p in partitions)))

    def assign(self, partitions: list[TopicPartition]) -> None:
        self._call("assign", partitions)
        self.assigned = {p.partition for p in partitions}

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        self._call("incremental_assign", partitions)
        self.assigned |= {p.partition for p in partitions}

    def pause(self, partitions: list[TopicPartition]) -> None:
        self._call("pause", partitions)

    def resume(self, partitions: list[TopicPartition]) -> None:
        self._call("resume", partitions)

    def committed(self, partitions: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        return [TopicPartition(p.topic, p.partition, 100 + p.partition) for p in partitions]

    def seek(self, partition: TopicPartition) -> None:
        assert partition.offset == 100 + partition.partition, "to the committed offset"
        self._call("seek", [partition])

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(RAW, p) for p in sorted(self.assigned)]

    def revoked(self, partitions: list[int]) -> None:
        self.assigned -= set(partitions)

    def taken(self) -> list[tuple[str, list[int]]]:
        calls, self.calls = self.calls, []
        return calls


def front(incremental: bool) -> tuple[CanonicalizerFront, MapFeed]:
    settings = Settings(input_keyed_by_domain=True)
    live_maps = LiveMaps(3600.0)
    feed = MapFeed(settings, live_maps, partitioned=True)
    canonicalizer = CanonicalizerFront(settings, live_maps, feed)
    assert canonicalizer.owned_maps is not None
    canonicalizer.owned_maps.incremental = incremental
    return canonicalizer, feed


def partitions(*numbers: int) -> list[TopicPartition]:
    return [TopicPartition(RAW, number) for number in numbers]


def requests(feed: MapFeed) -> list[tuple[int, bool]]:
    """(partition, taken) of the feed's pending requests, emptied."""
    taken = [(partition, restore is not None) for partition, restore in feed._requests]
    feed._requests.clear()
    return taken


def restore(front: CanonicalizerFront, consumer: RecordingConsumer, *numbers: int) -> None:
    for number in numbers:
        front.restoring[number].done.set()
    front._resume_restored(consumer)  # type: ignore[arg-type]


def test_eager_new_partitions_wait_for_their_maps_and_kept_ones_do_not() -> None:
    canonicalizer, feed = front(incremental=False)
    consumer = RecordingConsumer()
    canonicalizer._on_assign(consumer, partitions(0, 1, 2, 3))  # type: ignore[arg-type]
    assert consumer.taken() == [("assign", [0, 1, 2, 3]), ("pause", [0, 1, 2, 3])]
    assert requests(feed) == [(0, True), (1, True), (2, True), (3, True)]
    restore(canonicalizer, consumer, 0, 2)
    assert consumer.taken() == [("resume", [0, 2]), ("seek", [0]), ("seek", [2])]
    assert sorted(canonicalizer.restoring) == [1, 3] and feed.followed == {0, 1, 2, 3}

    # A second member joins: all is revoked, [0, 1] comes back; 1 still waits for its maps.
    canonicalizer._on_revoke(consumer, partitions(0, 1, 2, 3))  # type: ignore[arg-type]
    consumer.revoked([0, 1, 2, 3])
    assert consumer.taken() == [] and requests(feed) == []
    canonicalizer._on_assign(consumer, partitions(0, 1))  # type: ignore[arg-type]
    assert consumer.taken() == [("assign", [0, 1]), ("pause", [1])]
    assert requests(feed) == [(2, False), (3, False)]
    assert sorted(canonicalizer.restoring) == [1] and feed.followed == {0, 1}

    # 1 is restored while nothing is assigned (between an eager revocation and the next
    # assignment): nothing to resume then, but librdkafka keeps its pause across the
    # rebalance, so it is resumed, from its committed offset, when it comes back.
    canonicalizer._on_revoke(consumer, partitions(0, 1))  # type: ignore[arg-type]
    consumer.revoked([0, 1])
    restore(canonicalizer, consumer, 1)
    assert consumer.taken() == []
    canonicalizer._on_assign(consumer, partitions(0, 1, 3))  # type: ignore[arg-type]
    assert consumer.taken() == [
        ("assign", [0, 1, 3]),
        ("pause", [3]),
        ("resume", [1]),
        ("seek", [1]),
    ]
    assert canonicalizer.paused == {3}
    assert requests(feed) == [(3, True)]


def test_incremental_callbacks_move_only_the_partitions_they_name() -> None:
    canonicalizer, feed = front(incremental=True)
    consumer = RecordingConsumer()
    canonicalizer._on_assign(consumer, partitions(0, 1))  # type: ignore[arg-type]
    assert consumer.taken() == [("incremental_assign", [0, 1]), ("pause", [0, 1])]
    restore(canonicalizer, consumer, 0, 1)
    assert consumer.taken() == [("resume", [0, 1]), ("seek", [0]), ("seek", [1])]
    canonicalizer._on_assign(consumer, partitions(2))  # type: ignore[arg-type]
    assert consumer.taken() == [("incremental_assign", [2]), ("pause", [2])]
    assert requests(feed) == [(0, True), (1, True), (2, True)]
    canonicalizer._on_revoke(consumer, partitions(1, 2))  # type: ignore[arg-type]
    consumer.revoked([1, 2])
    assert requests(feed) == [(1, False), (2, False)]
    assert canonicalizer.restoring == {} and feed.followed == {0}
    canonicalizer._on_assign(consumer, [])  # type: ignore[arg-type]
    assert consumer.taken() == [("incremental_assign", [])] and requests(feed) == []


def test_without_keyed_input_the_front_follows_the_whole_topic() -> None:
    settings = Settings()
    live_maps = LiveMaps(3600.0)
    canonicalizer = CanonicalizerFront(settings, live_maps, MapFeed(settings, live_maps))
    consumer = RecordingConsumer()
    canonicalizer._on_assign(consumer, partitions(0, 1))  # type: ignore[arg-type]
    assert canonicalizer.owned_maps is None and consumer.taken() == []
    keyed = settings.with_overrides(input_keyed_by_domain=True)
    with pytest.raises(ValueError, match="partitioned map feed"):
        CanonicalizerFront(keyed, live_maps, MapFeed(keyed, live_maps))
