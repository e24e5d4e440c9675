"""With input keyed by domain, each canonicalizer front follows only the maps partitions of
its input partitions (docs/STREAMS.md, "Co-partitioning by domain"), on the real broker:
two fronts sharing 4 partitions keep only the maps of their partitions' domains and
canonicalize as ``miqps canonicalize --maps`` does with every map; when one stops, the
other restores the maps of the partitions it takes before it reads their input, and
canonicalizes the moved domains with their maps, losing no input; a map published after
the restore reaches it. At least once and exactly once; with input keyed by its
producers, and with input of any key re-keyed by the repartition hop
(``MIQPS_REPARTITION_INPUT``), where bad input is dead-lettered naming the original
input."""

from __future__ import annotations

import base64
import random
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from miqps.urls import parse
from streams.kafka.admin import ensure_topics
from streams.kafka.partitioning import key_partition
from streams.settings import Settings
from testkit.scrape import free_port, scrape, value
from testkit.tools import TopicReader, WorkerProcess, delete_topics, isolated_settings, produce
from testkit.urlgen import build_maps, generate
from tests.streams.maps.test_live_store_worker import (
    cli_decisions,
    comparable,
    publish,
    without_first_pattern,
)
from tests.streams.test_copartitioning import two_canonicalizers, wait_for_two_fronts, wait_until

# 15-25 s here per guarantee, beside a CI run: two workers' start, a rebalance, the CLI
# twice.
pytestmark = pytest.mark.timeout(150)

PARTITIONS = 4
MAPPED_SITES = 24


def front_figures(port: int) -> dict[str, float]:
    """The front's figures (the worker's Faust process has its own maps partitions)."""
    samples = scrape(port)
    figures = {"miqps_front_domains_live": value(samples, "miqps_front_domains_live")}
    for name in (
        "miqps_maps_partitions_owned",
        "miqps_maps_partitions_restoring",
        "miqps_maps_restores_total",
        "miqps_maps_restore_records_total",
        "miqps_maps_restore_seconds_total",
    ):
        figures[name] = value(samples, name, process="front")
    return figures


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
@pytest.mark.parametrize("keys", ["keyed", "hop"])
def test_each_front_holds_and_restores_only_its_partitions_maps(
    bootstrap: str, tmp_path: Path, guarantee: str, keys: str
) -> None:
    hop = keys == "hop"
    settings = isolated_settings(
        Settings.from_env({"KAFKA_BOOTSTRAP_SERVERS": bootstrap}),
        "partmaps",
        tmp_path / "state",
        partitions=PARTITIONS,
    ).with_overrides(
        input_keyed_by_domain=not hop, repartition_input=hop, processing_guarantee=guarantee
    )
    exactly_once = settings.exactly_once
    topics = settings.topics
    ensure_topics(settings)
    urls, sites = generate(6_000, seed=83)
    maps = {m.domain: m for m in build_maps(sites[:MAPPED_SITES], random.Random(84))}
    publish(settings, list(maps.values()))
    host_of = {url: parse(url).host for url in urls}
    partition_of = {
        host: key_partition(host.encode(), PARTITIONS) for host in set(host_of.values())
    }
    assert set(maps) <= set(host_of.values())
    phase_one, phase_two = urls[: len(urls) // 2], urls[len(urls) // 2 :]

    workers, ports = two_canonicalizers(settings, tmp_path)
    outputs = TopicReader(settings, topics.canonical)
    seen: dict[str, list[dict[str, Any]]] = {}
    read = 0

    def logs() -> str:
        return "\n".join(worker.log_digest() for worker in workers)

    def read_outputs(wanted: list[str], timeout: float = 120.0) -> None:
        nonlocal read
        deadline = time.monotonic() + timeout
        while any(url not in seen for url in wanted):
            assert time.monotonic() < deadline, logs()
            outputs.poll(0.3)
            for _, record, _ in outputs.records[read:]:
                document = orjson.loads(record or b"")
                seen.setdefault(document["url"], []).append(document)
            read = len(outputs.records)

    def produce_keyed(texts: list[str]) -> None:
        """Keyed by domain, or, for the hop, by anything but the domain."""
        produce(
            settings,
            topics.raw,
            (url.encode() for url in texts),
            (str(random.random()).encode() if hop else host_of[url].encode() for url in texts),
        )

    def same_as_the_cli(phase: list[str]) -> Counter[str]:
        read_outputs(phase)
        expected = cli_decisions(list(maps.values()), phase, tmp_path)
        different = [
            (d["url"], [comparable(o) for o in seen[d["url"]]], comparable(d))
            for d in expected
            if any(comparable(output) != comparable(d) for output in seen[d["url"]])
        ]
        assert different == [], logs()
        return Counter(d["status"] for d in expected)

    def live_version(domain: str, version: int) -> None:
        for attempt in range(100):
            url = f"https://{domain}/probe/{attempt}?id=1&utm_source=x"
            host_of[url] = domain
            produce_keyed([url])
            read_outputs([url], 30.0)
            if seen[url][-1]["map_version"] == version:
                return
            time.sleep(0.2)
        raise AssertionError(f"{domain} v{version} never went live: {logs()}")

    try:
        assigned = list(wait_for_two_fronts(settings, workers).values())
        produce_keyed(phase_one)
        statuses = same_as_the_cli(phase_one)
        assert statuses["learned"] > 0 and statuses["provisional"] > 0
        if hop:
            dead_letters_name_the_original_input(settings)

        # Each front keeps the maps of its two partitions' domains, and none of the others.
        expected = sorted(
            float(sum(partition_of[domain] in mine for domain in maps)) for mine in assigned
        )
        figures: list[dict[str, float]] = []

        def settled() -> bool:
            figures[:] = [front_figures(port) for port in ports]
            return all(
                f["miqps_maps_partitions_owned"] == 2 and f["miqps_maps_partitions_restoring"] == 0
                for f in figures
            )

        wait_until(settled, 30, lambda: f"{figures}\n{logs()}")
        held = sorted(f["miqps_front_domains_live"] for f in figures)
        print(f"domains live in the fronts: {held}; mapped in their partitions: {expected}")
        assert held == expected and sum(held) == len(maps)
        before = figures[0]
        kept = last_assignment(workers[0])
        assert len(kept) == 2

        # The second front goes: the first takes its partitions, restores their maps
        # before it reads their input, and canonicalizes the moved domains with them.
        assert workers[1].stop() == 0, logs()
        produce_keyed(phase_two)
        same_as_the_cli(phase_two)
        moved = {domain for domain in maps if partition_of[domain] not in kept}
        assert moved
        moved_urls = [url for url in phase_two if host_of[url] in moved]
        assert any(seen[url][-1]["status"] == "learned" for url in moved_urls)
        after: dict[str, float] = {}

        def took_over() -> bool:
            after.update(front_figures(ports[0]))
            return after["miqps_maps_partitions_owned"] == PARTITIONS

        wait_until(took_over, 15, lambda: f"{after}\n{logs()}")
        print(f"the survivor before the rebalance: {before}; after: {after}")
        assert after["miqps_front_domains_live"] == len(maps)
        # Only the two partitions that moved were read, not the two kept.
        assert after["miqps_maps_restores_total"] == before["miqps_maps_restores_total"] + 2
        assert after["miqps_maps_restore_records_total"] == (
            before["miqps_maps_restore_records_total"] + len(moved)
        )

        # A map published after the restore reaches its owner.
        moved_domain = sorted(moved)[0]
        updated = without_first_pattern(maps[moved_domain], maps[moved_domain].version + 1)
        publish(settings, [updated])
        live_version(updated.domain, updated.version)

        inputs = Counter(phase_one + phase_two)
        every = Counter({url: len(seen[url]) for url in inputs})
        assert every >= inputs  # no input lost
        if exactly_once:
            assert every == inputs, [url for url in inputs if every[url] != inputs[url]][:5]
        assert workers[0].alive(), logs()
    finally:
        outputs.close()
        for worker in workers:
            worker.stop()
        delete_topics(settings)


def dead_letters_name_the_original_input(settings: Settings) -> None:
    """Bad input crosses the hop under its own key, and its dead letter names where it
    was read in the input topic, not in the hop's."""
    bad = {b"bad-1": b"not a url at all", b"bad-2": b'{"url": 7}'}
    produce(settings, settings.topics.raw, bad.values(), bad.keys())
    letters = TopicReader(settings, settings.topics.dlq)
    try:
        deadline = time.monotonic() + 60
        while len(letters.records) < len(bad):
            assert time.monotonic() < deadline, letters.records
            letters.poll(0.3)
        documents = [orjson.loads(record or b"") for _, record, _ in letters.records]
    finally:
        letters.close()
    assert sorted(base64.b64decode(d["key"]) for d in documents) == sorted(bad), documents
    assert {d["topic"] for d in documents} == {settings.topics.raw}, documents
    assert all(d["reason"] and d["stage"] == "canonicalize" for d in documents)


def last_assignment(worker: WorkerProcess) -> set[int]:
    """The input partitions the worker's front holds since its last rebalance callback,
    from its log."""
    found = re.findall(
        r"canonicalizer: \w+ partitions \[[0-9, ]*\]; holds \[([0-9, ]*)\]", worker.log_text()
    )
    assert found, worker.log_digest()
    return {int(number) for number in found[-1].split(",") if number.strip()}


def test_a_third_front_joining_takes_one_partition_and_moves_no_other(
    bootstrap: str, tmp_path: Path
) -> None:
    """Under the cooperative protocol (``MIQPS_FRONT_REBALANCE``'s default) a front that
    joins takes its share from the fronts there, which give up one partition between them,
    restore nothing and keep reading the others; no input is lost."""
    settings = isolated_settings(
        Settings.from_env({"KAFKA_BOOTSTRAP_SERVERS": bootstrap}),
        "joinmaps",
        tmp_path / "state",
        partitions=PARTITIONS,
    ).with_overrides(input_keyed_by_domain=True)
    topics = settings.topics
    ensure_topics(settings)
    urls, sites = generate(2_000, seed=91)
    publish(settings, build_maps(sites[:MAPPED_SITES], random.Random(92)))
    host_of = {url: parse(url).host for url in urls}
    workers, ports = two_canonicalizers(settings, tmp_path)
    port = free_port()
    third = WorkerProcess(
        settings.with_overrides(metrics_port=port, state_dir=tmp_path / "state-three"),
        "canonicalize",
        tmp_path / "worker-three.log",
    )
    outputs = TopicReader(settings, topics.canonical)
    seen: Counter[str] = Counter()

    def logs() -> str:
        return "\n".join(worker.log_digest() for worker in [*workers, third])

    def all_out(wanted: list[str]) -> None:
        deadline = time.monotonic() + 120
        read = sum(seen.values())
        while any(url not in seen for url in wanted):
            assert time.monotonic() < deadline, logs()
            outputs.poll(0.3)
            for _, record, _ in outputs.records[read:]:
                seen[orjson.loads(record or b"")["url"]] += 1
            read = len(outputs.records)

    def produce_keyed(texts: list[str]) -> None:
        produce(
            settings,
            topics.raw,
            (url.encode() for url in texts),
            (host_of[url].encode() for url in texts),
        )

    def figures_when(condition: Any, of_ports: list[int]) -> list[dict[str, float]]:
        figures: list[dict[str, float]] = []

        def met() -> bool:
            try:
                figures[:] = [front_figures(one) for one in of_ports]
            except OSError:  # a worker that is starting serves no metrics yet
                return False
            return bool(condition(figures))

        wait_until(met, 60, lambda: f"{figures}\n{logs()}")
        return figures

    try:
        wait_for_two_fronts(settings, workers)
        produce_keyed(urls[:1_000])
        all_out(urls[:1_000])
        before = figures_when(
            lambda found: all(
                f["miqps_maps_partitions_owned"] == 2 and f["miqps_maps_partitions_restoring"] == 0
                for f in found
            ),
            ports,
        )
        held_before = [last_assignment(worker) for worker in workers]
        logged_before = [len(worker.log_text()) for worker in workers]

        third.start()
        after = figures_when(
            lambda found: (
                [f["miqps_maps_partitions_owned"] for f in found] in ([1, 2, 1], [2, 1, 1])
                and found[2]["miqps_maps_partitions_restoring"] == 0
            ),
            [*ports, port],
        )
        produce_keyed(urls[1_000:])
        all_out(urls)
        held_after = [last_assignment(worker) for worker in workers]
        revoked = [
            {
                int(number)
                for found in re.findall(
                    r"canonicalizer: revoked partitions \[([0-9, ]*)\]",
                    worker.log_text()[logged:],
                )
                for number in found.split(",")
                if number.strip()
            }
            for worker, logged in zip(workers, logged_before, strict=True)
        ]
        print(f"held before the join: {held_before}; after: {held_after}; revoked: {revoked}")
        assert sum(map(len, revoked)) == 1, logs()
        assert all(a <= b for a, b in zip(held_after, held_before, strict=True)), logs()
        for old, new in zip(before, after[:2], strict=True):
            assert new["miqps_maps_restores_total"] == old["miqps_maps_restores_total"]
        assert after[2]["miqps_maps_restores_total"] == 1
        assert all(third.alive() and worker.alive() for worker in workers), logs()
        assert set(seen) == set(urls)
    finally:
        outputs.close()
        for worker in [*workers, third]:
            worker.stop()
        delete_topics(settings)
