"""Observations survive a restart and a rebalance, on the real broker: a worker reads a
crawler's pages live and commits; a second worker joins the group, the first stops, and the
second, which takes the domain's partition, reads that partition again from its beginning
up to the committed offset. It holds the pages, counts the invalid record without
dead-lettering it again, and answers a probe request that came meanwhile only once they are
restored, from them: the pages it took from them are not fetched."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import orjson
import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from miqps.observations import observation_record
from streams.kafka.admin import ensure_topics
from streams.kafka.partitioning import key_partition
from streams.messages import ProbeRequest, RequestedPattern
from streams.settings import Settings
from testkit.scrape import free_port, scrape, value
from testkit.tools import TopicReader, WorkerProcess, delete_topics, isolated_settings, produce
from tests.miqps.drifting import serve_drifting

# Two workers' start, a rebalance, one worker's stop and one domain learned: about 60 s.
pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

PARTITIONS = 2
HOST = "drift.test"
PATTERN = "/p?id&ref"
URLS = [f"http://{HOST}/p?id={n}&ref=r{n}" for n in range(8)]
CRAWLED = [*URLS, *(url.split("&")[0] for url in URLS)]
FOLLOWED = "maps partitions followed:"
STAMP = r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+)"


def wait_until(check: Callable[[], bool], timeout: float, why: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(why())
        time.sleep(0.5)


def logged_at(line_pattern: str, log: str) -> float:
    match = re.search(STAMP + r".*" + line_pattern, log, re.MULTILINE)
    assert match, line_pattern
    return datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def metrics(port: int) -> dict[str, float]:
    try:
        samples = scrape(port)
    except OSError:
        return {}
    figures = {
        "pages": value(samples, "miqps_observed_pages"),
        "restores": value(samples, "miqps_observations_restores_total"),
        "restoring": value(samples, "miqps_observations_partitions_restoring"),
    }
    for outcome in ("kept", "no evidence", "invalid"):
        figures[outcome] = value(samples, "miqps_observations_total", outcome=outcome)
        figures[f"restored {outcome}"] = value(
            samples, "miqps_observations_restored_total", outcome=outcome
        )
    return figures


def committed(settings: Settings, topic: str, partition: int) -> int:
    """The Faust group's committed offset of ``topic[partition]`` (-1: none)."""
    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers, "log_level": 0})
    request = [ConsumerGroupTopicPartitions(settings.app_id, [TopicPartition(topic, partition)])]
    for future in admin.list_consumer_group_offsets(request, request_timeout=30).values():
        offsets = future.result().topic_partitions or []
        return max((p.offset for p in offsets), default=-1)
    return -1


def test_a_worker_that_takes_a_partition_restores_its_observations(
    bootstrap: str, tmp_path: Path
) -> None:
    with serve_drifting() as (site, proxy):
        settings = isolated_settings(
            Settings.from_env({"KAFKA_BOOTSTRAP_SERVERS": bootstrap}),
            "obsrestore",
            tmp_path / "state",
            proxy=proxy,
            partitions=PARTITIONS,
            probe_rate_per_host=200.0,
        )
        topics = settings.topics
        ensure_topics(settings)
        partition = key_partition(HOST.encode(), PARTITIONS)
        observations = [
            observation_record(url, *site.page(url), content_type="text/html") for url in CRAWLED
        ]
        produce(
            settings,
            topics.observations,
            [*observations, b"{not an observation"],
            [HOST.encode()] * (len(observations) + 1),
        )
        end = len(observations) + 1
        ports = [free_port(), free_port()]
        workers = [
            WorkerProcess(
                settings.with_overrides(state_dir=tmp_path / f"state-{n}", metrics_port=ports[n]),
                "probe",
                tmp_path / f"worker-{n}.log",
            )
            for n in range(2)
        ]
        dead = TopicReader(settings, topics.dlq)
        updates = TopicReader(settings, topics.map_updates)

        def digests() -> str:
            return "\n\n".join(worker.log_digest() for worker in workers)

        try:
            # The first worker reads the observations live, dead-letters the invalid one,
            # and commits where it read to.
            workers[0].start()
            wait_until(
                lambda: (
                    metrics(ports[0]).get("kept") == len(CRAWLED)
                    and metrics(ports[0]).get("invalid") == 1
                ),
                90,
                digests,
            )
            assert dead.wait_for(1, 30), digests()
            wait_until(
                lambda: committed(settings, topics.observations, partition) == end, 30, digests
            )

            # A second worker joins, then the first stops, and a probe request for the
            # domain comes: the second worker ends up with every partition, reads the
            # observations of the domain's again, and only then learns the domain.
            workers[1].start()
            wait_until(lambda: FOLLOWED in workers[1].log_text(), 90, digests)
            workers[0].stop()
            site.requests = 0
            site.fetched.clear()
            request = ProbeRequest(
                HOST,
                "/p",
                {PATTERN: RequestedPattern("enough-samples", "", len(URLS), 0.0)},
                tuple(URLS),
                time.time(),
            )
            produce(settings, topics.probe_requests, [request.to_bytes()], [HOST.encode()])
            assert updates.wait_for(1, 90), digests()
            restored = metrics(ports[1])
            assert restored["pages"] == len(CRAWLED) and restored["restoring"] == 0, restored
            assert restored["restored kept"] == len(CRAWLED)
            assert restored["restored invalid"] == 1
            assert restored["restored no evidence"] == 0
            assert restored["kept"] == restored["invalid"] == 0  # nothing read live
            assert restored["restores"] >= 1
            log = workers[1].log_text()
            line = (
                rf"observations: {re.escape(topics.observations)}\[{partition}\] restored: "
                rf"{end} records up to offset {end} \({len(CRAWLED)} kept, 0 no evidence, 1 invalid"
            )
            assert re.search(line, log), digests()
            assert logged_at(line, log) <= logged_at(re.escape(f"probe {HOST}: "), log)
            dead.poll(2.0)
        finally:
            for worker in workers:
                worker.stop()
            dead.close()
            updates.close()
            delete_topics(settings)

    # The invalid record was dead-lettered once, by the worker that read it live.
    assert len(dead.records) == 1, dead.records
    records = [orjson.loads(record or b"") for _, record, _ in updates.records]
    decided = [record for record in records if record["pattern"] == PATTERN]
    assert decided, records
    for record in decided:
        assert record["accepted"] and record["kept_after"] == ["id"]
        assert record["observed"] > 0
        assert record["fetches"] == site.requests
    spared = [url for url in CRAWLED if url not in site.fetched]
    print(f"\n  fetched: {len(site.fetched)}; crawled URLs never fetched: {len(spared)}")
    assert spared, site.fetched
