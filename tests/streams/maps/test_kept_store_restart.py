"""What a kept live-map store saves at a restart, on the real broker, with 20,000 maps of 20
patterns over 4 partitions (``.venv/bin/pytest -s`` prints the figures): a worker with
input keyed by domain restores every partition in both its processes at its first start,
as every start did before the stores were kept; started again on the same state directory
after 10 more maps were published, each process reads only those 10 records."""

from __future__ import annotations

import random
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from miqps.maps import DomainMap, Layer, ParamEvidence, PatternDecision, Verification, utc_now
from streams.kafka.admin import ensure_topics
from streams.settings import Settings
from testkit.tools import WorkerProcess, delete_topics, isolated_settings, produce

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

DOMAINS = 20_000
PATTERNS = 20
PARTITIONS = 4
LOG_LINE = re.compile(r"^\[([\d-]+ [\d:]+,\d+)\] \[(\d+)\] \[\w+\] (.*)$", re.MULTILINE)
RESTORED = re.compile(
    r"map feed: \S+\[\d+\] restored: (\d+) records, \d+ domain maps, in ([\d.]+)s"
)
STARTED = "canonicalizer front started in process"
SHAPES = ("/p/*", "/c/*", "/search", "/", "/a/*/*", "/list", "/item/*", "/shop/*/*")
CONTENT = ("id", "page", "q", "sort", "variant", "color", "size", "lang", "sku", "start")
NOISE = ("utm_source", "utm_medium", "gclid", "fbclid", "ref", "sid", "mc", "_ga", "trk")


def domain_map(rng: random.Random, number: int) -> DomainMap:
    """A learned map of ``PATTERNS`` patterns with their evidence, as ``miqps learn``
    writes them."""
    decisions: dict[str, PatternDecision] = {}
    while len(decisions) < PATTERNS:
        shape = rng.choice(SHAPES) + "/" * rng.randrange(3)
        kept = rng.sample(CONTENT, rng.randrange(1, 3))
        dropped = rng.sample(NOISE, rng.randrange(2, 4))
        params = {name: ParamEvidence("keep", Layer.LEARNED, 6, 5, 1, 0) for name in kept}
        params |= {name: ParamEvidence("drop", Layer.LEARNED, 6, 0, 6, 1) for name in dropped}
        decisions[shape + "?" + "&".join(sorted(kept + dropped))] = PatternDecision(
            frozenset(kept),
            frozenset(dropped),
            params,
            Verification(3, 0, 1, []),
            utc_now(),
            rng.randrange(10, 5000),
        )
    return DomainMap(f"shop{number}.example", 1, utc_now(), decisions)


def publish(settings: Settings, numbers: range, seed: int) -> None:
    rng = random.Random(seed)
    produce(
        settings,
        settings.topics.maps,
        (domain_map(rng, number).dumps().encode() for number in numbers),
        (f"shop{number}.example".encode() for number in numbers),
    )


def stamp(text: str) -> float:
    return time.mktime(time.strptime(text.split(",")[0], "%Y-%m-%d %H:%M:%S")) + (
        int(text.split(",")[1]) / 1000
    )


def restores(worker: WorkerProcess) -> Iterator[tuple[float, int, float]]:
    """Per restore line of the worker's log: when, records read, seconds."""
    for at, _, text in LOG_LINE.findall(worker.log_text()):
        found = RESTORED.search(text)
        if found:
            yield stamp(at), int(found[1]), float(found[2])


def run(settings: Settings, log: Path) -> tuple[float, int, float]:
    """Start a worker, wait for its 2 x 4 restores, stop it; return the seconds from its
    front's start to its last restore, the records read and the restores' seconds."""
    worker = WorkerProcess(settings, "canonicalize", log).start()
    try:
        deadline = time.monotonic() + 600
        while len(list(restores(worker))) < 2 * PARTITIONS:
            assert worker.alive() and time.monotonic() < deadline, worker.log_digest()
            time.sleep(1)
        started = next(
            stamp(at) for at, _, text in LOG_LINE.findall(worker.log_text()) if STARTED in text
        )
        done = list(restores(worker))
        return (
            max(at for at, _, _ in done) - started,
            sum(records for _, records, _ in done),
            sum(seconds for _, _, seconds in done),
        )
    finally:
        assert worker.stop() == 0, worker.log_digest()


def test_a_restart_on_a_kept_store_reads_only_the_new_maps(bootstrap: str, tmp_path: Path) -> None:
    settings = isolated_settings(
        Settings.from_env({"KAFKA_BOOTSTRAP_SERVERS": bootstrap}),
        "keptrestart",
        tmp_path / "state",
        partitions=PARTITIONS,
        input_keyed_by_domain=True,
    )
    ensure_topics(settings)
    try:
        publish(settings, range(DOMAINS), 1)
        first = run(settings, tmp_path / "first.log")
        publish(settings, range(DOMAINS, DOMAINS + 10), 2)
        second = run(settings, tmp_path / "second.log")
        print(
            f"\n  {DOMAINS:,} maps, {PARTITIONS} partitions, a worker's two processes:"
            f"\n  first start: last restore {first[0]:.1f}s after the front started, "
            f"{first[1]:,} records read, restores {first[2]:.1f}s summed"
            f"\n  restart, 10 maps published meanwhile: last restore {second[0]:.1f}s after, "
            f"{second[1]:,} records read, restores {second[2]:.2f}s summed"
        )
        assert first[1] == 2 * DOMAINS
        assert second[1] == 2 * 10
        assert second[2] < first[2]
    finally:
        delete_topics(settings)
