"""The worker's metric collectors without a broker: what each reads, the bounds on label
values, and that one exposition never holds two families of one name."""

from __future__ import annotations

import asyncio
import multiprocessing
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from miqps.maps import timestamp_seconds
from miqps.mapstore import MapStore
from streams.front.metrics import (
    MapsHeldCollector,
    consumer_lag,
    lag_by_partition,
    restore_families,
)
from streams.maps.feed import RestoreTotals
from streams.maps.live import LiveMaps, StoredLiveMaps
from streams.messages import MapUpdateRecord
from streams.ops.metrics import (
    OTHER_HOSTS,
    FrontSnapshots,
    HostLabels,
    LiveMapsCollector,
    MapUpdateCounts,
    MergedCollector,
    OwnedMapsCollector,
    WorkerMetrics,
    state_bytes,
)
from streams.settings import Settings
from streams.worker.ownedmaps import OwnedMaps
from testkit.scrape import free_port, scrape, value
from testkit.urlgen import learned_maps
from tests.streams.worker.test_ownedmaps import TP, Feed


def test_the_lag_is_read_for_held_partitions_only() -> None:
    statistics = {
        "topics": {
            "urls.raw": {
                "partitions": {
                    "0": {"consumer_lag": 12, "fetch_state": "active"},
                    "1": {"consumer_lag": 0, "fetch_state": "active"},
                    "2": {"consumer_lag": -1, "fetch_state": "active"},  # no committed offset yet
                    "3": {"consumer_lag": 7, "fetch_state": "none"},  # not assigned to us
                    "-1": {"consumer_lag": 5, "fetch_state": "none"},  # librdkafka's unassigned
                }
            }
        }
    }
    assert lag_by_partition(statistics) == {("urls.raw", 0): 12, ("urls.raw", 1): 0}


def test_a_held_partition_whose_lag_turns_unknown_keeps_its_last_figure() -> None:
    def statistics(lag: int, fetch_state: str = "active") -> dict[str, Any]:
        partition = {"consumer_lag": lag, "fetch_state": fetch_state}
        return {"topics": {"urls.raw": {"partitions": {"0": partition}}}}

    known = lag_by_partition(statistics(4))
    assert lag_by_partition(statistics(-1), known) == {("urls.raw", 0): 4}
    assert lag_by_partition(statistics(2), known) == {("urls.raw", 0): 2}
    assert lag_by_partition(statistics(-1, "none"), known) == {}, "a partition given up goes"


def test_host_labels_are_bounded_and_keep_their_hosts() -> None:
    labels = HostLabels(limit=2)
    first = labels.fold({"a.test": 5.0, "b.test": 3.0, "c.test": 1.0})
    assert first == {"a.test": 5.0, "b.test": 3.0, OTHER_HOSTS: 1.0}
    later = labels.fold({"a.test": 5.0, "b.test": 3.0, "c.test": 9.0, "d.test": 2.0})
    assert later == {"a.test": 5.0, "b.test": 3.0, OTHER_HOSTS: 11.0}, (
        "a host once labelled keeps its series, so its counter never jumps"
    )
    many = HostLabels(limit=20).fold({f"h{n}.test": float(n) for n in range(1000)})
    assert len(many) == 21 and sum(many.values()) == sum(range(1000))


def audit(accepted: bool, kept_after: tuple[str, ...] | None) -> MapUpdateRecord:
    undecided = MapUpdateRecord.undecided("a.example", "/p?id", "enough-samples", 1, "", None, 0)
    return replace(undecided, accepted=accepted, kept_after=kept_after)


def test_map_update_records_are_counted_by_verdict() -> None:
    counts = MapUpdateCounts()
    counts.count([audit(True, ("id",)), audit(False, ("id",)), audit(False, None), audit(True, ())])
    assert counts.by_verdict == {"accepted": 2, "rejected": 1, "undecided": 1}


def test_state_bytes_are_summed_by_table(tmp_path: Path) -> None:
    tables = tmp_path / "miqps-data" / "v1" / "tables"
    for name, size in (
        ("pattern-stats-0.db/000012.sst", 100),
        ("pattern-stats-0.db/LOG", 20),
        ("pattern-stats-3.db/000007.sst", 50),
        ("probe-demand-1.db/000004.sst", 30),
    ):
        (tables / name).parent.mkdir(parents=True, exist_ok=True)
        (tables / name).write_bytes(b"x" * size)
    (tmp_path / "lock").write_bytes(b"x" * 4)
    assert state_bytes(tmp_path) == {"pattern-stats": 170, "probe-demand": 30, "other": 4}
    for process, size in (("front", 7), ("worker", 9)):
        (tmp_path / "live-maps" / process).mkdir(parents=True)
        (tmp_path / "live-maps" / process / "000009.sst").write_bytes(b"x" * size)
    assert state_bytes(tmp_path)["live-maps"] == 16
    assert state_bytes(tmp_path / "absent") == {}


def test_live_maps_give_domains_patterns_and_the_oldest_update() -> None:
    live_maps = LiveMaps(3600.0)
    maps = learned_maps(
        [f"https://d{n}.test/p?id=1&utm_source=x" for n in range(3)]
        + ["https://d0.test/q?page=2&gclid=y"]
    )
    maps[1].updated_at = "2026-12-01T00:00:00Z"
    for domain_map in maps:
        live_maps.apply(domain_map)
    now = timestamp_seconds("2026-12-01T00:01:30Z")
    found = {
        family.name: family.samples[0].value
        for family in LiveMapsCollector(live_maps, lambda: now).collect()
    }
    assert found == {
        "miqps_domains_live": 3,
        "miqps_patterns_live": 4,
        "miqps_oldest_map_age_seconds": 90.0,
    }


def test_maps_held_says_what_a_process_holds_in_memory() -> None:
    live_maps = LiveMaps(3600.0)
    for domain_map in learned_maps([f"https://d{n}.test/p?id=1&gclid=x" for n in range(3)]):
        live_maps.apply(domain_map)
    family, read = MapsHeldCollector(live_maps, "front").collect()
    assert family.name == "miqps_maps_held"
    assert {(s.labels["process"], s.labels["form"]): s.value for s in family.samples} == {
        ("front", "compiled"): 3,
        ("front", "live"): 3,
    }
    assert [(s.name, s.labels, s.value) for s in read.samples] == [
        ("miqps_maps_read_total", {"process": "front"}, 0)
    ]


def test_maps_read_counts_the_cold_domains_of_maps_on_disk(tmp_path: Path) -> None:
    """A process whose maps are on disk counts each map it read because a URL of a domain
    it did not hold came: twice for a domain met again after the bound pushed it out."""
    live_maps = StoredLiveMaps(3600.0, MapStore(tmp_path / "maps"), cache_domains=1)
    try:
        for domain_map in learned_maps([f"https://d{n}.test/p?id=1&gclid=x" for n in range(2)]):
            live_maps.apply(domain_map)
        for text in ("https://d0.test/p?id=2", "https://d0.test/p?id=3", "https://d1.test/p?id=2"):
            live_maps.canonicalizer.canonicalize(text)
        live_maps.canonicalizer.canonicalize("https://d0.test/p?id=4")

        def read() -> float:
            families = MapsHeldCollector(live_maps, "front").collect()
            [sample] = next(f for f in families if f.name == "miqps_maps_read").samples
            return sample.value

        assert read() == 3
        live_maps.canonicalizer.canonicalize("https://d0.test/p?id=5")
        assert read() == 3
    finally:
        live_maps.close()


class Fixed(Collector):
    def __init__(self, *families: Metric) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families


def lag_family(consumer: str, lag: int) -> GaugeMetricFamily:
    return consumer_lag({(consumer, "t", 0): lag})


def test_families_of_one_name_from_two_sources_are_exposed_as_one() -> None:
    registry = CollectorRegistry()
    registry.register(
        MergedCollector([Fixed(lag_family("canonicalizer", 3)), Fixed(lag_family("probe", 4))])
    )
    for _ in range(2):  # collecting again does not pile up samples
        families = list(text_string_to_metric_families(generate_latest(registry).decode()))
        assert [family.name for family in families] == ["miqps_consumer_lag"]
        assert sorted(sample.value for sample in families[0].samples) == [3, 4]


def test_the_front_s_and_the_worker_s_maps_partitions_are_told_apart_by_process() -> None:
    """Both processes of a worker follow maps partitions; one exposition holds both."""
    owned = OwnedMaps(Feed(), ("samples",), 4)
    owned.assigned([TP("samples", 1), TP("samples", 2)])
    worker = OwnedMapsCollector(owned, RestoreTotals(partitions=1, records=7, seconds=0.5))
    front = Fixed(*restore_families("front", 4, 1, RestoreTotals(3, 20, 1.5)))
    registry = CollectorRegistry()
    registry.register(MergedCollector([front, worker]))
    found: dict[tuple[str, str], float] = {
        (sample.name, sample.labels["process"]): sample.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for sample in family.samples
        if not sample.name.endswith("_created")
    }
    assert found == {
        ("miqps_maps_partitions_owned", "front"): 4,
        ("miqps_maps_partitions_owned", "worker"): 2,
        ("miqps_maps_partitions_restoring", "front"): 1,
        ("miqps_maps_partitions_restoring", "worker"): 2,
        ("miqps_maps_restores_total", "front"): 3,
        ("miqps_maps_restores_total", "worker"): 1,
        ("miqps_maps_restore_records_total", "front"): 20,
        ("miqps_maps_restore_records_total", "worker"): 7,
        ("miqps_maps_restore_seconds_total", "front"): 1.5,
        ("miqps_maps_restore_seconds_total", "worker"): 0.5,
    }


def test_the_front_snapshot_arriving_over_a_pipe_is_served_with_an_up_gauge() -> None:
    receiving, sending = multiprocessing.get_context("spawn").Pipe(duplex=False)
    snapshots = FrontSnapshots(receiving)
    assert [(f.name, f.samples[0].value) for f in snapshots.collect()] == [("miqps_front_up", 0)]
    snapshots.start()
    sending.send([lag_family("canonicalizer", 9)])
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and len(list(snapshots.collect())) < 2:
        time.sleep(0.01)
    up, lag = snapshots.collect()
    assert (up.name, up.samples[0].value) == ("miqps_front_up", 1)
    assert lag.samples[0].labels == {"consumer": "canonicalizer", "topic": "t", "partition": "0"}
    sending.close()


def test_the_endpoint_serves_the_live_maps_until_stopped(tmp_path: Path) -> None:
    port = free_port()
    live_maps = LiveMaps(3600.0)
    for domain_map in learned_maps(["https://a.test/p?id=1", "https://b.test/p?id=2"]):
        live_maps.apply(domain_map)
    metrics = WorkerMetrics(Settings(state_dir=tmp_path, metrics_port=port), live_maps)
    loop = asyncio.new_event_loop()
    running = threading.Thread(target=loop.run_forever, daemon=True)
    running.start()
    metrics.start(loop, None)
    try:
        metrics.map_updates.count([audit(True, ("id",))])
        found = scrape(port)
    finally:
        metrics.stop()
        loop.call_soon_threadsafe(loop.stop)
        running.join(5)
        loop.close()
    assert value(found, "miqps_domains_live") == 2
    assert value(found, "miqps_map_updates_total", verdict="accepted") == 1, (
        "read on the event loop"
    )
    assert value(found, "miqps_process_resident_memory_bytes") > 0
    with pytest.raises(OSError):
        scrape(port)


def test_a_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        metrics = WorkerMetrics(Settings(state_dir=tmp_path, metrics_port=port), LiveMaps(3600.0))
        with pytest.raises(RuntimeError, match=f"MIQPS_METRICS_PORT={port}: cannot serve"):
            metrics.start(asyncio.new_event_loop(), None)


def test_without_a_port_nothing_is_served(tmp_path: Path) -> None:
    metrics = WorkerMetrics(Settings(state_dir=tmp_path), LiveMaps(3600.0))
    metrics.start(asyncio.new_event_loop(), None)
    metrics.stop()
