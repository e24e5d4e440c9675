"""A worker restarted on its kept state directory (docs/STREAMS.md, "Live maps"), on the real
broker: each of its processes keeps its live-map store, reads only the maps records
published while it was down (its restore lines and metrics say so), sees the map published
and the one deleted meanwhile, and canonicalizes as ``miqps canonicalize --maps`` does. With
input keyed by domain (both processes follow their partitions, restores) and with input
of any key (the front reads every partition to its end, then is ready)."""

from __future__ import annotations

import random
import re
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from miqps.urls import parse
from streams.kafka.admin import ensure_topics
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

# Two starts of a worker, the CLI twice: about 30 s here.
pytestmark = pytest.mark.timeout(180)

PARTITIONS = 4
RESTORED = re.compile(
    r"map feed: \S+\[(\d+)\] restored: (\d+) records, (\d+) domain maps, in [\d.]+s(.*?)\s*$",
    re.MULTILINE,
)
READY = re.compile(
    r"map feed: (\d+) domain maps live after [\d.]+s: (\d+) records read(.*?)\s*$", re.MULTILINE
)


def restore_figures(port: int) -> dict[str, float]:
    samples = scrape(port)
    return (
        {
            f"{name}.{process}": value(samples, f"miqps_maps_{name}_total", process=process)
            for name in ("restores", "restore_records")
            for process in ("front", "worker")
        }
        | {
            f"owned.{process}": value(samples, "miqps_maps_partitions_owned", process=process)
            for process in ("front", "worker")
        }
        | {
            f"restoring.{process}": value(
                samples, "miqps_maps_partitions_restoring", process=process
            )
            for process in ("front", "worker")
        }
    )


@pytest.mark.parametrize("keys", ["keyed", "any"])
def test_a_restarted_worker_reads_only_the_maps_published_while_it_was_down(
    bootstrap: str, tmp_path: Path, keys: str
) -> None:
    keyed = keys == "keyed"
    port = free_port()
    settings = isolated_settings(
        Settings.from_env({"KAFKA_BOOTSTRAP_SERVERS": bootstrap}),
        "keptmaps",
        tmp_path / "state",
        partitions=PARTITIONS,
        metrics_port=port,
    ).with_overrides(input_keyed_by_domain=keyed)
    ensure_topics(settings)
    urls, sites = generate(4_000, seed=71)
    mapped, late, unmapped = sites[:12], sites[12], sites[13:16]
    maps = {m.domain: m for m in build_maps([*mapped, late], random.Random(72))}
    late_map = maps.pop(late.ascii_host)
    first = sorted(maps.values(), key=lambda m: m.domain)
    publish(settings, first)
    hosts = {site.ascii_host for site in [*mapped, late, *unmapped]}
    ours = [url for url in urls if parse(url).host in hosts]
    phase_one, phase_two = ours[: len(ours) // 2], ours[len(ours) // 2 :]
    assert any(parse(url).host == late.ascii_host for url in phase_two)
    outputs = TopicReader(settings, settings.topics.canonical)
    seen: dict[str, dict[str, Any]] = {}
    read = 0
    runs: list[WorkerProcess] = []

    def logs() -> str:
        return "\n".join(run.log_digest() for run in runs)

    def read_outputs(wanted: list[str], timeout: float = 120.0) -> None:
        nonlocal read
        deadline = time.monotonic() + timeout
        while any(url not in seen for url in wanted):
            assert time.monotonic() < deadline and runs[-1].alive(), logs()
            outputs.poll(0.3)
            for _, record, _ in outputs.records[read:]:
                document = orjson.loads(record or b"")
                seen[document["url"]] = document
            read = len(outputs.records)

    def same_as_the_cli(phase: list[str]) -> None:
        produce(
            settings,
            settings.topics.raw,
            (url.encode() for url in phase),
            (parse(url).host.encode() for url in phase) if keyed else None,
        )
        read_outputs(phase)
        expected = cli_decisions(list(maps.values()), phase, tmp_path)
        different = [
            (d["url"], comparable(seen[d["url"]]), comparable(d))
            for d in expected
            if comparable(seen[d["url"]]) != comparable(d)
        ]
        assert different == [], logs()
        assert {seen[url]["status"] for url in phase} == {"learned", "provisional"}

    def restored(run: WorkerProcess) -> dict[str, float]:
        """Once both processes have restored their 4 partitions: their figures."""
        figures: dict[str, float] = {}

        def settled() -> bool:
            try:
                figures.update(restore_figures(port))
            except OSError:  # its metrics server is not up yet
                return False
            processes = ("front", "worker") if keyed else ("worker",)
            return all(
                figures[f"owned.{p}"] == PARTITIONS and figures[f"restoring.{p}"] == 0
                for p in processes
            )

        deadline = time.monotonic() + 60
        while not settled():
            assert time.monotonic() < deadline and run.alive(), f"{figures}\n{logs()}"
            time.sleep(0.5)
        return figures

    try:
        runs.append(WorkerProcess(settings, "canonicalize", tmp_path / "first.log").start())
        same_as_the_cli(phase_one)
        before = restored(runs[0])
        assert before["restore_records.worker"] == len(first)
        if keyed:
            assert before["restore_records.front"] == len(first)
        assert runs[0].stop() == 0, logs()

        # While it is down: a new domain's map, a new version, a deletion.
        updated = without_first_pattern(first[1], first[1].version + 1)
        removed = first[2].domain
        publish(settings, [late_map, updated])
        produce(settings, settings.topics.maps, [None], [removed.encode()])
        maps[late_map.domain] = late_map
        maps[updated.domain] = updated
        del maps[removed]
        published = 3

        runs.append(WorkerProcess(settings, "canonicalize", tmp_path / "second.log").start())
        same_as_the_cli(phase_two)
        assert (
            seen[next(u for u in phase_two if parse(u).host == late.ascii_host)]["map_version"]
            == late_map.version
        )
        after = restored(runs[1])
        text = runs[1].log_text()
        print(f"\n  restores of the first start: {before}\n  of the second: {after}")
        # Both processes kept their stores, and read only what was published meanwhile.
        assert text.count("is kept: ") == 2, logs()
        assert "is emptied" not in text and "read from its beginning" not in text, logs()
        assert after["restores.worker"] == PARTITIONS
        assert after["restore_records.worker"] == published
        lines = RESTORED.findall(text)
        assert all(suffix.startswith(", from offset ") for *_, suffix in lines), lines
        if keyed:
            assert after["restore_records.front"] == published
            assert len(lines) == 2 * PARTITIONS
            assert sum(int(records) for _, records, _, _ in lines) == 2 * published
        else:
            assert len(lines) == PARTITIONS
            [(live, records, suffix)] = READY.findall(text)
            assert int(records) == published and int(live) == len(maps), text
            assert suffix == f", {PARTITIONS} of {PARTITIONS} partitions from their stored offsets"
        assert runs[1].stop() == 0, logs()
    finally:
        for run in runs:
            run.stop()
        outputs.close()
        delete_topics(settings)
