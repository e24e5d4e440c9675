"""A canonicalizer worker with many domains' maps: its memory and throughput with the maps on
disk (``MIQPS_MAPS_CACHE_DOMAINS``, default) against every map held in memory (``0``), in
the same run.

    .venv/bin/python -m bench.live_maps [--domains 20000,50000] [--urls 300000] [--modes 4096,0]
                                        [--workers 1] [--inputs unkeyed|keyed|hop] [--uniform]
                                        [--join-third] [--in-process-only]

Needs a broker (``KAFKA_BOOTSTRAP_SERVERS``, default the local one). For each domain count,
on topics of its own: the maps of that many learned domains (``--patterns`` patterns each,
with evidence, as ``bench.maps_load`` writes them) are published to a fresh maps topic, and
``--urls`` URLs of their learned patterns are drawn, the domains from a Zipf law (s =
``--zipf``) or, with ``--uniform``, uniformly: with no key (``--inputs unkeyed``, the
default), keyed by their domain (``keyed``: ``MIQPS_INPUT_KEYED_BY_DOMAIN``, produced with
murmur2 as Java's clients place keys), or with no key and re-keyed by the worker's
repartition hop (``hop``: ``MIQPS_REPARTITION_INPUT``). A confluent-kafka passthrough copies
the URLs once from a topic of their own (the baseline rate of the run); then, for each
mode, ``--workers`` ``miqps worker --agents canonicalize`` processes (one consumer group,
input and output topic per mode, a state directory per worker) restore the maps; once
every maps partition is restored in every process that follows it, and no process took or
restored one for 10 s, the URLs are produced to the mode's input, and the workers
canonicalize them. Reported per mode:

- per worker, the resident memory of its process tree (the Faust process, the front, the
  multiprocessing helper), sampled every 0.2 s: the highest sum seen, and each process's
  own peak (``VmHWM``) then;
- per worker, how its map feeds read the topic (from its log): the seconds until every
  map was live (a feed of every partition), or each partition's restore (a feed of its
  partitions only: records, domain maps, seconds);
- per worker, the URLs its front answered from a learned pattern and provisionally;
- per worker with domain-keyed input, ``miqps_input_key_mismatches_total`` (its metrics
  server, on a free port);
- the seconds from the workers' start until every maps partition was restored; then the
  URLs/s of all the workers together, from the first output to the last (the bench's
  producer runs during the first seconds), and that rate over the passthrough's;
- the bytes of the maps on disk (``MIQPS_STATE_DIR/live-maps``);
- with ``--join-third``: a third worker started at the first output; the restores of the
  partitions it took, and the seconds from its start to its last restore;
- the seconds from publishing one more version of the most frequent domain's map, after
  the URLs, to the ``map live`` line of that version in each process that logged one (the
  front and the Faust process following the domain's partition; every front with unkeyed
  input).

Then, in this process, the cost of a cold domain: a URL of a domain whose map is not held
yet (read from the store and compiled), against a URL of a domain held, over 2,000 maps,
one URL at a time and in a front's batches; the cost of a map restored (checked and
stored, wall time and CPU) with RocksDB's write buffer of 4 MiB and with the store's
default;
and a front's per-batch call on 150,000 URLs over ``--in-process-domains`` stored maps (Zipf,
s = 1.1), twice, with the default bound of maps held and with 4096, under Python's default
collector thresholds and under the front process's: URLs/s and maps read from the store,
and the resident memory the maps held took (the first measured, the default bound, is the
cleanest: later ones reuse memory freed by earlier ones).

``--in-process-only`` makes only these last measures, without a broker. It prints figures;
it asserts no target.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import re
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime
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
from miqps.canonical import DEFAULT_CACHE_DOMAINS
from miqps.maps import DomainMap, check_map
from miqps.mapstore import WRITE_BUFFER_BYTES, MapStore
from miqps.urls import parse
from streams.front.process import FRONT_GC_THRESHOLDS
from streams.kafka.admin import consumer_config, ensure_topics
from streams.maps.live import LIVE_MAPS_FOLDER, StoredLiveMaps
from streams.settings import Settings
from testkit.localbroker import free_port
from testkit.tools import WorkerProcess, delete_topics, produce

FEED_READY = re.compile(r"map feed: (\d+) domain maps live after ([\d.]+)s")
"""A feed of every maps partition (the front with input of any key)."""
LOG_LINE = re.compile(r"^\[(?P<at>[\d-]+ [\d:,]+)\] \[(?P<pid>\d+)\] \[\w+\] (?P<text>.*)$")
RESTORED = re.compile(
    r"map feed: \S+\[(?P<partition>\d+)\] restored: (?P<records>\d+) records, "
    r"(?P<domains>\d+) domain maps, in (?P<seconds>[\d.]+)s"
)
"""A feed of its partitions only, per partition taken."""
MAPS_MOVED = re.compile(r"maps partitions followed|wait for their maps|\] restored: ")
"""A process took maps partitions, or restored one."""
LIVE = re.compile(r"map live: (?P<domain>\S+) v(?P<version>\d+)")
STOPPED = re.compile(
    r"canonicalizer stopped after \d+ messages "
    r"\((?P<learned>\d+) learned, (?P<provisional>\d+) provisional"
)
INPUTS = {
    "unkeyed": {},
    "keyed": {"input_keyed_by_domain": True},
    "hop": {"repartition_input": True},
}


@dataclass(frozen=True, slots=True)
class LogLine:
    at: float
    """Wall-clock seconds."""
    pid: int
    text: str


def log_lines(text: str) -> Iterator[LogLine]:
    for line in text.splitlines():
        match = LOG_LINE.match(line)
        if match:
            at = datetime.strptime(match["at"], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            yield LogLine(at, int(match["pid"]), match["text"])


@dataclass(frozen=True, slots=True)
class Restore:
    process: str
    """``worker`` (the Faust process) or ``front``."""
    partition: int
    records: int
    domains: int
    seconds: float
    at: float


def restores(worker: WorkerProcess) -> list[Restore]:
    found = []
    for line in log_lines(worker.log_text()):
        match = RESTORED.search(line.text)
        if match:
            found.append(
                Restore(
                    "worker" if line.pid == worker.pid else "front",
                    int(match["partition"]),
                    int(match["records"]),
                    int(match["domains"]),
                    float(match["seconds"]),
                    line.at,
                )
            )
    return found


def feeds_text(worker: WorkerProcess) -> str:
    """How the worker's map feeds read the maps topic, from its log."""
    parts = [f"all live after {s}s" for _, s in FEED_READY.findall(worker.log_text())]
    parts += [
        f"{one.process} [{one.partition}] {one.domains} maps in {one.seconds:.1f}s"
        for one in restores(worker)
    ]
    return "; ".join(parts) or "no feed line"


@dataclass(slots=True)
class Sampled:
    """One worker and its memory, sampled."""

    name: str
    worker: WorkerProcess
    started: float
    peak_sum: int = 0
    peaks: list[int] = field(default_factory=list)
    """Each process's own peak when the sum of them was highest: the Faust process, then
    its children (the multiprocessing helper and the front, as ``/proc`` lists them)."""
    metrics_port: int = 0
    mismatches: int | None = None
    disk: int = 0

    def sample(self) -> None:
        try:
            sizes = rss_by_process(self.worker.pid)
        except (FileNotFoundError, ProcessLookupError):  # a process of the tree ended
            return
        if sizes:
            self.peak_sum = max(self.peak_sum, sum(rss for rss, _ in sizes))
            if sum(peak for _, peak in sizes) >= sum(self.peaks):
                self.peaks = [peak for _, peak in sizes]


@dataclass(frozen=True, slots=True)
class Outcome:
    workers: list[Sampled]
    restored_after: float
    """Seconds from the workers' start until every maps partition was restored."""
    rate: float
    """URLs/s of the URLs produced once every maps partition was restored."""
    live: list[tuple[str, float]]
    """Each process that logged the new map version live, and after how many seconds."""
    joined: Sampled | None


def key_mismatches(port: int) -> int | None:
    """``miqps_input_key_mismatches_total`` summed over its reasons, from the metrics
    server on ``port``; None if it does not serve them."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            text = answer.read().decode()
    except OSError:
        return None
    values = [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("miqps_input_key_mismatches_total")
    ]
    return int(sum(values)) if values else None


def url_templates(domain: DomainMap, limit: int = 4) -> list[str]:
    """URLs of up to ``limit`` of ``domain``'s learned patterns, with ``{n}`` and ``{v}`` to
    fill. ``bench.maps_load`` also writes shapes with trailing slashes, which no URL has
    (a URL's shape has none): those are passed over. A domain without another learned
    pattern (about 1 in 3,000) gets a URL of a pattern it has not learned."""
    templates = []
    for key in domain.patterns:
        shape, _, names = key.partition("?")
        if shape.endswith("/") and shape != "/":
            continue
        query = "&".join(f"{name}={{v}}" for name in names.split("&"))
        templates.append(f"https://{domain.domain}{shape.replace('*', '{n}')}?{query}")
        if len(templates) == limit:
            break
    return templates or [f"https://{domain.domain}/p/{{n}}?id={{v}}"]


def publish_maps(
    settings: Settings, domains: int, patterns: int, seed: int
) -> tuple[list[list[str]], DomainMap]:
    """Publish ``domains`` learned maps; return, per domain, URL templates of its patterns,
    and the first domain's map."""
    rng = random.Random(seed)
    templates: list[list[str]] = []
    first: list[DomainMap] = []

    def documents() -> Iterator[bytes]:
        for number in range(domains):
            domain = domain_map(rng, number, patterns)
            if not first:
                first.append(domain)
            templates.append(url_templates(domain))
            yield domain.dumps().encode()

    produce(
        settings,
        settings.topics.maps,
        documents(),
        (f"shop{number}.example".encode() for number in range(domains)),
    )
    return templates, first[0]


def zipf_urls(templates: list[list[str]], count: int, s: float, seed: int) -> list[str]:
    """``count`` URLs, their domains drawn from a Zipf law of exponent ``s`` (0: uniformly)."""
    rng = random.Random(seed)
    if s:
        weights = list(accumulate(1 / (rank + 1) ** s for rank in range(len(templates))))
        chosen = rng.choices(range(len(templates)), cum_weights=weights, k=count)
    else:
        chosen = rng.choices(range(len(templates)), k=count)
    return [
        rng.choice(templates[number]).format(n=rng.randrange(1, 10_000), v=rng.randrange(1, 50))
        for number in chosen
    ]


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def start_worker(mode: Settings, cache: int, root: Path, name: str) -> Sampled:
    port = free_port()
    worker = WorkerProcess(
        replace(mode, state_dir=root / name),
        "canonicalize",
        root / f"{name}.log",
        {"MIQPS_MAPS_CACHE_DOMAINS": str(cache), "MIQPS_METRICS_PORT": str(port)},
    )
    worker.start()
    return Sampled(name, worker, time.time(), metrics_port=port)


def restored_everywhere(workers: list[Sampled], partitions: int, keyed: bool) -> bool:
    """Whether the workers' processes restored every maps partition they follow: each
    partition by some Faust process, and each by some front (every partition by every
    front when input of any key makes each front follow them all)."""
    faust: set[int] = set()
    fronts: set[int] = set()
    for one in workers:
        for restore in restores(one.worker):
            (faust if restore.process == "worker" else fronts).add(restore.partition)
        if not keyed and not FEED_READY.search(one.worker.log_text()):
            return False
    every = set(range(partitions))
    return faust == every and (fronts == every or not keyed)


def wait_until_restored(
    workers: list[Sampled], partitions: int, keyed: bool, deadline: float
) -> float:
    """Sample the workers' memory until every maps partition is restored and no process
    logged a partition taken or restored for 10 s; the time (``time.time()``) of the last
    such line."""
    while True:
        for one in workers:
            one.sample()
        lines = [
            line.at
            for one in workers
            for line in log_lines(one.worker.log_text())
            if MAPS_MOVED.search(line.text)
        ]
        last = max(lines, default=time.time())
        if restored_everywhere(workers, partitions, keyed) and time.time() - last > 10.0:
            return last
        if time.monotonic() > deadline or not all(one.worker.alive() for one in workers):
            raise RuntimeError("the maps partitions were not all restored")
        time.sleep(0.2)


def live_latency(
    settings: Settings, workers: list[Sampled], latest: DomainMap, timeout: float = 120.0
) -> list[tuple[str, float]]:
    """Publish ``latest``; the seconds until each process logged it live (``map live``),
    once no new line came for 3 s, the first first."""
    produce(settings, settings.topics.maps, [latest.dumps().encode()], [latest.domain.encode()])
    published = time.time()
    deadline = time.monotonic() + timeout
    found: dict[str, float] = {}
    while time.monotonic() < deadline:
        for one in workers:
            for line in log_lines(one.worker.log_text()):
                match = LIVE.search(line.text)
                if (
                    match
                    and match["domain"] == latest.domain
                    and int(match["version"]) == latest.version
                ):
                    process = "Faust" if line.pid == one.worker.pid else "front"
                    found.setdefault(f"{one.name} {process}", line.at - published)
        if found and time.time() - published - max(found.values()) > 3.0:
            break
        time.sleep(0.5)
    return sorted(found.items(), key=lambda item: item[1])


def run_workers(
    settings: Settings,
    args: argparse.Namespace,
    cache: int,
    load: tuple[list[bytes], list[bytes] | None],
    root: Path,
    latest: DomainMap,
) -> Outcome:
    """``args.workers`` canonicalizer workers on ``settings``' inputs with ``cache``: their
    memory while they restore the maps, then canonicalize the URLs of ``load`` (values,
    keys), produced once every maps partition is restored; their rate."""
    label = f"cache{cache}"
    mode = replace(
        settings,
        app_id=f"{settings.app_id}-{label}",
        topics=replace(
            settings.topics,
            raw=f"{settings.topics.raw}.{label}",
            canonical=f"{settings.topics.canonical}.{label}",
            by_domain=f"{settings.topics.by_domain}.{label}",
        ),
        state_dir=root / label,
    )
    ensure_topics(mode)
    names = [label] if args.workers == 1 else [f"{label}-w{n + 1}" for n in range(args.workers)]
    watch = Consumer(consumer_config(mode, f"bench-watch-{uuid.uuid4().hex}"))
    workers = [start_worker(mode, cache, root, name) for name in names]
    joined: Sampled | None = None
    first: tuple[float, int] | None = None
    live: list[tuple[str, float]] = []
    values, keys = load
    try:
        deadline = time.monotonic() + args.timeout
        restored = wait_until_restored(workers, args.partitions, mode.domain_keyed_input, deadline)
        produce(mode, mode.topics.raw, values, keys)
        while True:
            for one in workers:
                one.sample()
            count = high_watermarks(watch, mode.topics.canonical)
            if first is None and count > 0:
                first = (time.perf_counter(), count)
                if args.join_third:
                    joined = start_worker(mode, cache, root, f"{label}-joined")
                    workers.append(joined)
            if count >= len(values):
                break
            if time.monotonic() > deadline or not all(one.worker.alive() for one in workers):
                raise RuntimeError(f"outputs missing; see {root}")
            time.sleep(0.2)
        last = time.perf_counter()
        if joined is not None:
            wait_for_restores(joined, workers, deadline)
        for one in workers:
            if mode.domain_keyed_input:
                one.mismatches = key_mismatches(one.metrics_port)
            live_maps = root / one.name / LIVE_MAPS_FOLDER
            one.disk = folder_bytes(live_maps) if live_maps.exists() else 0
        live = live_latency(mode, workers, latest)
    finally:
        watch.close()
        for one in workers:
            one.worker.stop()
    assert first is not None
    return Outcome(
        workers,
        restored - min(one.started for one in workers),
        (len(values) - first[1]) / max(last - first[0], 1e-9),
        live,
        joined,
    )


def wait_for_restores(joined: Sampled, workers: list[Sampled], deadline: float) -> None:
    """Sample until the joined worker's two processes restored a partition each and no
    restore came for 10 s."""
    while time.monotonic() < deadline and joined.worker.alive():
        for one in workers:
            one.sample()
        found = restores(joined.worker)
        if {one.process for one in found} == {"worker", "front"} and (
            time.time() - max(one.at for one in found) > 10.0
        ):
            return
        time.sleep(0.2)


def cold_domain_cost(root: Path, patterns: int) -> tuple[float, float, float]:
    """µs per URL of a domain whose map is not held (read and compiled), and of one held,
    one URL at a time (``decide``); and per URL of a cold domain in a front's batches of
    1,000 (``stream_records``, the compiled path)."""
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
    front = StoredLiveMaps(3600.0, MapStore(root / "cold"), cache_domains=len(urls))
    values: list[bytes | None] = [url.encode() for url in urls]
    started = time.perf_counter()
    for at in range(0, len(values), 1000):
        front.canonicalizer.stream_records(values[at : at + 1000], 1 << 20, 0.0, 0, "")
    batched = (time.perf_counter() - started) / len(values)
    assert front.canonicalizer.maps_read == len(values)
    front.close()
    return cold * 1e6, warm * 1e6, batched * 1e6


def restore_cost(root: Path, patterns: int, maps: int = 20_000) -> dict[int, tuple[float, float]]:
    """µs of wall time and of CPU (RocksDB's own threads included, its last flush too) per
    map applied as a maps feed restores one (checked, then stored), over ``maps`` maps of
    distinct domains, with RocksDB's write buffer of 4 MiB and with the store's default."""
    rng = random.Random(11)
    documents = [domain_map(rng, number, patterns).dumps().encode() for number in range(maps)]
    costs = {}
    for buffer in (4 << 20, WRITE_BUFFER_BYTES):
        store = MapStore(root / f"restore-{buffer}", write_buffer_bytes=buffer)
        live = StoredLiveMaps(3600.0, store, cache_domains=64)
        started, cpu = time.perf_counter(), time.process_time()
        for document in documents:
            live.apply_document(check_map(document), document)
        store.flush()
        costs[buffer] = (
            (time.perf_counter() - started) / maps * 1e6,
            (time.process_time() - cpu) / maps * 1e6,
        )
        store.close()
    return costs


def resident_kib() -> int:
    """This process's resident memory now, in KiB."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)


def front_in_process(root: Path, domains: int, patterns: int, urls: int) -> None:
    """A front's per-batch call (``stream_records``, the compiled path) on ``urls`` URLs
    of ``domains`` stored maps drawn by Zipf's law, in this process: URLs/s and maps read
    from the store, per bound of maps held and per collector setting (Python's default
    thresholds, and the front process's)."""
    rng = random.Random(5)
    store = MapStore(root / "in-process")
    seeding = StoredLiveMaps(3600.0, store, cache_domains=64)
    templates = []
    for number in range(domains):
        one = domain_map(rng, number, patterns)
        seeding.apply(one)
        templates.append(url_templates(one))
    values: list[bytes | None] = [url.encode() for url in zipf_urls(templates, urls, 1.1, seed=6)]
    distinct = len({value.split(b"/")[2] for value in values if value is not None})
    print(
        f"in process: {urls:,} URLs over {domains:,} stored maps ({distinct:,} domains met), "
        "one front's batches of 1,000 on the compiled path:",
        flush=True,
    )
    default = gc.get_threshold()
    for cache in (DEFAULT_CACHE_DOMAINS, 4096):  # the largest first: memory freed is reused
        for name, thresholds in (("default", default), ("front's", FRONT_GC_THRESHOLDS)):
            gc.collect()
            before = resident_kib()
            live = StoredLiveMaps(3600.0, store, cache_domains=cache)
            canonicalizer = live.canonicalizer
            gc.set_threshold(*thresholds)
            try:
                for run in ("first", "second"):
                    reads = canonicalizer.maps_read
                    started = time.perf_counter()
                    for at in range(0, len(values), 1000):
                        canonicalizer.stream_records(values[at : at + 1000], 1 << 20, 0.0, 0, "")
                    rate = len(values) / (time.perf_counter() - started)
                    print(
                        f"    {cache:>6} held, collector {name:<8} {run} pass: {rate:9,.0f} "
                        f"URLs/s, {canonicalizer.maps_read - reads:,} maps read",
                        flush=True,
                    )
            finally:
                gc.set_threshold(*default)
            gc.collect()
            held = canonicalizer.maps_held
            grown = resident_kib() - before
            print(
                f"        {held:,} maps held; resident memory +{grown / 1024:.0f} MiB "
                f"({grown / max(held, 1):.1f} KiB a map held)",
                flush=True,
            )
            del live, canonicalizer
    store.close()


def outputs_text(worker: WorkerProcess) -> str:
    """How many URLs its front answered from a learned pattern, and provisionally."""
    found = STOPPED.findall(worker.log_text())
    learned = sum(int(one) for one, _ in found)
    provisional = sum(int(one) for _, one in found)
    return f"outputs {learned:,} learned, {provisional:,} provisional"


def worker_text(one: Sampled) -> str:
    mismatches = "" if one.mismatches is None else f"; key mismatches {one.mismatches}"
    return (
        f"    {one.name:<16} peak RSS {one.peak_sum / 1024:7.0f} MiB (each process's peak "
        f"{' + '.join(f'{peak / 1024:.0f}' for peak in one.peaks)}); maps on disk "
        f"{one.disk / 2**20:.0f} MiB{mismatches}; {outputs_text(one.worker)}; "
        f"maps: {feeds_text(one.worker)}"
    )


def measure(base: Settings, args: argparse.Namespace, domains: int, root: Path) -> None:
    settings = isolated_settings(
        base,
        f"bench-lm{domains}",
        root / "state",
        partitions=args.partitions,
        **INPUTS[args.inputs],
    )
    ensure_topics(settings)
    started = time.monotonic()
    templates, latest = publish_maps(settings, domains, args.patterns, args.seed)
    zipf = 0.0 if args.uniform else args.zipf
    urls = zipf_urls(templates, args.urls, zipf, args.seed)
    values = [url.encode() for url in urls]
    keys = [parse(url).host.encode() for url in urls] if args.inputs == "keyed" else None
    copied = replace(settings, topics=replace(settings.topics, raw=f"{settings.topics.raw}.pass"))
    ensure_topics(copied)
    produce(settings, copied.topics.raw, values, keys)
    distinct = len({parse(url).host for url in urls})
    law = "uniformly" if args.uniform else f"Zipf s={args.zipf}"
    print(
        f"{domains} domains x {args.patterns} patterns published, {len(urls)} URLs of "
        f"{distinct} of them ({law}; {args.inputs} input), "
        f"in {time.monotonic() - started:.0f}s",
        flush=True,
    )
    copy = f"{settings.topics.raw}.copy"
    ensure_topics(replace(settings, topics=replace(settings.topics, raw=copy)))
    baseline = passthrough(settings, copied.topics.raw, copy, len(urls), settings.batch_size)
    print(f"  confluent-kafka passthrough: {baseline:10,.0f} msgs/s", flush=True)
    for cache in args.modes:
        latest = replace(latest, version=latest.version + 1)
        outcome = run_workers(settings, args, cache, (values, keys), root / f"d{domains}", latest)
        name = "every map held (cache 0)" if cache == 0 else f"maps on disk, cache {cache}"
        live = (
            ", ".join(f"{seconds:.2f}s in {name}" for name, seconds in outcome.live)
            if outcome.live
            else "not seen within 120s"
        )
        workers = f"{args.workers} workers" if args.workers > 1 else "1 worker"
        print(
            f"  {name}, {workers}: every maps partition restored {outcome.restored_after:.0f}s "
            f"after the start; then {outcome.rate:9,.0f} URLs/s = "
            f"{outcome.rate / baseline:.3f} x passthrough; "
            f"a new version of {latest.domain}'s map live: {live}",
            flush=True,
        )
        for one in outcome.workers:
            print(worker_text(one), flush=True)
        if outcome.joined is not None:
            found = restores(outcome.joined.worker)
            took = (
                f"its last restore {max(one.at for one in found) - outcome.joined.started:.1f}s "
                "after its start"
                if found
                else "no restore seen"
            )
            print(
                f"    the joined worker: {took}; restores: "
                + (
                    ", ".join(
                        f"{one.process} [{one.partition}] {one.records} records in "
                        f"{one.seconds:.2f}s"
                        for one in found
                    )
                    or "none"
                ),
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
        "--uniform", action="store_true", help="draw the URLs' domains uniformly, not by Zipf"
    )
    parser.add_argument(
        "--modes",
        type=counts,
        default=[4096, 0],
        help="MIQPS_MAPS_CACHE_DOMAINS of each worker (0: every map held); default 4096,0",
    )
    parser.add_argument(
        "--workers", type=int, default=1, help="canonicalizer workers sharing the group"
    )
    parser.add_argument(
        "--inputs",
        choices=sorted(INPUTS),
        default="unkeyed",
        help="URLs with no key, keyed by domain, or re-keyed by the repartition hop",
    )
    parser.add_argument(
        "--join-third",
        action="store_true",
        help="start one more worker at the first output and report its restores",
    )
    parser.add_argument(
        "--in-process-domains",
        type=int,
        default=50_000,
        help="stored maps of the in-process front measured at the end",
    )
    parser.add_argument(
        "--in-process-only",
        action="store_true",
        help="only the measures made in this process (no broker needed)",
    )
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--timeout", type=float, default=1800.0)
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error("--workers: at least 1")
    base = Settings.from_env()
    with tempfile.TemporaryDirectory(prefix="miqps-live-maps-") as folder:
        root = Path(folder)
        print(f"{os.cpu_count()} cores; state and logs in {root}", flush=True)
        try:
            for domains in [] if args.in_process_only else args.domains:
                measure(base, args, domains, root)
            cold, warm, batched = cold_domain_cost(root, args.patterns)
            print(
                f"a URL of a cold domain (its map read from the store and compiled): "
                f"{cold:.0f} µs; of a domain held: {warm:.1f} µs; of a cold domain in a "
                f"front's batches of 1,000: {batched:.0f} µs",
                flush=True,
            )
            costs = restore_cost(root, args.patterns)
            base_wall, base_cpu = costs[4 << 20]
            print("a map restored (checked and stored), per RocksDB write buffer:", flush=True)
            for buffer, (wall, cpu) in costs.items():
                print(
                    f"    {buffer >> 20:>3} MiB: {wall:4.0f} µs ({wall / base_wall:.2f}×), "
                    f"CPU {cpu:4.0f} µs ({cpu / base_cpu:.2f}×)",
                    flush=True,
                )
            front_in_process(root, args.in_process_domains, args.patterns, 150_000)
        finally:
            for settings in CREATED:
                delete_topics(settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
