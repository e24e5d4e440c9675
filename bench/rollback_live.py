"""How soon a rollback is live in every worker, against a plain map publish.

    .venv/bin/python -m bench.rollback_live [--workers 2] [--partitions 4] [--rounds 5]

Needs the local broker (scripts/kafka-local start). ``--workers`` canonicalizer workers
share the input's partitions. Each round changes one domain's map (``ref`` kept, or
dropped) and probes every input partition with a fresh URL every 50 ms until each
partition's output shows the new version: then every worker has it live.

- baseline: the next version published with :func:`streams.maps.history.publish_map` alone;
- rollback: ``miqps maps rollback DOMAIN --to V`` run in this process, from the start of
  the command (which reads the domain's history and current map first).

Prints the median and the worst time to live of each, and their ratio; the target for a
rollback is at most 5 s.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import orjson
from confluent_kafka import Producer

from miqps import cli
from miqps.maps import DomainMap, Layer, ParamEvidence, PatternDecision, Verification
from streams.kafka.admin import ensure_topics, producer_config
from streams.kafka.clients import produce
from streams.maps.history import ProducerSink, publish_map
from streams.settings import Settings
from testkit.tools import TopicReader, WorkerProcess, delete_topics, isolated_settings

DOMAIN = "rollback.bench"
PATTERN = "/p?id&ref"
PROBE_EVERY = 0.05
TARGET_SECONDS = 5.0


def a_map(version: int, keep_ref: bool) -> DomainMap:
    params = {
        "id": ParamEvidence("keep", Layer.LEARNED, 6, 6, 0),
        "ref": ParamEvidence(
            "keep" if keep_ref else "drop",
            Layer.LEARNED,
            6,
            6 if keep_ref else 0,
            0 if keep_ref else 6,
        ),
    }
    kept = frozenset({"id", "ref"} if keep_ref else {"id"})
    decision = PatternDecision(
        kept, frozenset(params) - kept, params, Verification(3), "2026-12-01T00:00:00Z"
    )
    return DomainMap(DOMAIN, version, "2026-12-01T00:00:00Z", {PATTERN: decision})


class Probe:
    """Fresh URLs into every input partition; which version each partition's output has."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.producer = Producer(producer_config(settings))
        self.outputs = TopicReader(settings, settings.topics.canonical)
        self.partitions = settings.partitions
        self.sequence = 0

    def send(self) -> None:
        for partition in range(self.partitions):
            self.sequence += 1
            url = f"http://{DOMAIN}/p?id=p{partition}-{self.sequence}&ref=r"
            produce(self.producer, self.settings.topics.raw, url.encode(), None, partition)
        self.producer.flush(5)

    def seen_versions(self) -> dict[int, int]:
        """Per input partition, the newest map version its outputs showed so far."""
        newest: dict[int, int] = {}
        for _, value, _ in self.outputs.records:
            document = orjson.loads(value or b"")
            partition = int(document["url"].split("id=p")[1].split("-")[0])
            newest[partition] = max(newest.get(partition, 0), document["map_version"])
        return newest

    def seconds_to_live(self, version: int, since: float, timeout: float = 60.0) -> float:
        """Probe until every partition's output shows ``version``; seconds since ``since``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.send()
            self.outputs.poll(PROBE_EVERY)
            seen = self.seen_versions()
            if len(seen) == self.partitions and min(seen.values()) >= version:
                return time.monotonic() - since
        raise TimeoutError(f"version {version} not live in every partition within {timeout}s")

    def close(self) -> None:
        self.outputs.close()


def timed(change: Callable[[], None], probe: Probe, version: int) -> float:
    started = time.monotonic()
    change()
    return probe.seconds_to_live(version, started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rollback_live")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as directory:
        settings = isolated_settings(
            Settings.from_env(), "bench-rollback", Path(directory), partitions=args.partitions
        )
        ensure_topics(settings)
        workers = [
            WorkerProcess(
                settings.with_overrides(state_dir=Path(directory) / str(n)),
                "canonicalize",
                Path(directory) / f"worker{n}.log",
            ).start()
            for n in range(args.workers)
        ]
        probe = Probe(settings)
        try:
            return run(settings, workers, probe, args.rounds)
        finally:
            for worker in workers:
                worker.stop()
            probe.close()
            delete_topics(settings)


def run(settings: Settings, workers: list[WorkerProcess], probe: Probe, rounds: int) -> int:
    sink = ProducerSink(settings)

    def publish(domain_map: DomainMap) -> None:
        asyncio.run(publish_map(sink, settings.topics, domain_map, "publish"))
        sink.flush(30)

    publish(a_map(1, False))
    publish(a_map(2, True))
    probe.seconds_to_live(2, time.monotonic(), timeout=120)
    prefix = settings.app_id + "."
    version = 2
    plain: list[float] = []
    rolled: list[float] = []
    for round_ in range(rounds):
        version += 1

        def next_version(number: int = version, keep_ref: bool = round_ % 2 == 0) -> None:
            publish(a_map(number, keep_ref))

        plain.append(timed(next_version, probe, version))
        version += 1
        target = 1 if round_ % 2 == 0 else 2

        def rollback(to: int = target) -> None:
            code = cli.main(
                [
                    "maps",
                    "rollback",
                    DOMAIN,
                    "--to",
                    str(to),
                    "--bootstrap-servers",
                    settings.bootstrap_servers,
                    "--topic-prefix",
                    prefix,
                ]
            )
            if code != 0:
                raise RuntimeError(f"miqps maps rollback exited with {code}")

        rolled.append(timed(rollback, probe, version))
    alive = sum(worker.alive() for worker in workers)
    print(
        f"{len(workers)} canonicalizer workers ({alive} alive), {settings.partitions} "
        f"partitions, {rounds} rounds; seconds until every partition's output shows the "
        "new version"
    )
    for label, times in (("publish_map (baseline)", plain), ("miqps maps rollback", rolled)):
        print(f"  {label:24} median {statistics.median(times):.2f}  worst {max(times):.2f}")
    ratio = statistics.median(rolled) / statistics.median(plain)
    print(
        f"  rollback / baseline (median): {ratio:.2f}; target: worst <= {TARGET_SECONDS:g} s: "
        f"{'met' if max(rolled) <= TARGET_SECONDS else 'NOT met'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
