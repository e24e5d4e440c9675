"""Stream benchmark: one canonicalizer worker against a plain consume->produce passthrough.

    .venv/bin/python -m bench.stream_throughput [--urls 400000] [--domains-for-memory 1000000]
                                                [--inputs unkeyed,keyed,hop]

Needs the local broker (scripts/kafka-local start). Three measurements, each on topics of
its own:

1. throughput: maps for every pattern are published first ("already learned"), then
   ``--urls`` URLs are produced to ``urls.raw``; a confluent-kafka consume->produce
   passthrough with the same batching and at-least-once rule (flush, then store offsets)
   copies them once, then one ``miqps worker --agents canonicalize`` canonicalizes them.
   URLs/s are counted from the first output to the last (worker start-up excluded).
   ``--inputs`` repeats this, on topics of its own each, for input of any key
   (``unkeyed``, the default), input keyed by domain with ``MIQPS_INPUT_KEYED_BY_DOMAIN``
   (``keyed``), and input of any key re-keyed by the repartition hop with
   ``MIQPS_REPARTITION_INPUT`` (``hop``: every URL crosses Kafka twice);
2. memory: ``--domains-for-memory`` URLs, each of a distinct domain (all unlearned, so all
   go through the pattern-stats table), through one worker; its resident memory once all
   outputs are out and the stats agent has caught up;
3. time to a live map (``--live-map``, on the simulated web): two canonicalizer workers and
   one probing worker; a burst of URLs of a new site is produced, and the time from the end
   of the burst to the map being live in both canonicalizers is measured from their logs.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from miqps.maps import DomainMap
from miqps.urls import parse
from streams.kafka.admin import consumer_config, ensure_topics, producer_config
from streams.settings import LearningPolicy, Settings
from testkit.tools import WorkerProcess, delete_topics, produce
from testkit.tools import isolated_settings as isolated_settings_of
from testkit.urlgen import STREAM_WORDS as WORDS
from testkit.urlgen import learned_maps, synthetic_urls

CREATED: list[Settings] = []


def isolated_settings(base: Settings, label: str, state: Path, **changes: object) -> Settings:
    settings = isolated_settings_of(base, label, state, **changes)
    CREATED.append(settings)
    return settings


def high_watermarks(consumer: Consumer, topic: str) -> int:
    metadata = consumer.list_topics(topic, timeout=10).topics[topic]
    total = 0
    for partition in metadata.partitions:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        total += high
    return total


def passthrough(
    settings: Settings, source: str, target: str, expected: int, batch_size: int
) -> float:
    """Messages/s of a confluent-kafka consume->produce copy with at-least-once offsets."""
    consumer = Consumer(
        consumer_config(
            settings,
            f"bench-pass-{uuid.uuid4().hex}",
            **{
                "enable.auto.commit": True,
                "enable.auto.offset.store": False,
                "fetch.max.bytes": 64 * 1024 * 1024,
            },
        )
    )
    producer = Producer(producer_config(settings))
    consumer.subscribe([source])
    copied = 0
    started: float | None = None
    try:
        while copied < expected:
            messages = consumer.consume(batch_size, 0.05)
            if not messages:
                continue
            if started is None:
                started = time.perf_counter()
            offsets: dict[tuple[str, int], int] = {}
            for message in messages:
                if message.error() is not None:
                    continue
                while True:
                    try:
                        producer.produce(target, message.value(), message.key())
                        break
                    except BufferError:
                        producer.poll(0.05)
                offsets[(message.topic() or "", message.partition() or 0)] = (
                    message.offset() or 0
                ) + 1
            producer.flush(30)
            consumer.store_offsets(
                offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()]
            )
            copied += len(messages)
        assert started is not None
        return copied / (time.perf_counter() - started)
    finally:
        consumer.close()


def wait_outputs(
    settings: Settings,
    topic: str,
    expected: int,
    timeout: float,
    worker: WorkerProcess,
    seen: list[tuple[float, int]] | None = None,
) -> tuple[float, int, float]:
    """(first output time, outputs then, last output time) by polling high watermarks;
    each poll's (wall-clock time, outputs) is added to ``seen``."""
    probe = Consumer(consumer_config(settings, f"bench-watch-{uuid.uuid4().hex}"))
    try:
        deadline = time.monotonic() + timeout
        first: tuple[float, int] | None = None
        while True:
            count = high_watermarks(probe, topic)
            now = time.perf_counter()
            if seen is not None:
                seen.append((time.time(), count))
            if first is None and count > 0:
                first = (now, count)
            if count >= expected:
                assert first is not None
                return first[0], first[1], now
            if time.monotonic() > deadline or not worker.alive():
                raise RuntimeError(f"only {count} of {expected} outputs; see {worker.log_path}")
            time.sleep(0.05)
    finally:
        probe.close()


def process_tree(pid: int) -> list[int]:
    pids = [pid]
    for task in Path(f"/proc/{pid}/task").iterdir():
        children = (task / "children").read_text().split()
        for child in children:
            pids.extend(process_tree(int(child)))
    return pids


def rss_by_process(pid: int) -> list[tuple[int, int]]:
    """Resident and peak resident KiB of ``pid`` and of each of its children."""
    sizes = []
    for member in process_tree(pid):
        fields = {}
        for line in Path(f"/proc/{member}/status").read_text().splitlines():
            name, _, value = line.partition(":")
            fields[name] = value.strip()
        sizes.append((int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])))
    return sizes


def rss_kib(pid: int) -> tuple[int, int]:
    """Resident and peak resident KiB of ``pid`` and its children (the front process)."""
    sizes = rss_by_process(pid)
    return sum(rss for rss, _ in sizes), sum(peak for _, peak in sizes)


def rss_text(pid: int) -> str:
    return " + ".join(f"{rss / 1024:.0f}" for rss, _ in rss_by_process(pid)) + " MiB"


def group_lag(settings: Settings, group: str, topic: str) -> int:
    consumer = Consumer(consumer_config(settings, group, **{"enable.auto.commit": False}))
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics[topic]
        partitions = [TopicPartition(topic, p) for p in metadata.partitions]
        committed = consumer.committed(partitions, timeout=10)
        lag = 0
        for position in committed:
            _, high = consumer.get_watermark_offsets(position, timeout=10)
            lag += high - max(position.offset, 0)
        return lag
    finally:
        consumer.close()


def learned_inputs(
    settings: Settings,
    count: int,
    domains: int,
    keyed: bool = False,
) -> tuple[list[str], list[DomainMap], str]:
    """``count`` synthetic URLs in ``urls.raw`` (``keyed`` by their domain, with murmur2,
    or with no key) and maps deciding all their patterns in ``miqps.maps``; (the URLs, the
    maps, an empty topic for a passthrough copy)."""
    ensure_topics(settings)
    urls = list(synthetic_urls(count, domains))
    maps = learned_maps(urls)
    produce(
        settings,
        settings.topics.maps,
        (m.dumps().encode() for m in maps),
        (m.domain.encode() for m in maps),
    )
    produce(
        settings,
        settings.topics.raw,
        (url.encode() for url in urls),
        (parse(url).host.encode() for url in urls) if keyed else None,
    )
    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers})
    copy_topic = settings.topics.raw + ".copy"
    from confluent_kafka.cimpl import NewTopic

    admin.create_topics([NewTopic(copy_topic, settings.partitions, 1)])[copy_topic].result(30)
    return urls, maps, copy_topic


INPUTS = {
    "unkeyed": ({}, "target >= 0.6"),
    "keyed": ({"input_keyed_by_domain": True}, "target >= 0.5"),
    "hop": ({"repartition_input": True}, "target >= 0.3"),
}


def measure_throughput(
    base: Settings, args: argparse.Namespace, root: Path, inputs: str = "unkeyed"
) -> None:
    changes, target = INPUTS[inputs]
    settings = isolated_settings(
        base, f"bench-tp-{inputs}", root / f"tp-{inputs}", partitions=args.partitions, **changes
    )
    urls, maps, copy_topic = learned_inputs(
        settings, args.urls, args.domains, keyed=settings.input_keyed_by_domain
    )
    print(
        f"throughput, {inputs} input: {len(urls)} URLs over {len(maps)} learned domains "
        f"({sum(len(m.patterns) for m in maps)} patterns), {args.partitions} partitions",
        flush=True,
    )
    rate_pass = passthrough(
        settings, settings.topics.raw, copy_topic, len(urls), settings.batch_size
    )
    print(f"  confluent-kafka passthrough:  {rate_pass:10,.0f} msgs/s", flush=True)
    worker = WorkerProcess(settings, "canonicalize", root / f"tp-{inputs}-worker.log")
    worker.start()
    seen: list[tuple[float, int]] = []
    try:
        first, at_first, last = wait_outputs(
            settings, settings.topics.canonical, len(urls), args.timeout, worker, seen
        )
        rss, _ = rss_kib(worker.pid)
    finally:
        worker.stop()
    rate = (len(urls) - at_first) / (last - first)
    print(
        f"  canonicalizer worker:         {rate:10,.0f} URLs/s "
        f"(ratio {rate / rate_pass:.3f}; {target}); RSS {rss / 1024:.0f} MiB",
        flush=True,
    )
    if settings.domain_keyed_input:
        steady = rate_once_restored(worker.log_text(), seen)
        if steady is not None:
            print(
                f"  the same once every maps partition was restored: {steady:10,.0f} URLs/s "
                f"(ratio {steady / rate_pass:.3f})",
                flush=True,
            )


RESUMED_LINE = re.compile(r"^\[(?P<at>[\d-]+ [\d:,]+)\].*canonicalizer: partitions .* resumed")


def rate_once_restored(log: str, seen: list[tuple[float, int]]) -> float | None:
    """URLs/s from the front's last resumed partition (its maps restored) to the last
    output, from the outputs ``seen`` over time; None if too few outputs came after."""
    resumed = [
        datetime.strptime(match["at"], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        for line in log.splitlines()
        if (match := RESUMED_LINE.match(line))
    ]
    if not resumed:
        return None
    after = [(at, count) for at, count in seen if at >= resumed[-1]]
    if len(after) < 2 or after[-1][0] <= after[0][0]:
        return None
    return (after[-1][1] - after[0][1]) / (after[-1][0] - after[0][0])


def measure_memory(base: Settings, args: argparse.Namespace, root: Path) -> None:
    count = args.domains_for_memory
    settings = isolated_settings(
        base,
        "bench-mem",
        root / "mem",
        partitions=args.partitions,
        policy=LearningPolicy(rare_after=10 * 24 * 3600.0),
    )
    ensure_topics(settings)
    rng = random.Random(11)
    urls = (
        f"https://d{number}.{WORDS[number % 10]}.example/p/{rng.randrange(10**6)}"
        f"?id={rng.randrange(10**6)}&utm_source={WORDS[rng.randrange(10)]}".encode()
        for number in range(count)
    )
    started = time.monotonic()
    produce(settings, settings.topics.raw, urls)
    print(
        f"memory: {count} URLs of distinct domains produced in {time.monotonic() - started:.0f}s",
        flush=True,
    )
    worker = WorkerProcess(settings, "canonicalize", root / "mem-worker.log")
    worker.start()
    try:
        first, _, last = wait_outputs(
            settings, settings.topics.canonical, count, args.timeout, worker
        )
        print(
            f"  all {count} outputs after {last - first:.0f}s "
            f"({count / (last - first):,.0f} URLs/s with every pattern unlearned)",
            flush=True,
        )
        deadline = time.monotonic() + args.timeout
        lag = group_lag(settings, settings.app_id, settings.topics.samples)
        while lag > 0 and time.monotonic() < deadline and worker.alive():
            print(
                f"  pattern-stats agent: {lag} sample packs behind, RSS {rss_text(worker.pid)}",
                flush=True,
            )
            time.sleep(15)
            lag = group_lag(settings, settings.app_id, settings.topics.samples)
        rss, peak = rss_kib(worker.pid)
        parts = rss_text(worker.pid)
    finally:
        worker.stop()
    print(
        f"  resident memory with {count} domains in state: {rss / 1024:.0f} MiB "
        f"(worker + front process: {parts}; peak {peak / 1024:.0f} MiB; target <= 600 MiB); "
        f"stats lag {lag}",
        flush=True,
    )


LIVE_LINE = re.compile(
    r"^\[(?P<at>[\d-]+ [\d:,]+)\].*streams.maps.feed: map live: (?P<domain>\S+) v(?P<version>\d+)"
)


def live_times(log: str, domain: str) -> dict[int, float]:
    """Map version -> when the canonicalizer front of this log had it live."""
    times: dict[int, float] = {}
    for line in log.splitlines():
        match = LIVE_LINE.match(line)
        if match and match["domain"] == domain:
            at = datetime.strptime(match["at"], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            times.setdefault(int(match["version"]), at)
    return times


def measure_live_map(base: Settings, args: argparse.Namespace, root: Path) -> None:
    """Per requested pattern: from the end of a burst of a new site's URLs to the first map
    version with the pattern being live in both canonicalizer workers."""
    import orjson

    from simweb.corpus import generate_corpus
    from simweb.server import SimWeb
    from simweb.sites import build_sites
    from testkit.tools import TopicReader

    sites = build_sites("tuning", 2, 3)
    site = sites[0]
    with SimWeb(sites, seed=3, rate_limit_per_second=50.0) as web:
        settings = isolated_settings(
            base,
            "bench-live",
            root / "live",
            proxy=web.proxy_url,
            partitions=args.partitions,
            probe_rate_per_host=args.probe_rate,
        )
        ensure_topics(settings)
        workers = [
            WorkerProcess(
                settings.with_overrides(state_dir=root / f"live-{name}"),
                agents,
                root / f"live-{name}.log",
            )
            for name, agents in (("c1", "canonicalize"), ("c2", "canonicalize"), ("p", "probe"))
        ]
        maps = TopicReader(settings, settings.topics.maps)
        requests = TopicReader(settings, settings.topics.probe_requests)
        for worker in workers:
            worker.start()
        try:
            time.sleep(20)
            burst = [item.url.encode() for item in generate_corpus([site], 400, 5)]
            produce(settings, settings.topics.raw, burst)
            burst_done = time.time()
            quiet_since, seen = time.monotonic(), 0
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline and time.monotonic() - quiet_since < 60:
                maps.poll(1.0)
                if len(maps.records) != seen:
                    seen, quiet_since = len(maps.records), time.monotonic()
            requests.poll(1.0)
            logs = [worker.log_text() for worker in workers[:2]]
        finally:
            for worker in workers:
                worker.stop()
            maps.close()
            requests.close()
    first_version: dict[str, int] = {}
    for _, value, _ in maps.records:
        document = orjson.loads(value or b"{}")
        if document.get("domain") == site.host:
            for pattern in document["patterns"]:
                first_version.setdefault(pattern, document["version"])
    requested = {
        pattern
        for _, value, _ in requests.records
        for pattern, info in orjson.loads(value or b"{}").get("patterns", {}).items()
        if info["reason"] == "enough-samples"
    }
    live = [live_times(log, site.host) for log in logs]
    delays = sorted(
        max(times[first_version[pattern]] for times in live) - burst_done
        for pattern in requested
        if pattern in first_version and all(first_version[pattern] in t for t in live)
    )
    if not delays:
        print("live map: nothing went live within 240s")
        return
    within = sum(1 for delay in delays if delay <= 30.0)
    print(
        f"live map ({args.probe_rate:g} fetches/s per host): {len(delays)} of "
        f"{len(requested)} patterns requested after a burst of "
        f"{len(burst)} URLs of a new site went live in both canonicalizers; seconds after "
        f"the burst: first {delays[0]:.1f}, median {delays[len(delays) // 2]:.1f}, "
        f"90% {delays[int(len(delays) * 0.9)]:.1f}, last {delays[-1]:.1f}; "
        f"{within / len(delays):.0%} within 30s (target: 30s)",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.stream_throughput",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--urls", type=int, default=400_000)
    parser.add_argument("--domains", type=int, default=5_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument(
        "--domains-for-memory", type=int, default=1_000_000, help="0 skips the memory measurement"
    )
    parser.add_argument(
        "--live-map",
        action="store_true",
        help="also measure the time to a live map on the simulated web",
    )
    parser.add_argument(
        "--probe-rate",
        type=float,
        default=10.0,
        help="probe requests per second per host for --live-map (politeness)",
    )
    parser.add_argument(
        "--inputs",
        default="unkeyed",
        help="comma-separated throughput runs among unkeyed, keyed and hop (default unkeyed)",
    )
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument(
        "--keep-topics", action="store_true", help="leave the benchmark's topics on the broker"
    )
    args = parser.parse_args(argv)
    unknown = set(args.inputs.split(",")) - set(INPUTS)
    if unknown:
        parser.error(
            f"--inputs: unknown {', '.join(sorted(unknown))}; choose among {', '.join(INPUTS)}"
        )
    base = Settings.from_env()
    root = Path(tempfile.mkdtemp(prefix="miqps-bench-"))
    print(f"state and worker logs in {root}", flush=True)
    try:
        if not args.skip_throughput:
            for inputs in args.inputs.split(","):
                measure_throughput(base, args, root, inputs.strip())
        if args.live_map:
            measure_live_map(base, args, root)
        if args.domains_for_memory:
            measure_memory(base, args, root)
    finally:
        if not args.keep_topics:
            for settings in CREATED:
                delete_topics(settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
