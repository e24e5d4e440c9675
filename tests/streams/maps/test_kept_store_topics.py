"""A kept live-map store is emptied unless it is of the same maps topic (docs/STREAMS.md,
"Live maps"), on the real broker: a feed started on the store of a topic deleted and created
again under the same name, with as many records (so that every stored offset is still
within the new partitions' offsets: only the topic id tells), or on the store of a topic of
another name, empties it with one line saying why and holds only the new topic's maps; one
started again on the same topic keeps it and reads nothing again."""

from __future__ import annotations

import logging
import random
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from miqps.maps import DomainMap
from miqps.mapstore import MapStore
from streams.kafka.admin import ensure_topics
from streams.kafka.partitioning import key_partition
from streams.maps.feed import MapFeed
from streams.maps.live import StoredLiveMaps
from streams.settings import Settings
from testkit.tools import delete_topics, isolated_settings
from testkit.urlgen import build_maps, generate
from tests.streams.maps.test_live_store_worker import publish

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def settings(bootstrap: str, tmp_path: Path) -> Iterator[Settings]:
    settings = isolated_settings(
        Settings.from_env({"KAFKA_BOOTSTRAP_SERVERS": bootstrap}),
        "keptfeed",
        tmp_path / "state",
        partitions=2,
    )
    ensure_topics(settings)
    try:
        yield settings
    finally:
        delete_topics(settings)


def follow(settings: Settings, folder: Path) -> StoredLiveMaps:
    """Run a feed of every partition on the store in ``folder`` until it is ready; return
    the store, open."""
    live = StoredLiveMaps(3600.0, MapStore(folder), 16)
    failures: list[BaseException] = []
    feed = MapFeed(settings, live, failures.append, dead_letter=lambda k, v: None)
    feed.start()
    try:
        assert feed.wait_ready(60) and not failures, failures
    finally:
        feed.stop()
    return live


def created_again(settings: Settings) -> None:
    """Delete the maps topic and create it again, under the same name."""
    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers, "log_level": 0})
    topic = settings.topics.maps
    admin.delete_topics([topic], operation_timeout=30)[topic].result(30)
    deadline = time.monotonic() + 60
    while True:
        try:
            ensure_topics(settings)
            return
        except (KafkaException, RuntimeError):  # still being deleted
            assert time.monotonic() < deadline
            time.sleep(0.5)


def domain_maps(count: int, seed: int) -> list[DomainMap]:
    _, sites = generate(2_000, seed=seed)
    return build_maps(sites[:count], random.Random(seed))


@pytest.mark.parametrize("change", ["created again", "renamed"])
def test_a_store_of_another_maps_topic_is_emptied(
    settings: Settings, tmp_path: Path, caplog: pytest.LogCaptureFixture, change: str
) -> None:
    folder = tmp_path / "live-maps"
    old = domain_maps(6, 51)
    publish(settings, old)
    live = follow(settings, folder)
    assert len(live) == len(old)
    live.close()

    new = [replace(m, domain=f"new-{m.domain}") for m in domain_maps(12, 52)]
    per_partition = [
        Counter(key_partition(m.domain.encode(), 2) for m in maps) for maps in (old, new)
    ]
    assert all(per_partition[1][p] >= per_partition[0][p] for p in (0, 1)), per_partition
    if change == "created again":
        created_again(settings)
        why = f"{settings.topics.maps} was created again (topic id "
    else:
        settings = settings.with_overrides(
            topics=replace(settings.topics, maps=f"{settings.topics.maps}-2")
        )
        ensure_topics(settings)
        why = "it is of another maps topic"
    publish(settings, new)
    with caplog.at_level(logging.INFO, "streams.maps.feed"):
        live = follow(settings, folder)
    try:
        emptied = [r.getMessage() for r in caplog.records if "is emptied" in r.getMessage()]
        assert (
            len(emptied) == 1
            and f"the live-map store in {folder} is emptied: {why}" in (emptied[0])
        ), emptied
        assert len(live) == len(new) == live.summary().domains
        assert all(live.map_for(m.domain) is None for m in old)
        assert all(live.map_for(m.domain) == m for m in new)
    finally:
        live.close()

    # The same topic again: kept, nothing read again.
    caplog.clear()
    with caplog.at_level(logging.INFO, "streams.maps.feed"):
        live = follow(settings, folder)
    try:
        lines = [r.getMessage() for r in caplog.records]
        assert any(f"is kept: {len(new)} domain maps" in line for line in lines), lines
        assert any(
            line.endswith(": 0 records read, 2 of 2 partitions from their stored offsets")
            for line in lines
        ), lines
        assert len(live) == len(new)
    finally:
        live.close()
