"""A worker process's live-map store kept across restarts (:mod:`streams.maps.kept`), without
Kafka: which store is kept, where each maps partition resumes, that applying again records
already applied changes nothing (so the stored offset may lag the store), and what the
feed does with a kept store when it takes its partitions."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from miqps.maps import DomainMap
from miqps.mapstore import MapStore
from miqps.urls import NormalizedURL, parse
from streams.kafka.clients import _assign
from streams.maps.feed import MapFeed
from streams.maps.kept import (
    Resume,
    StoredOffset,
    StoreOrigin,
    resume_from,
    why_emptied,
)
from streams.maps.live import StoredLiveMaps
from streams.messages import Source
from streams.settings import Settings
from tests.streams.maps.test_feed import product_map

TOPIC = "miqps.maps"
ORIGIN = StoreOrigin("cluster-a", TOPIC, "id-1", 4)
DAY_MS = 86_400_000


def test_a_store_is_kept_only_for_the_same_topic_cluster_incarnation_and_partitions() -> None:
    assert why_emptied(ORIGIN, ORIGIN) is None
    assert why_emptied(None, ORIGIN) == "it records no maps topic"
    assert "another cluster (cluster-b; now cluster-a)" in str(
        why_emptied(replace(ORIGIN, cluster="cluster-b"), ORIGIN)
    )
    assert "another maps topic (old.maps)" in str(
        why_emptied(replace(ORIGIN, topic="old.maps"), ORIGIN)
    )
    assert f"{TOPIC} was created again (topic id id-0; now id-1)" in str(
        why_emptied(replace(ORIGIN, topic_id="id-0"), ORIGIN)
    )
    assert "has 4 partitions, not 2" in str(why_emptied(replace(ORIGIN, partitions=2), ORIGIN))
    # A broker that gives no topic id: compared on the rest.
    assert why_emptied(replace(ORIGIN, topic_id=None), ORIGIN) is None
    assert why_emptied(ORIGIN, replace(ORIGIN, topic_id=None)) is None


def test_an_origin_and_an_offset_read_back_as_written() -> None:
    assert StoreOrigin.loads(ORIGIN.dumps()) == ORIGIN
    assert StoreOrigin.loads(replace(ORIGIN, topic_id=None).dumps()) == replace(
        ORIGIN, topic_id=None
    )
    assert StoreOrigin.loads(None) is None
    assert StoreOrigin.loads(b"not json") is None
    assert StoreOrigin.loads(b'{"cluster": "x"}') is None
    stored = StoredOffset(12_345, 1_700_000_000.25)
    assert StoredOffset.loads(stored.dumps()) == stored
    assert StoredOffset.loads(b"short") is None


@pytest.mark.parametrize(
    ("offset", "low", "high", "age", "resumed"),
    [
        (7, 0, 10, 60.0, True),
        (0, 0, 10, 60.0, True),
        (10, 0, 10, 60.0, True),  # read to the end: nothing new
        (7, 8, 10, 60.0, False),  # below the low watermark: records deleted since
        (11, 0, 10, 60.0, False),  # beyond the end: another topic of the same name
        (7, 0, 10, 86_400.0, False),  # deletions since may be gone
    ],
)
def test_a_partition_resumes_at_its_stored_offset_only_where_it_is_still_good(
    offset: int, low: int, high: int, age: float, resumed: bool
) -> None:
    now = 1_700_000_000.0
    resume = resume_from(StoredOffset(offset, now - age), low, high, now, DAY_MS)
    assert (resume.offset == offset) if resumed else (resume.offset is None)
    assert (resume.why is None) == resumed
    assert resume_from(None, low, high, now, DAY_MS) == Resume(None)
    # With delete.retention.ms unknown, the age is not checked.
    assert resume_from(StoredOffset(7, 0.0), 0, 10, now, None) == Resume(7)


def test_the_reasons_say_what_is_wrong() -> None:
    now = 1_700_000_000.0
    assert resume_from(StoredOffset(11, now), 0, 10, now, DAY_MS).why == (
        "its stored offset 11 is not within its offsets 0..10"
    )
    assert resume_from(StoredOffset(3, now - 90_000), 0, 10, now, DAY_MS).why == (
        "its stored offset 3 was caught up 90000s ago, longer than the topic keeps "
        "deletions (delete.retention.ms=86400000)"
    )


@pytest.fixture
def stored(tmp_path: Path) -> Iterator[StoredLiveMaps]:
    live = StoredLiveMaps(3600.0, MapStore(tmp_path / "store"), 2)
    yield live
    live.close()


def test_a_store_of_another_topic_is_emptied_and_one_of_the_same_kept(tmp_path: Path) -> None:
    live = StoredLiveMaps(3600.0, MapStore(tmp_path / "store"), 2)
    assert live.keep_if_of(ORIGIN) is None  # a new store: nothing to empty
    feed = MapFeed(Settings(), live, dead_letter=lambda k, v: None, partitioned=True)
    for number in range(6):
        domain = f"d{number}.example"
        feed.apply_record(
            domain.encode(), product_map(1, domain).dumps().encode(), Source(TOPIC, number % 3, 0)
        )
    live.note_offsets({p: StoredOffset(1, 5.0) for p in range(3)})
    summary = live.summary()
    live.close()

    live = StoredLiveMaps(3600.0, MapStore(tmp_path / "store"), 2)
    assert live.keep_if_of(ORIGIN) is None
    assert len(live) == 6 and live.summary() == summary
    assert live.stored_offset(1) == StoredOffset(1, 5.0)
    assert live.stored_partitions(4) == {0, 1, 2}
    assert live.decide(*_product_url("d1.example")).map_version == 1  # held once read

    why = live.keep_if_of(replace(ORIGIN, topic_id="id-2"))
    assert why is not None and "created again" in why
    assert len(live) == 0 and live.summary().domains == live.summary().patterns == 0
    assert live.summary().oldest_update is None
    assert live.map_for("d1.example") is None and live.get("d1.example") is None
    assert live.decide(*_product_url("d1.example")).map_version == 0  # forgotten
    assert live.stored_offset(1) is None and live.stored_partitions(4) == set()
    assert live.origin() == replace(ORIGIN, topic_id="id-2")
    live.close()


def test_a_store_written_in_another_format_is_emptied(tmp_path: Path) -> None:
    live = StoredLiveMaps(3600.0, MapStore(tmp_path / "store"), 2)
    assert live.keep_if_of(ORIGIN) is None
    live.apply(product_map(1, "d1.example"))
    live.store.set_meta("format", b"0")  # as an older version of miqps wrote it
    live.close()

    live = StoredLiveMaps(3600.0, MapStore(tmp_path / "store"), 2)
    why = live.keep_if_of(ORIGIN)
    assert why is not None and "another format" in why
    assert len(live) == 0 and live.map_for("d1.example") is None
    assert live.keep_if_of(ORIGIN) is None  # and now of this one
    live.close()


def _product_url(domain: str) -> tuple[NormalizedURL, str]:
    text = f"https://{domain}/p?id=7&itemid=1&utm_source=x"
    return parse(text), text


def test_forgetting_a_partition_removes_its_stored_offset(stored: StoredLiveMaps) -> None:
    feed = MapFeed(Settings(), stored, dead_letter=lambda k, v: None, partitioned=True)
    feed.apply_record(
        b"a.example", product_map(1, "a.example").dumps().encode(), Source(TOPIC, 1, 0)
    )
    stored.note_offsets({1: StoredOffset(1, 5.0), 2: StoredOffset(0, 5.0)})
    assert stored.stored_partitions(4) == {1, 2}
    assert stored.forget_partition(1) == 1
    assert stored.stored_offset(1) is None and len(stored) == 0
    assert stored.stored_partitions(4) == {2}


# Records of one domain, as a maps partition can hold them: versions going up and down, one
# version published twice with different content, tombstones, and another domain between.
def _records() -> list[tuple[bytes, bytes | None]]:
    a = "a.example"
    changed = replace(product_map(3, a), updated_at="2026-12-03T00:00:00Z")
    return [
        (a.encode(), product_map(1, a).dumps().encode()),
        (b"b.example", product_map(1, "b.example").dumps().encode()),
        (a.encode(), product_map(3, a).dumps().encode()),
        (a.encode(), product_map(2, a).dumps().encode()),  # older: ignored
        (a.encode(), changed.dumps().encode()),  # the same version again, changed: wins
        (b"b.example", None),
        (a.encode(), None),
        (a.encode(), product_map(1, a).dumps().encode()),  # after a tombstone: applies
        (b"b.example", product_map(4, "b.example").dumps().encode()),
        (a.encode(), product_map(5, a).dumps().encode()),
        (a.encode(), None),
        (b"b.example", product_map(4, "b.example").dumps().encode()),  # the same: nothing
    ]


def _state(live: StoredLiveMaps) -> tuple[object, ...]:
    maps: dict[str, DomainMap | None] = {d: live.map_for(d) for d in ("a.example", "b.example")}
    return (
        maps,
        {d: live.get(d) for d in maps},
        live.summary(),
        live.filed_under(0),
        len(live),
    )


def test_applying_again_any_records_already_applied_changes_nothing(
    stored: StoredLiveMaps,
) -> None:
    """The stored offset is noted after the records before it are applied: a crash between
    the two leaves the store ahead of it, and the next start applies again the records
    from the stored offset on. For every topic (each prefix of the records), every point
    the store can be at (``applied``) and every stored offset not after it (``noted``), the
    records from ``noted`` on, applied to that store, leave it as applying them all once
    does: tombstones included."""
    every = _records()
    runs = 0

    def run(records: list[tuple[bytes, bytes | None]], applied: int, noted: int) -> object:
        nonlocal runs
        runs += 1
        stored.keep_if_of(replace(ORIGIN, topic_id=str(runs)))  # emptied
        feed = MapFeed(Settings(), stored, dead_letter=lambda k, v: None, partitioned=True)
        for offset in [*range(applied), *range(noted, len(records))]:
            key, value = records[offset]
            feed.apply_record(key, value, Source(TOPIC, 0, offset))
        return _state(stored)

    for end in range(len(every) + 1):
        records = every[:end]
        once = run(records, 0, 0)
        for applied in range(end + 1):
            for noted in range(applied + 1):
                assert run(records, applied, noted) == once, (end, applied, noted)


@dataclass
class FakeConsumer:
    """What :meth:`MapFeed._take_requests` asks of a consumer."""

    watermarks: dict[int, tuple[int, int]]
    assigned: list[tuple[int, int]] = field(default_factory=list)

    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float = 0.0
    ) -> tuple[int, int]:
        return self.watermarks[partition.partition]

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        self.assigned += [(p.partition, p.offset) for p in partitions]

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        pass


def test_a_partitioned_feed_resumes_its_partitions_and_drops_those_not_followed(
    stored: StoredLiveMaps, caplog: pytest.LogCaptureFixture
) -> None:
    """The first follow: partition 0 resumes at its stored offset; 2's stored offset is
    beyond its end (a topic created again without a topic id), so its maps go and it is
    read from its beginning; 1 is not followed any more: its maps and offset go; 3 has
    nothing stored and is read from its beginning."""
    stored.keep_if_of(ORIGIN)
    writer = MapFeed(Settings(), stored, dead_letter=lambda k, v: None, partitioned=True)
    for number in range(9):
        domain = f"d{number}.example"
        writer.apply_record(
            domain.encode(), product_map(1, domain).dumps().encode(), Source(TOPIC, number % 3, 0)
        )
    stored.note_offsets({p: StoredOffset(3, 1e12) for p in range(3)})  # as_of in the future
    feed = MapFeed(Settings(), stored, dead_letter=lambda k, v: None, partitioned=True)
    restores = feed.follow([0, 2, 3])
    consumer = FakeConsumer({0: (0, 5), 2: (0, 2), 3: (0, 4)})
    with caplog.at_level(logging.INFO, "streams.maps.feed"):
        feed._take_requests(consumer)  # type: ignore[arg-type]
    assert consumer.assigned == [(0, 3), (2, OFFSET_BEGINNING), (3, OFFSET_BEGINNING)]
    assert [restores[p].resumed_from for p in (0, 2, 3)] == [3, None, None]
    assert feed.resumed == {0}
    assert [stored.filed_under(p) for p in range(4)] == [3, 0, 0, 0]
    assert len(stored) == 3 and stored.stored_partitions(4) == {0}
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        f"map feed: {TOPIC} partitions 1 of the kept store are not followed; their 3 domain "
        "maps removed",
        f"map feed: {TOPIC}[2] is read from its beginning, its 3 domain maps removed: its "
        "stored offset 3 is not within its offsets 0..2",
    ]
    # Later follows keep what they do not name.
    feed.follow([1])
    feed._take_requests(FakeConsumer({1: (0, 0)}))  # type: ignore[arg-type]
    assert len(stored) == 3


@dataclass
class FakeTopics:
    """What :func:`streams.kafka.clients.read_to_end` asks of a consumer before it reads."""

    watermarks: dict[int, tuple[int, int]]
    assigned: list[tuple[int, int]] = field(default_factory=list)

    def list_topics(self, topic: str, timeout: float = 0.0) -> object:
        metadata = SimpleNamespace(error=None, partitions=dict.fromkeys(self.watermarks))
        return SimpleNamespace(topics={topic: metadata})

    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float = 0.0
    ) -> tuple[int, int]:
        return self.watermarks[partition.partition]

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.assigned = [(p.partition, p.offset) for p in partitions]


def test_a_feed_of_every_partition_resumes_each_at_its_stored_offset(
    stored: StoredLiveMaps,
) -> None:
    """The front's feed with input of any key: each partition of the kept store resumes
    where it stopped, one whose offset is not good is read from its beginning, its maps
    removed, and only partitions with records left to read are waited for."""
    stored.keep_if_of(ORIGIN)
    writer = MapFeed(Settings(), stored, dead_letter=lambda k, v: None)
    for number in range(4):
        domain = f"d{number}.example"
        writer.apply_record(
            domain.encode(), product_map(1, domain).dumps().encode(), Source(TOPIC, number, 0)
        )
    assert [stored.filed_under(p) for p in range(4)] == [1, 1, 1, 1]  # filed, unpartitioned
    stored.note_offsets({0: StoredOffset(1, 1e12), 1: StoredOffset(1, 1e12)})
    stored.note_offsets({2: StoredOffset(9, 1e12)})
    feed = MapFeed(Settings(), stored, dead_letter=lambda k, v: None)
    consumer = FakeTopics({0: (0, 1), 1: (0, 6), 2: (0, 3), 3: (0, 1)})
    pending = _assign(consumer, TOPIC, 1.0, None, feed._start_at)  # type: ignore[arg-type]
    assert consumer.assigned == [(0, 1), (1, 1), (2, OFFSET_BEGINNING), (3, OFFSET_BEGINNING)]
    assert pending == {1: 6, 2: 3, 3: 1}
    assert feed.resumed == {0, 1}
    assert stored.map_for("d2.example") is None and stored.map_for("d3.example") is None
    assert len(stored) == 2
