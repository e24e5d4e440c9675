"""What the worker's Prometheus metrics cost the canonicalizer front, measured in one run.

    .venv/bin/python -m bench.metrics_cost [--urls 200000] [--rounds 5]

Needs the local broker (scripts/kafka-local start). Maps deciding every pattern are
published and ``--urls`` URLs produced once; then one ``miqps worker --agents canonicalize``
canonicalizes them all, ``--rounds`` times with metrics off and as many with
``MIQPS_METRICS_PORT`` set and ``/metrics`` scraped every second (Prometheus scrapes every
15 s in deploy/prometheus.yml), alternating, each run in a consumer group and output topic
of its own. URLs/s are counted from the first output to the last, as in
bench/stream_throughput.py, and so is the CPU the worker and its front process spend per
URL. Target: metrics cost at most 3% of the front's throughput.

It also prices the scheme that was not chosen, prometheus-client's multiprocess mode, in
which the front would count every URL itself (a value in a memory-mapped file per
increment): nanoseconds per increment, against the front's own time per URL measured above.
And it prices the chosen scheme's added work directly: per second, one statistics document
parsed and one snapshot collected and pickled; per batch, one histogram observation.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer
from prometheus_client import CollectorRegistry, ProcessCollector

from bench.stream_throughput import (
    CREATED,
    high_watermarks,
    isolated_settings,
    learned_inputs,
    process_tree,
)
from streams.front.loop import CanonicalizerFront
from streams.front.metrics import FrontCollector
from streams.kafka.admin import consumer_config, ensure_topics
from streams.maps.feed import MapFeed
from streams.maps.live import LiveMaps
from streams.settings import Settings
from testkit.localbroker import free_port
from testkit.tools import WorkerProcess, delete_topics

INCREMENTS = 1_000_000
# Run in a fresh interpreter: prometheus-client picks its value class at import time.
INCREMENT_COST = """
import os, sys, time
from prometheus_client import Counter
urls = Counter("urls", "d", ["status"]).labels("learned")
began = time.perf_counter()
for _ in range({count}):
    urls.inc()
print((time.perf_counter() - began) / {count} * 1e9)
"""
PLAIN_INCREMENT_COST = """
import time
class Counters:
    __slots__ = ("learned",)
counters = Counters(); counters.learned = 0
began = time.perf_counter()
for _ in range({count}):
    counters.learned += 1
print((time.perf_counter() - began) / {count} * 1e9)
"""


class Scraper:
    """Fetches ``/metrics`` every ``every`` seconds until stopped; counts the scrapes."""

    def __init__(self, port: int, every: float = 1.0) -> None:
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.every = every
        self.scrapes = 0
        self.last = b""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                with urllib.request.urlopen(self.url, timeout=5) as response:
                    self.last = response.read()
                    self.scrapes += 1
            except OSError:  # not listening yet
                continue


@dataclass(frozen=True, slots=True)
class Run:
    urls_per_second: float
    cpu_us_per_url: float
    """CPU of the worker and its front process, per URL, between the first output and the
    last: far less sensitive than wall time to what else runs on the machine."""
    scrapes: int


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its children so far."""
    ticks = 0
    for member in process_tree(pid):
        fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])  # utime and stime
    return ticks / os.sysconf("SC_CLK_TCK")


def watch(settings: Settings, expected: int, timeout: float, worker: WorkerProcess) -> Run:
    """Follows the outputs from the first to the ``expected``-th, timing both clocks."""
    probe = Consumer(consumer_config(settings, f"bench-watch-{uuid.uuid4().hex}"))
    try:
        deadline = time.monotonic() + timeout
        first: tuple[float, int, float] | None = None
        while True:
            count = high_watermarks(probe, settings.topics.canonical)
            now = time.perf_counter()
            if first is None and count > 0:
                first = (now, count, cpu_seconds(worker.pid))
            if first is not None and count >= expected:
                urls = expected - first[1]
                return Run(
                    urls / (now - first[0]), (cpu_seconds(worker.pid) - first[2]) / urls * 1e6, 0
                )
            if time.monotonic() > deadline or not worker.alive():
                raise RuntimeError(f"only {count} of {expected} outputs; see {worker.log_path}")
            time.sleep(0.05)
    finally:
        probe.close()


def one_run(
    settings: Settings, number: int, metrics: bool, expected: int, root: Path, timeout: float
) -> Run:
    """One worker over all the inputs, in a consumer group of its own."""
    label = f"{'on' if metrics else 'off'}{number}"
    run = dataclasses.replace(
        settings,
        app_id=f"{settings.app_id}-{label}",
        state_dir=root / label,
        topics=dataclasses.replace(
            settings.topics, canonical=f"{settings.topics.canonical}.{label}"
        ),
    )
    ensure_topics(run)
    port = free_port()
    extra = {"MIQPS_METRICS_PORT": str(port)} if metrics else {}
    worker = WorkerProcess(run, "canonicalize", root / f"{label}.log", extra)
    worker.start()
    scraper = Scraper(port)
    try:
        if metrics:
            with scraper:
                measured = watch(run, expected, timeout, worker)
        else:
            measured = watch(run, expected, timeout, worker)
    finally:
        worker.stop()
    if metrics and b"miqps_urls_total" not in scraper.last:
        raise RuntimeError(f"the scrapes saw no front metrics; see {worker.log_path}")
    return dataclasses.replace(measured, scrapes=scraper.scrapes)


def increment_ns(code: str, env: dict[str, str]) -> float:
    done = subprocess.run(
        [sys.executable, "-c", code.format(count=INCREMENTS)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return float(done.stdout.strip())


def price_multiprocess_mode(front_ns_per_url: float, root: Path) -> None:
    shared = root / "multiproc"
    shared.mkdir()
    env = {key: value for key, value in os.environ.items() if key != "PROMETHEUS_MULTIPROC_DIR"}
    plain = increment_ns(PLAIN_INCREMENT_COST, env)
    in_process = increment_ns(INCREMENT_COST, env)
    multiprocess = increment_ns(INCREMENT_COST, {**env, "PROMETHEUS_MULTIPROC_DIR": str(shared)})
    print(
        "per-URL counting, ns per increment (the front's own time per URL: "
        f"{front_ns_per_url:,.0f} ns):",
        flush=True,
    )
    for name, cost in (
        ("plain integer (FrontCounters, what the front does)", plain),
        ("prometheus-client Counter, in process", in_process),
        ("prometheus-client Counter, multiprocess mode", multiprocess),
    ):
        print(f"  {name:52s} {cost:7.0f} ns = {cost / front_ns_per_url:6.2%} of a URL", flush=True)


def statistics_documents(settings: Settings, seconds: float = 3.0) -> list[str]:
    """librdkafka statistics documents of a consumer of the input topic, as the front's."""
    documents: list[str] = []
    consumer = Consumer(
        consumer_config(
            settings,
            f"bench-stats-{uuid.uuid4().hex}",
            **{"statistics.interval.ms": 200, "stats_cb": documents.append},
        )
    )
    consumer.subscribe([settings.topics.raw])
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline or not documents:
            consumer.consume(1000, 0.2)
    finally:
        consumer.close()
    return documents


def microseconds(work: Callable[[], object], repeat: int) -> float:
    began = time.perf_counter()
    for _ in range(repeat):
        work()
    return (time.perf_counter() - began) / repeat * 1e6


def price_front_overhead(settings: Settings, urls_per_second: float) -> None:
    """The CPU the metrics add to the front process per second, part by part."""
    live_maps = LiveMaps(settings.policy.reverify_after)
    front = CanonicalizerFront(settings, live_maps, MapFeed(settings, live_maps))
    collector = FrontCollector(front)
    registry = CollectorRegistry()
    registry.register(collector)
    ProcessCollector(namespace="miqps_front", registry=registry)
    document = statistics_documents(settings)[-1]
    lag = collector.lags[0]
    lag.on_statistics(document)
    parse = microseconds(lambda: lag.on_statistics(document), 200)
    snapshot = microseconds(lambda: pickle.dumps(list(registry.collect())), 200)
    observe = microseconds(lambda: collector.batch_seconds.observe(0.02), 100_000)
    batches = urls_per_second / settings.batch_size
    per_second = parse + snapshot + batches * observe
    print(
        f"the front's added work per second: statistics document ({len(document):,} bytes) "
        f"{parse:.0f} us + snapshot collected and pickled {snapshot:.0f} us + "
        f"{batches:.1f} batches x {observe:.2f} us = {per_second:.0f} us "
        f"= {per_second / 1e6:.3%} of one core",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.metrics_cost",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--urls", type=int, default=200_000)
    parser.add_argument("--domains", type=int, default=2_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="miqps-bench-metrics-"))
    print(f"state and worker logs in {root}", flush=True)
    settings = isolated_settings(
        Settings.from_env(), "bench-metrics", root / "state", partitions=args.partitions
    )
    try:
        urls, maps, _ = learned_inputs(settings, args.urls, args.domains)
        print(
            f"{len(urls)} URLs over {len(maps)} learned domains, {args.partitions} "
            f"partitions; {args.rounds} rounds of metrics off, then on",
            flush=True,
        )
        runs: dict[bool, list[Run]] = {False: [], True: []}
        for number in range(args.rounds):
            for metrics in (False, True):
                run = one_run(settings, number, metrics, len(urls), root, args.timeout)
                runs[metrics].append(run)
                print(
                    f"  round {number + 1}, metrics {'on ' if metrics else 'off'}: "
                    f"{run.urls_per_second:10,.0f} URLs/s, {run.cpu_us_per_url:5.1f} us CPU "
                    f"per URL" + (f" ({run.scrapes} scrapes)" if metrics else ""),
                    flush=True,
                )
        off = statistics.median(run.urls_per_second for run in runs[False])
        on = statistics.median(run.urls_per_second for run in runs[True])
        cpu_off = statistics.median(run.cpu_us_per_url for run in runs[False])
        cpu_on = statistics.median(run.cpu_us_per_url for run in runs[True])
        print(
            f"median wall: off {off:,.0f} URLs/s, on {on:,.0f} URLs/s; ratio on/off {on / off:.3f}",
            flush=True,
        )
        print(
            f"median CPU per URL: off {cpu_off:.1f} us, on {cpu_on:.1f} us; ratio on/off "
            f"{cpu_on / cpu_off:.3f} (cost {cpu_on / cpu_off - 1:+.1%}; target <= 3%)",
            flush=True,
        )
        price_front_overhead(settings, off)
        price_multiprocess_mode(1e9 / off, root)
    finally:
        for created in CREATED:
            delete_topics(created)
    return 0


if __name__ == "__main__":
    sys.exit(main())
