"""Co-partitioning by domain on the real broker (docs/STREAMS.md, "Co-partitioning by
domain"): a worker whose domain-keyed topics disagree stops before it consumes anything;
the topics a worker creates agree with those that exist; with input keyed by domain, each
of two canonicalizer workers holds only the maps of its partitions' domains, while every
input still has one output; and the producer configuration the docs give puts every key
in the partition of :func:`~streams.kafka.partitioning.key_partition`."""

from __future__ import annotations

import random
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from miqps.urls import parse
from streams.kafka.admin import ensure_topics
from streams.kafka.clients import DeliveryReports
from streams.kafka.partitioning import key_partition
from streams.settings import Settings
from testkit.scrape import free_port, scrape, value
from testkit.tools import TopicReader, WorkerProcess, delete_topics, isolated_settings, produce
from testkit.urlgen import build_maps, generate

pytestmark = pytest.mark.timeout(240)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "STREAMS.md"


def two_canonicalizers(settings: Settings, folder: Path) -> tuple[list[WorkerProcess], list[int]]:
    """Two canonicalize workers of ``settings``, each with a state folder and a metrics
    port of its own (its ``port``), started."""
    workers: list[WorkerProcess] = []
    ports: list[int] = []
    for name in ("one", "two"):
        port = free_port()
        ports.append(port)
        workers.append(
            WorkerProcess(
                settings.with_overrides(metrics_port=port, state_dir=folder / f"state-{name}"),
                "canonicalize",
                folder / f"worker-{name}.log",
            ).start()
        )
    return workers, ports


@pytest.fixture
def isolated(bootstrap: str, tmp_path: Path) -> Iterator[Settings]:
    settings = isolated_settings(
        Settings.from_env({"KAFKA_BOOTSTRAP_SERVERS": bootstrap}),
        "copart",
        tmp_path / "state",
        partitions=2,
    )
    try:
        yield settings
    finally:
        delete_topics(settings)


def create(settings: Settings, counts: dict[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers, "log_level": 0})
    futures = admin.create_topics([NewTopic(name, count, 1) for name, count in counts.items()])
    for future in futures.values():
        future.result(30)
    wait_until(
        lambda: all(partition_counts(settings).get(name) == n for name, n in counts.items()),
        30,
        lambda: f"topics {sorted(counts)} not in the metadata",
    )


def partition_counts(settings: Settings) -> dict[str, int]:
    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers, "log_level": 0})
    return {
        name: len(metadata.partitions)
        for name, metadata in admin.list_topics(timeout=30).topics.items()
        if metadata.partitions
        and (name in settings.topics.all().values() or name.startswith(settings.app_id))
    }


def committed_groups(settings: Settings) -> list[str]:
    """The consumer groups of ``settings``' app id that exist on the broker."""
    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers, "log_level": 0})
    groups = admin.list_consumer_groups(request_timeout=30).result().valid
    return [g.group_id for g in groups if g.group_id.startswith(settings.app_id)]


def wait_until(condition: Callable[[], bool], timeout: float, what: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s: {what()}")
        time.sleep(0.5)


@pytest.mark.parametrize("keyed_input", [False, True], ids=["internal", "keyed-input"])
def test_a_worker_whose_domain_keyed_topics_disagree_stops_before_consuming(
    isolated: Settings, tmp_path: Path, keyed_input: bool
) -> None:
    settings = isolated.with_overrides(input_keyed_by_domain=keyed_input)
    topics = settings.topics
    odd = topics.raw if keyed_input else topics.samples
    create(settings, {topics.maps: 2, odd: 3})
    ensure_topics(settings)  # the others, as a worker would create them
    counts = partition_counts(settings)
    assert counts[odd] == 3 and counts[topics.map_history] == 2
    produce(settings, topics.raw, [b"https://shop.example/p?id=1&utm_source=x"] * 5)
    worker = WorkerProcess(settings, "canonicalize,probe", tmp_path / "worker.log").start()
    try:
        wait_until(lambda: not worker.alive(), 60, worker.log_digest)
    finally:
        code = worker.stop()
    assert code == 2, worker.log_digest()
    errors = [line for line in worker.log_text().splitlines() if line.startswith("miqps worker:")]
    assert len(errors) == 1, worker.log_text()
    expected = ", ".join(
        f"{name} has {counts[name]}"
        for name in [
            topics.maps,
            topics.map_history,
            topics.map_updates,
            topics.probe_requests,
            topics.samples,
            topics.observations,
            *([topics.raw] if keyed_input else []),
        ]
    )
    assert "the domain-keyed topics must have one partition count" in errors[0]
    assert f"{expected}." in errors[0]
    assert "Co-partitioning by domain" in errors[0]
    with TopicReader(settings, topics.canonical) as outputs:
        outputs.poll(2.0)
        assert outputs.records == []
    assert committed_groups(settings) == []


@pytest.mark.parametrize("keys", ["keyed", "hop"])
def test_the_topics_a_worker_creates_agree_with_the_existing_domain_keyed_ones(
    isolated: Settings, keys: str
) -> None:
    hop = keys == "hop"
    settings = isolated.with_overrides(input_keyed_by_domain=not hop, repartition_input=hop)
    topics = settings.topics
    create(settings, {topics.probe_requests: 3})
    returned = ensure_topics(settings)
    counts = partition_counts(settings)
    assert returned == {name: counts[name] for name in topics.all().values() if name in counts}
    assert (topics.by_domain in counts) == hop, "the hop's topic exists only for the hop"
    keyed = [
        topics.maps,
        topics.map_history,
        topics.map_updates,
        topics.samples,
        topics.observations,
        topics.by_domain if hop else topics.raw,
    ]
    assert {name: counts[name] for name in keyed} == dict.fromkeys(keyed, 3)
    assert (counts[topics.canonical], counts[topics.dlq]) == (2, 2)  # MIQPS_PARTITIONS
    assert counts[topics.raw] == (2 if hop else 3), "the hop reads input of any partitioning"
    changelogs = {name: count for name, count in counts.items() if name.endswith("-changelog")}
    assert sorted(changelogs.values()) == [3, 3]


def docs_partitioner() -> str:
    """The ``partitioner`` of the producer recipe of docs/STREAMS.md's co-partitioning
    section."""
    text = DOCS.read_text("utf-8")
    section = text[text.index("### Co-partitioning by domain") :]
    section = section[: section.index("\n## ")]
    found = re.findall(r'"partitioner":\s*"([a-z0-9_]+)"', section)
    assert len(found) == 1, found
    partitioner: str = found[0]
    return partitioner


def test_the_docs_producer_recipe_puts_each_domain_in_the_partition_of_key_partition(
    isolated: Settings,
) -> None:
    partitions = 7
    topic = f"{isolated.app_id}-partitioner"
    create(isolated, {topic: partitions})
    rng = random.Random(5)
    domains = ["shop.example", "xn--bcher-kva.example", "127.0.0.1", "[::1]", "a.b"]
    domains += [f"{'x' * rng.randrange(1, 40)}{n}.example" for n in range(400)]
    reports = DeliveryReports()
    producer = Producer(
        {
            "bootstrap.servers": isolated.bootstrap_servers,
            "partitioner": docs_partitioner(),
            "on_delivery": reports,
            "log_level": 0,
        }
    )
    for domain in domains:
        producer.produce(topic, f"https://{domain}/".encode(), domain.encode())
    assert producer.flush(30) == 0
    reports.raise_errors()
    consumer = Consumer(
        {
            "bootstrap.servers": isolated.bootstrap_servers,
            "group.id": f"copart-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    landed: dict[str, int] = {}
    deadline = time.monotonic() + 60
    try:
        while len(landed) < len(domains) and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.5):
                if message.error() is None:
                    landed[(message.key() or b"").decode()] = message.partition() or 0
    finally:
        consumer.close()
    assert len(landed) == len(domains)
    assert len(set(landed.values())) == partitions
    wrong = {d: p for d, p in landed.items() if p != key_partition(d.encode(), partitions)}
    assert wrong == {}


MAPPED_SITES = 24


@pytest.mark.timeout(420)
def test_two_fronts_on_keyed_input_hold_only_their_partitions_domains(
    isolated: Settings, tmp_path: Path
) -> None:
    settings = isolated.with_overrides(partitions=4, input_keyed_by_domain=True)
    topics = settings.topics
    ensure_topics(settings)
    urls, sites = generate(6_000, seed=71)
    mapped = sites[:MAPPED_SITES]
    maps = build_maps(mapped, random.Random(72))
    mapped_hosts = {m.domain for m in maps}
    produce(
        settings, topics.maps, (m.dumps().encode() for m in maps), (m.domain.encode() for m in maps)
    )
    hosts = [parse(url).host for url in urls]
    assert mapped_hosts <= set(hosts)
    unmapped = sorted(set(hosts) - mapped_hosts)
    # Mis-keyed inputs of unmapped domains only (so that no front holds a map because of
    # them): no key, another domain's key, and the right key in a wrong partition.
    no_key = [url for url, host in zip(urls, hosts, strict=True) if host == unmapped[0]][:7]
    other_key = [url for url, host in zip(urls, hosts, strict=True) if host == unmapped[1]][:5]
    misplaced_host = unmapped[2]
    misplaced = [url for url, host in zip(urls, hosts, strict=True) if host == misplaced_host][:4]
    assert no_key and other_key and misplaced
    mis_keyed = set(no_key) | set(other_key) | set(misplaced)
    keyed = [(url, host) for url, host in zip(urls, hosts, strict=True) if url not in mis_keyed]

    workers, ports = two_canonicalizers(settings, tmp_path)
    try:
        assigned = wait_for_two_fronts(settings, workers)
        produce(
            settings,
            topics.raw,
            (url.encode() for url, _ in keyed),
            (host.encode() for _, host in keyed),
        )
        produce(settings, topics.raw, (u.encode() for u in no_key))
        produce(
            settings,
            topics.raw,
            (u.encode() for u in other_key),
            [b"elsewhere.example"] * len(other_key),
        )
        wrong_partition = (key_partition(misplaced_host.encode(), 4) + 1) % 4
        produce_to(settings, topics.raw, misplaced, misplaced_host.encode(), wrong_partition)

        outputs = TopicReader(settings, topics.canonical)
        try:
            wait_until(
                lambda: outputs.wait_for(len(urls), 1.0),
                180,
                lambda: "\n".join(w.log_digest() for w in workers),
            )
            outputs.poll(2.0)
            seen = Counter(orjson.loads(record or b"")["url"] for _, record, _ in outputs.records)
        finally:
            outputs.close()
        assert seen == Counter(urls)  # every input has exactly one output

        expected = sorted(
            float(sum(key_partition(h.encode(), 4) in mine for h in mapped_hosts))
            for mine in assigned.values()
        )
        fronts = []
        for port in ports:
            wait_until(partial(front_reported, port), 30, lambda: "no figures of a front")
            fronts.append(front_figure(port, "miqps_maps_held", form="compiled"))
        print(f"maps held (compiled) by the fronts: {fronts}; of their partitions: {expected}")
        assert sorted(fronts) == expected
        assert sum(fronts) == len(mapped_hosts)  # no domain held twice

        def mismatches(reason: str) -> float:
            return sum(
                value(scrape(port), "miqps_input_key_mismatches_total", reason=reason)
                for port in ports
            )

        wait_until(
            lambda: (
                (mismatches("key"), mismatches("partition"))
                == (len(no_key) + len(other_key), len(misplaced))
            ),
            15,
            lambda: f"mismatches: key {mismatches('key')}, partition {mismatches('partition')}",
        )
        assert all(w.alive() for w in workers)
    finally:
        for worker in workers:
            worker.stop()


def front_figure(port: int, name: str, **labels: str) -> float:
    return value(scrape(port), name, process="front", **labels)


def front_reported(port: int) -> bool:
    return "miqps_maps_held" in scrape(port) and front_figure(port, "miqps_maps_held") > 0


def wait_for_two_fronts(settings: Settings, workers: list[WorkerProcess]) -> dict[str, set[int]]:
    """The input partitions of each front once both share them, two each, by member."""
    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers, "log_level": 0})
    group = f"{settings.app_id}-canonicalizer"
    assigned: dict[str, set[int]] = {}

    def shared() -> bool:
        nonlocal assigned
        if not all(w.alive() for w in workers):
            raise AssertionError("\n".join(w.log_digest() for w in workers))
        description = admin.describe_consumer_groups([group])[group].result(30)
        assigned = {
            member.member_id: {
                tp.partition
                for tp in member.assignment.topic_partitions
                if tp.topic == settings.front_input_topic
            }
            for member in description.members
        }
        return len(assigned) == 2 and sorted(map(len, assigned.values())) == [2, 2]

    wait_until(shared, 120, lambda: f"front assignments: {assigned}")
    return assigned


def produce_to(settings: Settings, topic: str, urls: list[str], key: bytes, partition: int) -> None:
    """``urls`` keyed ``key``, all in ``partition`` whatever the partitioner says."""
    reports = DeliveryReports()
    producer = Producer(
        {"bootstrap.servers": settings.bootstrap_servers, "on_delivery": reports, "log_level": 0}
    )
    for url in urls:
        producer.produce(topic, url.encode(), key, partition=partition)
    assert producer.flush(30) == 0
    reports.raise_errors()
