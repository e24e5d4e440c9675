"""What the worker's Prometheus metrics cost the canonicalizer front, measured in one run.

    .venv/bin/python -m bench.metrics_cost [--urls 200000] [--rounds 3]

Needs the local broker (scripts/kafka-local start). Maps deciding every pattern are
published and ``--urls`` URLs produced once; then one ``miqps worker --agents canonicalize``
canonicalizes them all, ``--rounds`` times with metrics off and as many with
``MIQPS_METRICS_PORT`` set and ``/metrics`` scraped every second (Prometheus scrapes every
15 s in deploy/prometheus.yml), alternating, each run in a consumer group and output topic
of its own. URLs/s are counted from the first output to the last, as in
bench/stream_throughput.py. Target: the median with metrics is at most 3% below the median
without.

It also prices the scheme that was not chosen, prometheus-client's multiprocess mode, in
which the front would count every URL itself (a value in a memory-mapped file per
increment): nanoseconds per increment, against the front's own time per URL measured above.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import urllib.request
from pathlib import Path

from bench.stream_throughput import CREATED, isolated_settings, learned_inputs, wait_outputs
from streams.kafka import ensure_topics
from streams.settings import Settings
from streams.tools import WorkerProcess, delete_topics

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


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


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


def one_run(settings: Settings, number: int, metrics: bool, expected: int, root: Path,
            timeout: float) -> tuple[float, int]:
    """(URLs/s, scrapes) of one worker over all the inputs, in a group of its own."""
    label = f"{'on' if metrics else 'off'}{number}"
    run = dataclasses.replace(
        settings, app_id=f"{settings.app_id}-{label}", state_dir=root / label,
        topics=dataclasses.replace(settings.topics,
                                   canonical=f"{settings.topics.canonical}.{label}"))
    ensure_topics(run)
    port = free_port()
    extra = {"MIQPS_METRICS_PORT": str(port)} if metrics else {}
    worker = WorkerProcess(run, "canonicalize", root / f"{label}.log", extra)
    worker.start()
    scraper = Scraper(port)
    try:
        if metrics:
            with scraper:
                first, at_first, last = wait_outputs(run, run.topics.canonical, expected,
                                                     timeout, worker)
        else:
            first, at_first, last = wait_outputs(run, run.topics.canonical, expected,
                                                 timeout, worker)
    finally:
        worker.stop()
    if metrics and b"miqps_urls_total" not in scraper.last:
        raise RuntimeError(f"the scrapes saw no front metrics; see {worker.log_path}")
    return (expected - at_first) / (last - first), scraper.scrapes


def increment_ns(code: str, env: dict[str, str]) -> float:
    done = subprocess.run([sys.executable, "-c", code.format(count=INCREMENTS)], env=env,
                          capture_output=True, text=True, check=True, timeout=300)
    return float(done.stdout.strip())


def price_multiprocess_mode(front_ns_per_url: float, root: Path) -> None:
    shared = root / "multiproc"
    shared.mkdir()
    env = {key: value for key, value in os.environ.items()
           if key != "PROMETHEUS_MULTIPROC_DIR"}
    plain = increment_ns(PLAIN_INCREMENT_COST, env)
    in_process = increment_ns(INCREMENT_COST, env)
    multiprocess = increment_ns(INCREMENT_COST, {**env, "PROMETHEUS_MULTIPROC_DIR": str(shared)})
    print("per-URL counting, ns per increment (the front's own time per URL: "
          f"{front_ns_per_url:,.0f} ns):", flush=True)
    for name, cost in (("plain integer (FrontCounters, what the front does)", plain),
                       ("prometheus-client Counter, in process", in_process),
                       ("prometheus-client Counter, multiprocess mode", multiprocess)):
        print(f"  {name:52s} {cost:7.0f} ns = {cost / front_ns_per_url:6.2%} of a URL",
              flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.metrics_cost", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--urls", type=int, default=200_000)
    parser.add_argument("--domains", type=int, default=2_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="miqps-bench-metrics-"))
    print(f"state and worker logs in {root}", flush=True)
    settings = isolated_settings(Settings.from_env(), "bench-metrics", root / "state",
                                 partitions=args.partitions)
    try:
        urls, maps, _ = learned_inputs(settings, args.urls, args.domains)
        print(f"{len(urls)} URLs over {len(maps)} learned domains, {args.partitions} "
              f"partitions; {args.rounds} rounds of metrics off, then on", flush=True)
        rates: dict[bool, list[float]] = {False: [], True: []}
        for number in range(args.rounds):
            for metrics in (False, True):
                rate, scrapes = one_run(settings, number, metrics, len(urls), root,
                                        args.timeout)
                rates[metrics].append(rate)
                print(f"  round {number + 1}, metrics {'on ' if metrics else 'off'}: "
                      f"{rate:10,.0f} URLs/s" + (f" ({scrapes} scrapes)" if metrics else ""),
                      flush=True)
        off, on = statistics.median(rates[False]), statistics.median(rates[True])
        print(f"median: off {off:,.0f} URLs/s, on {on:,.0f} URLs/s; ratio on/off {on / off:.3f} "
              f"(cost {1 - on / off:+.1%}; target <= 3%)", flush=True)
        price_multiprocess_mode(1e9 / off, root)
    finally:
        for created in CREATED:
            delete_topics(created)
    return 0


if __name__ == "__main__":
    sys.exit(main())
