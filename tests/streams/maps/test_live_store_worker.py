"""A worker whose processes keep the maps on disk and hold two domains' maps at most
(``MIQPS_MAPS_CACHE_DOMAINS=2``), on the real broker: it canonicalizes a mixed stream over
ten mapped domains exactly as ``miqps canonicalize --maps`` does with every map in memory;
a map published, replaced or deleted after its start is live on the next URLs of its
domain; and ``miqps_maps_held`` shows the bound in the front and in the worker process."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest

from miqps.maps import DomainMap, utc_now, write_maps
from miqps.urls import parse
from streams.kafka.admin import ensure_topics
from streams.settings import Settings
from testkit.scrape import free_port, scrape, value
from testkit.tools import TopicReader, WorkerProcess, delete_topics, isolated_settings, produce
from testkit.urlgen import build_maps, generate

# About 10 s alone here: the worker's start, two phases of URLs, the CLI twice.
pytestmark = pytest.mark.timeout(90)

CACHE = 2
INVALID = ["not a url", "http://[::1/p?id=1", "https://exa mple.com/?q=1"]


def publish(settings: Settings, maps: list[DomainMap]) -> None:
    produce(
        settings,
        settings.topics.maps,
        (m.dumps().encode() for m in maps),
        (m.domain.encode() for m in maps),
    )


def without_first_pattern(domain_map: DomainMap, version: int) -> DomainMap:
    """Another version of ``domain_map``: its first pattern is no longer decided."""
    return replace(
        domain_map, version=version, patterns=dict(list(domain_map.patterns.items())[1:])
    )


def cli_decisions(maps: list[DomainMap], urls: list[str], folder: Path) -> list[dict[str, Any]]:
    """``miqps canonicalize --maps FILE --json`` on ``urls``: every map held in memory."""
    path = folder / f"maps-{time.monotonic_ns()}.jsonl"
    write_maps(path, maps)
    result = subprocess.run(
        [sys.executable, "-m", "miqps.cli", "canonicalize", "--maps", str(path), "--json"],
        input="\n".join(urls) + "\n",
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return [json.loads(line) for line in result.stdout.splitlines()]


def comparable(decision: dict[str, Any]) -> tuple[object, ...]:
    return (
        decision["canonical_url"],
        decision["pattern"],
        sorted(decision["kept"]),
        sorted(decision["dropped"]),
        decision["status"],
        decision["map_version"],
    )


def held_maps(settings: Settings) -> dict[tuple[str, str], float]:
    """``miqps_maps_held`` by (process, form), once the front's figures are there."""
    assert settings.metrics_port is not None
    samples = scrape(settings.metrics_port)
    return {
        (sample.labels["process"], sample.labels["form"]): sample.value
        for sample in samples.get("miqps_maps_held", [])
    }


def test_a_worker_holding_two_maps_canonicalizes_as_the_cli_holding_all(
    bootstrap: str, tmp_path: Path
) -> None:
    urls, sites = generate(4_000, seed=61)
    mapped, late, unmapped = sites[:10], sites[10], sites[11:16]
    maps = {m.domain: m for m in build_maps([*mapped, late], random.Random(62))}
    for domain in list(maps)[::2]:  # decided just now: not due, so the compiled path's
        maps[domain] = replace(
            maps[domain],
            patterns={
                key: replace(decision, decided_at=utc_now())
                for key, decision in maps[domain].patterns.items()
            },
        )
    late_map = maps.pop(late.ascii_host)
    hosts = {site.ascii_host for site in [*mapped, late, *unmapped]}
    ours = [url for url in urls if parse(url).host in hosts]
    phase_one = ours[: len(ours) // 2] + INVALID
    phase_two = ours[len(ours) // 2 :] + INVALID
    assert len({parse(url).host for url in ours}) == 16

    settings = isolated_settings(
        Settings.from_env({"KAFKA_BOOTSTRAP_SERVERS": bootstrap}),
        "mapstore",
        tmp_path / "state",
        partitions=2,
        metrics_port=free_port(),
    )
    ensure_topics(settings)
    first = sorted(maps.values(), key=lambda m: m.domain)
    # A newer version published before an older one: the older one must not replace it.
    ahead = without_first_pattern(first[0], first[0].version + 5)
    publish(settings, [ahead, *first])
    maps[ahead.domain] = ahead
    outputs = TopicReader(settings, settings.topics.canonical)
    dead = TopicReader(settings, settings.topics.dlq)
    worker = WorkerProcess(
        settings,
        "canonicalize",
        tmp_path / "worker.log",
        {"MIQPS_MAPS_CACHE_DOMAINS": str(CACHE)},
    ).start()
    seen: dict[str, dict[str, Any]] = {}
    read = 0

    def read_outputs(wanted: list[str], timeout: float = 60.0) -> None:
        nonlocal read
        deadline = time.monotonic() + timeout
        while any(url not in seen for url in wanted):
            assert time.monotonic() < deadline and worker.alive(), worker.log_digest()
            outputs.poll(0.3)
            for _, record, _ in outputs.records[read:]:
                document = orjson.loads(record or b"")
                seen[document["url"]] = document
            read = len(outputs.records)

    def same_as_the_cli(phase: list[str]) -> None:
        valid = [url for url in phase if url not in INVALID]
        read_outputs(valid, 120.0)
        expected = cli_decisions(list(maps.values()), phase, tmp_path)
        assert [d["url"] for d in expected if "error" in d] == INVALID
        different = [
            (d["url"], comparable(seen[d["url"]]), comparable(d))
            for d in expected
            if "error" not in d and comparable(seen[d["url"]]) != comparable(d)
        ]
        assert different == []
        statuses = {seen[url]["status"] for url in valid}
        assert statuses == {"learned", "provisional"}

    def bounded() -> None:
        """At rest, each process holds at most ``CACHE`` maps in each form, and the front
        some; the worker's Faust process has the 10 maps live. The front sends its
        figures once a second, so the first ones read may be from before it met any URL,
        and the Faust process restores its maps partitions once Faust assigns it its
        partitions, which can be after the front's first outputs."""
        assert settings.metrics_port is not None
        port = settings.metrics_port
        deadline = time.monotonic() + 15
        held = held_maps(settings)
        live = value(scrape(port), "miqps_domains_live")
        while not (
            len(held) == 4
            and max(held.values()) <= CACHE
            and held[("front", "compiled")] >= 1
            and live == 10
        ):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"held in memory: {held}, domains live: {live}\n{worker.log_digest()}"
                )
            time.sleep(0.5)
            held = held_maps(settings)
            live = value(scrape(port), "miqps_domains_live")

    def live_version(domain: str, version: int) -> None:
        for attempt in range(100):
            url = f"https://{domain}/probe/{attempt}?id=1&utm_source=x"
            produce(settings, settings.topics.raw, [url.encode()])
            read_outputs([url])
            if seen[url]["map_version"] == version:
                return
            time.sleep(0.2)
        raise AssertionError(f"{domain} v{version} never went live: {worker.log_digest()}")

    try:
        produce(settings, settings.topics.raw, (url.encode() for url in phase_one))
        same_as_the_cli(phase_one)
        bounded()

        # After the start: a new domain's map, a new version, a deletion (tombstone).
        updated = without_first_pattern(first[1], first[1].version + 1)
        removed = first[2].domain
        publish(settings, [late_map, updated])
        produce(settings, settings.topics.maps, [None], [removed.encode()])
        maps[late_map.domain] = late_map
        maps[updated.domain] = updated
        del maps[removed]
        live_version(late_map.domain, late_map.version)
        live_version(updated.domain, updated.version)
        live_version(removed, 0)
        produce(settings, settings.topics.raw, (url.encode() for url in phase_two))
        same_as_the_cli(phase_two)
        bounded()
        assert dead.wait_for(2 * len(INVALID), 30)
        assert worker.alive()
    finally:
        worker.stop()
        outputs.close()
        dead.close()
        delete_topics(settings)
