"""The observing agent on the real broker: the pages a crawler sends to
``miqps.observations`` are taken by the probing worker instead of fetched, its map updates
say how many, and a record that is not an observation is dead-lettered with its reason."""

from __future__ import annotations

import time
from pathlib import Path

import orjson
import pytest

from miqps.observations import observation_record
from streams.kafka.admin import ensure_topics
from streams.messages import ProbeRequest, RequestedPattern
from streams.settings import Settings
from testkit.scrape import free_port, scrape, value
from testkit.tools import TopicReader, WorkerProcess, delete_topics, isolated_settings, produce
from tests.miqps.drifting import serve_drifting
from tests.streams.support import assert_valid

# About 25 s alone here: the worker's start, its join, one domain learned.
pytestmark = [pytest.mark.kafka, pytest.mark.timeout(150)]

HOST = "drift.test"
PATTERN = "/p?id&ref"
URLS = [f"http://{HOST}/p?id={n}&ref=r{n}" for n in range(8)]


def test_observed_pages_are_taken_instead_of_fetched(bootstrap: str, tmp_path: Path) -> None:
    with serve_drifting() as (site, proxy):
        settings = isolated_settings(
            Settings.from_env({"KAFKA_BOOTSTRAP_SERVERS": bootstrap}),
            "observe",
            tmp_path / "state",
            proxy=proxy,
            partitions=2,
            probe_rate_per_host=200.0,
            metrics_port=free_port(),
        )
        ensure_topics(settings)
        crawled = [*URLS, *(url.split("&")[0] for url in URLS)]
        observations = [
            observation_record(url, *site.page(url), content_type="text/html") for url in crawled
        ]
        for observation in observations:
            assert_valid("observation", orjson.loads(observation))
        produce(
            settings,
            settings.topics.observations,
            [*observations, b"{not an observation"],
            [HOST.encode()] * (len(observations) + 1),
        )
        site.requests = 0
        worker = WorkerProcess(settings, "probe", tmp_path / "worker.log").start()
        updates = TopicReader(settings, settings.topics.map_updates)
        dead = TopicReader(settings, settings.topics.dlq)
        try:
            deadline = time.monotonic() + 90
            while True:
                assert worker.alive() and time.monotonic() < deadline, worker.log_digest()
                try:
                    samples = scrape(settings.metrics_port or 0)
                except OSError:
                    samples = {}
                read = value(samples, "miqps_observations_total", outcome="kept")
                if read == len(crawled):
                    break
                time.sleep(0.5)
            assert value(samples, "miqps_observed_pages") == len(crawled)
            assert value(samples, "miqps_observations_total", outcome="invalid") == 1
            request = ProbeRequest(
                HOST,
                "/p",
                {PATTERN: RequestedPattern("enough-samples", "", len(URLS), 0.0)},
                tuple(URLS),
                time.time(),
            )
            produce(settings, settings.topics.probe_requests, [request.to_bytes()], [HOST.encode()])
            assert updates.wait_for(1, 60), worker.log_digest()
            assert dead.wait_for(1, 30), worker.log_digest()
        finally:
            worker.stop()
            updates.close()
            dead.close()
            delete_topics(settings)

    records = [orjson.loads(record or b"") for _, record, _ in updates.records]
    decided = [record for record in records if record["pattern"] == PATTERN]
    assert decided, records
    for record in decided:
        assert_valid("map-update", record)
        assert record["accepted"] and record["kept_after"] == ["id"]
        assert record["observed"] > 0
        assert record["fetches"] == site.requests
    [letter] = [orjson.loads(record or b"") for _, record, _ in dead.records]
    assert letter["stage"] == "probe"
    assert "not JSON" in letter["reason"]
