"""The Faust process of each worker holds only the maps of the domains its agents own
(docs/STREAMS.md, "Co-partitioning by domain"), on the real broker: two probing workers
sharing 4 partitions follow disjoint maps partitions and hold only their domains' maps; a
map published after the restore reaches its owner only; when one worker stops, the other
restores the partitions it takes, and answers the probe requests of their domains only
after that restore, from the maps (already decided: nothing fetched, nothing published)."""

from __future__ import annotations

import random
import re
import socket
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest

from miqps.maps import DomainMap
from streams.kafka.admin import ensure_topics
from streams.kafka.partitioning import key_partition
from streams.messages import ProbeRequest, RequestedPattern
from streams.settings import Settings
from testkit.scrape import free_port, scrape, value
from testkit.tools import TopicReader, WorkerProcess, delete_topics, isolated_settings, produce
from testkit.urlgen import build_maps, generate
from tests.streams.maps.test_live_store_worker import publish

# Two workers' start and a rebalance: about 40 s here.
pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

PARTITIONS = 4
MAPPED_SITES = 24
FOLLOWED = re.compile(r"maps partitions followed: ([\d, ]+|none) \(")
STAMP = r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+)"


def figures(port: int) -> dict[str, float]:
    samples = scrape(port)
    return {
        "domains": value(samples, "miqps_domains_live"),
        "owned": value(samples, "miqps_maps_partitions_owned", process="worker"),
        "restoring": value(samples, "miqps_maps_partitions_restoring", process="worker"),
        "restores": value(samples, "miqps_maps_restores_total", process="worker"),
        "records": value(samples, "miqps_maps_restore_records_total", process="worker"),
    }


def followed(worker: WorkerProcess) -> set[int]:
    """The maps partitions the worker's last assignment left followed (its log)."""
    found = FOLLOWED.findall(worker.log_text())
    assert found, worker.log_digest()
    return set() if found[-1] == "none" else {int(p) for p in found[-1].split(", ")}


def wait_until(check: Callable[[], bool], timeout: float, why: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(why())
        time.sleep(0.5)


def settled_requests(maps: list[DomainMap]) -> list[ProbeRequest]:
    """For each map, a request for a pattern it decided already: answered from the map
    without a fetch, unless the map is missing."""
    requests = []
    for domain_map in maps:
        pattern = next(iter(domain_map.patterns))
        requests.append(
            ProbeRequest(
                domain_map.domain,
                pattern.split("?")[0],
                {pattern: RequestedPattern("enough-samples", "", 3, 0.0)},
                (f"http://{domain_map.domain}/x?id=1",),
                time.time(),
            )
        )
    return requests


def logged_at(line_pattern: str, log: str) -> float:
    match = re.search(STAMP + r".*" + line_pattern, log, re.MULTILINE)
    assert match, line_pattern
    return datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def test_each_worker_s_faust_process_holds_and_restores_only_its_domains_maps(
    bootstrap: str, tmp_path: Path
) -> None:
    with socket.socket() as closed:  # every fetch fails at once
        closed.bind(("127.0.0.1", 0))
        proxy = f"http://127.0.0.1:{closed.getsockname()[1]}"
    settings = isolated_settings(
        Settings.from_env({"KAFKA_BOOTSTRAP_SERVERS": bootstrap}),
        "workermaps",
        tmp_path / "state",
        partitions=PARTITIONS,
        proxy=proxy,
    )
    topics = settings.topics
    ensure_topics(settings)
    _, sites = generate(2_000, seed=91)
    maps = build_maps(sites[:MAPPED_SITES], random.Random(92))
    publish(settings, maps)
    partition_of = {m.domain: key_partition(m.domain.encode(), PARTITIONS) for m in maps}
    assert set(partition_of.values()) == set(range(PARTITIONS))
    ports = [free_port(), free_port()]
    workers = [
        WorkerProcess(
            settings.with_overrides(state_dir=tmp_path / f"state-{n}", metrics_port=ports[n]),
            "probe",
            tmp_path / f"worker-{n}.log",
        )
        for n in range(2)
    ]
    maps_topic = TopicReader(settings, topics.maps)
    updates = TopicReader(settings, topics.map_updates)

    def digests() -> str:
        return "\n\n".join(worker.log_digest() for worker in workers)

    def held(n: int, partitions: set[int]) -> bool:
        f = figures(ports[n])
        mapped = sum(1 for p in partition_of.values() if p in partitions)
        return f["owned"] == len(partitions) and f["restoring"] == 0 and f["domains"] == mapped

    try:
        for worker in workers:
            worker.start()
        # Both in the group, each following its own half, restored.
        wait_until(
            lambda: (
                all(FOLLOWED.search(w.log_text()) for w in workers)
                and len(followed(workers[0])) == len(followed(workers[1])) == 2
                and held(0, followed(workers[0]))
                and held(1, followed(workers[1]))
            ),
            120,
            digests,
        )
        mine = [followed(worker) for worker in workers]
        assert mine[0].isdisjoint(mine[1]) and mine[0] | mine[1] == set(range(PARTITIONS))
        kept = [sum(1 for p in partition_of.values() if p in m) for m in mine]
        print(f"\n  maps held by each worker's Faust process: {kept} of {MAPPED_SITES}")
        assert sum(kept) == MAPPED_SITES

        # A map published now reaches its owner, and only its owner.
        moved = sorted(d for d, p in partition_of.items() if p in mine[1])
        newer = replace(next(m for m in maps if m.domain == moved[0]), version=2)
        publish(settings, [newer])
        live = f"map live: {newer.domain} v2"
        wait_until(lambda: live in workers[1].log_text(), 30, digests)
        assert live not in workers[0].log_text()

        # One worker stops: the other takes its partitions, restores them, and answers
        # their domains' requests from their maps only after that.
        before = figures(ports[0])
        workers[1].stop()
        produce(
            settings,
            topics.probe_requests,
            [r.to_bytes() for r in settled_requests([m for m in maps if m.domain in moved])],
            [domain.encode() for domain in moved],
        )
        wait_until(lambda: held(0, set(range(PARTITIONS))), 90, digests)
        after = figures(ports[0])
        assert after["restores"] == before["restores"] + len(mine[1])
        assert after["records"] == before["records"] + len(moved) + 1  # and the v2
        skipped = [f"probe {domain}: already decided, skipped" for domain in moved]
        wait_until(lambda: all(s in workers[0].log_text() for s in skipped), 60, digests)
        log = workers[0].log_text()
        for domain in moved:
            restored = logged_at(
                rf"{re.escape(topics.maps)}\[{partition_of[domain]}\] restored", log
            )
            assert restored <= logged_at(re.escape(f"probe {domain}: already decided"), log)
        assert f"map live: {newer.domain} v2" not in log  # read by the restore, not live

        # Nothing was learned again: the maps topic holds only what was published.
        maps_topic.poll(2.0)
        updates.poll(0.5)
        assert len(maps_topic.records) == MAPPED_SITES + 1
        assert updates.records == []
    finally:
        maps_topic.close()
        updates.close()
        for worker in workers:
            worker.stop()
        delete_topics(settings)
