"""A canonicalizer worker with many domains' maps: its memory and throughput with the maps on
disk (``MIQPS_MAPS_CACHE_DOMAINS``, default) against every map held in memory (``0``), in
the same run.

    .venv/bin/python -m bench.live_maps [--domains 20000,50000] [--urls 300000] [--cache 4096]

Needs a broker (``KAFKA_BOOTSTRAP_SERVERS``, default the local one). For each domain count,
on topics of its own: the maps of that many learned domains (``--patterns`` patterns each,
with evidence, as ``bench.maps_load`` writes them) are published to a fresh maps topic, and
``--urls`` URLs of their patterns, the domains drawn from a Zipf law (s = ``--zipf``), to
``urls.raw``. A confluent-kafka passthrough copies the URLs once (the baseline rate of the
run); then, for each mode, one ``miqps worker --agents canonicalize`` (with an app id and
output topic of its own) reads every map and canonicalizes every URL. Reported per mode:

- the resident memory of the worker's process tree (the Faust process, the front, the
  multiprocessing helper), sampled every 0.2 s: the highest sum seen, and the sum of each
  process's own peak (``VmHWM``, an upper bound);
- the seconds until the map feeds of both processes had read the topic (from their logs);
- URLs/s from the first output to the last, and that rate over the passthrough's;
- the bytes of the maps on disk (``MIQPS_STATE_DIR/live-maps``).

Then, in this process, the cost of a cold domain: a URL of a domain whose map is not held
yet (read from the store and compiled), against a URL of a domain held, over 2,000 maps.

It prints figures; it asserts no target.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from itertools import accumulate
from pathlib import Path

from confluent_kafka import Consumer

from bench.maps_load import domain_map
from bench.stream_throughput import (
    CREATED,
    high_watermarks,
    isolated_settings,
    passthrough,
    rss_by_process,
)
from miqps.maps import DomainMap
from miqps.mapstore import MapStore
from miqps.urls import parse
from streams.kafka.admin import consumer_config, ensure_topics
from streams.maps.live import LIVE_MAPS_FOLDER, StoredLiveMaps
from streams.settings import Settings
from testkit.tools import WorkerProcess, delete_topics, produce

FEED_READY = re.compile(r"map feed: (\d+) domain maps live after ([\d.]+)s")


@dataclass(frozen=True, slots=True)
class Outcome:
    peak_sum_mib: float
    sum_of_peaks_mib: float
    peaks_mib: list[float]
    """Each process's own peak, the Faust process first."""
    feeds_ready: list[float]
    rate: float
    disk_mib: float


def url_templates(domain: DomainMap, limit: int = 4) -> list[str]:
    """URLs of some of ``domain``'s learned patterns, with ``{n}`` and ``{v}`` to fill."""
    templates = []
    for key in list(domain.patterns)[:limit]:
        shape, _, names = key.partition("?")
        if shape.endswith("/") and shape != "/":
            continue
        query = "&".join(f"{name}={{v}}" for name in names.split("&"))
        templates.append(f"https://{domain.domain}{shape.replace('*', '{n}')}?{query}")
    return templates or [f"https://{domain.domain}/p/{{n}}?id={{v}}"]


def publish_maps(settings: Settings, domains: int, patterns: int, seed: int) -> list[list[str]]:
    """Publish ``domains`` learned maps; return, per domain, URL templates of its patterns."""
    rng = random.Random(seed)
    templates: list[list[str]] = []

    def documents() -> Iterator[bytes]:
        for number in range(domains):
            domain = domain_map(rng, number, patterns)
            templates.append(url_templates(domain))
            yield domain.dumps().encode()

    produce(
        settings,
        settings.topics.maps,
        documents(),
        (f"shop{number}.example".encode() for number in range(domains)),
    )
    return templates


def zipf_urls(templates: list[list[str]], count: int, s: float, seed: int) -> list[str]:
    rng = random.Random(seed)
    weights = list(accumulate(1 / (rank + 1) ** s for rank in range(len(templates))))
    chosen = rng.choices(range(len(templates)), cum_weights=weights, k=count)
    return [
        rng.choice(templates[number]).format(n=rng.randrange(1, 10_000), v=rng.randrange(1, 50))
        for number in chosen
    ]


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def run_worker(
    settings: Settings, cache: int, expected: int, root: Path, timeout: float
) -> Outcome:
    """One canonicalizer worker on ``settings``' inputs with ``cache``: its memory while it
    reads the maps and canonicalizes ``expected`` URLs, and its rate."""
    label = f"cache{cache}"
    mode = replace(
        settings,
        app_id=f"{settings.app_id}-{label}",
        topics=replace(settings.topics, canonical=f"{settings.topics.canonical}.{label}"),
        state_dir=root / label,
    )
    ensure_topics(mode)
    worker = WorkerProcess(
        mode, "canonicalize", root / f"{label}.log", {"MIQPS_MAPS_CACHE_DOMAINS": str(cache)}
    )
    watch = Consumer(consumer_config(mode, f"bench-watch-{uuid.uuid4().hex}"))
    peak_sum = sum_of_peaks = 0
    peaks: list[int] = []
    first: tuple[float, int] | None = None
    disk = 0
    worker.start()
    try:
        deadline = time.monotonic() + timeout
        next_count = 0.0
        while True:
            try:
                sizes = rss_by_process(worker.pid)
            except (FileNotFoundError, ProcessLookupError):  # a process of the tree ended
                sizes = []
            if sizes:
                peak_sum = max(peak_sum, sum(rss for rss, _ in sizes))
                if sum(peak for _, peak in sizes) >= sum_of_peaks:
                    sum_of_peaks = sum(peak for _, peak in sizes)
                    peaks = [peak for _, peak in sizes]
            now = time.perf_counter()
            if now >= next_count:
                count = high_watermarks(watch, mode.topics.canonical)
                next_count = now + 0.5
                if first is None and count > 0:
                    first = (now, count)
                if count >= expected:
                    break
            if time.monotonic() > deadline or not worker.alive():
                raise RuntimeError(f"outputs missing; see {worker.log_path}")
            time.sleep(0.2)
        last = time.perf_counter()
        live_maps = mode.state_dir / LIVE_MAPS_FOLDER
        disk = folder_bytes(live_maps) if live_maps.exists() else 0
    finally:
        watch.close()
        worker.stop()
    assert first is not None
    ready = [float(seconds) for _, seconds in FEED_READY.findall(worker.log_text())]
    return Outcome(
        peak_sum / 1024,
        sum_of_peaks / 1024,
        [peak / 1024 for peak in peaks],
        ready,
        (expected - first[1]) / max(last - first[0], 1e-9),
        disk / 2**20,
    )


def cold_domain_cost(root: Path, patterns: int) -> tuple[float, float]:
    """µs per URL of a domain whose map is not held (read and compiled), and of one held."""
    rng = random.Random(3)
    maps = [domain_map(rng, number, patterns) for number in range(2_000)]
    live = StoredLiveMaps(3600.0, MapStore(root / "cold"), cache_domains=64)
    for one in maps:
        live.apply(one)
    urls = [url_templates(one)[0].format(n=7, v=3) for one in maps]
    parsed = [parse(url) for url in urls]
    started = time.perf_counter()
    for url, text in zip(parsed, urls, strict=True):
        live.decide(url, text)
    cold = (time.perf_counter() - started) / len(urls)
    held = parsed[-32:]
    started = time.perf_counter()
    for _ in range(len(urls) // len(held)):
        for url, text in zip(held, urls[-32:], strict=True):
            live.decide(url, text)
    warm = (time.perf_counter() - started) / (len(urls) // len(held) * len(held))
    live.close()
    return cold * 1e6, warm * 1e6


def measure(base: Settings, args: argparse.Namespace, domains: int, root: Path) -> None:
    settings = isolated_settings(
        base, f"bench-lm{domains}", root / "state", partitions=args.partitions
    )
    ensure_topics(settings)
    started = time.monotonic()
    templates = publish_maps(settings, domains, args.patterns, args.seed)
    urls = zipf_urls(templates, args.urls, args.zipf, args.seed)
    produce(settings, settings.topics.raw, (url.encode() for url in urls))
    distinct = len({parse(url).host for url in urls})
    print(
        f"{domains} domains x {args.patterns} patterns published, {len(urls)} URLs of "
        f"{distinct} of them (Zipf s={args.zipf}), in {time.monotonic() - started:.0f}s",
        flush=True,
    )
    copy = f"{settings.topics.raw}.copy"
    ensure_topics(replace(settings, topics=replace(settings.topics, raw=copy)))
    baseline = passthrough(settings, settings.topics.raw, copy, len(urls), settings.batch_size)
    print(f"  confluent-kafka passthrough: {baseline:10,.0f} msgs/s", flush=True)
    for cache in args.modes:
        outcome = run_worker(settings, cache, len(urls), root / f"d{domains}", args.timeout)
        name = "every map held (cache 0)" if cache == 0 else f"maps on disk, cache {cache}"
        print(
            f"  {name:<28} peak RSS {outcome.peak_sum_mib:7.0f} MiB (sum of each process's "
            f"peak {outcome.sum_of_peaks_mib:.0f} = "
            f"{' + '.join(f'{peak:.0f}' for peak in outcome.peaks_mib)}); maps read in "
            f"{' and '.join(f'{s:.1f}' for s in outcome.feeds_ready)}s; "
            f"{outcome.rate:9,.0f} URLs/s = {outcome.rate / baseline:.3f} x passthrough; "
            f"maps on disk {outcome.disk_mib:.0f} MiB",
            flush=True,
        )


def counts(text: str) -> list[int]:
    values = [int(part) for part in text.split(",") if part.strip()]
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"want non-negative counts, got {text!r}")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.live_maps",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--domains", type=counts, default=[20_000, 50_000])
    parser.add_argument("--patterns", type=int, default=20, help="patterns per domain")
    parser.add_argument("--urls", type=int, default=300_000)
    parser.add_argument("--zipf", type=float, default=1.1, help="Zipf exponent of the domains")
    parser.add_argument(
        "--modes",
        type=counts,
        default=[4096, 0],
        help="MIQPS_MAPS_CACHE_DOMAINS of each worker (0: every map held); default 4096,0",
    )
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--timeout", type=float, default=1800.0)
    args = parser.parse_args(argv)
    base = Settings.from_env()
    with tempfile.TemporaryDirectory(prefix="miqps-live-maps-") as folder:
        root = Path(folder)
        print(f"{os.cpu_count()} cores; state and logs in {root}", flush=True)
        try:
            for domains in args.domains:
                measure(base, args, domains, root)
            cold, warm = cold_domain_cost(root, args.patterns)
            print(
                f"a URL of a cold domain (its map read from the store and compiled): "
                f"{cold:.0f} µs; of a domain held: {warm:.1f} µs",
                flush=True,
            )
        finally:
            for settings in CREATED:
                delete_topics(settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
