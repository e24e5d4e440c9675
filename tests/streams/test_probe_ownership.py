"""Two probing workers on the real broker share a host's Crawl-delay: probe requests are
keyed by domain, so one partition, and one worker at a time, holds all of a host's."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from simweb.polite import PoliteWeb
from streams.kafka.admin import ensure_topics
from streams.messages import ProbeRequest, RequestedPattern
from streams.settings import Settings
from testkit.tools import TopicReader, WorkerProcess, delete_topics, isolated_settings, produce

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

HOST = "spaced.polite.test"
SHAPES = ("/a", "/b", "/c", "/d")


def requests() -> list[ProbeRequest]:
    return [
        ProbeRequest(
            HOST,
            shape,
            {f"{shape}/*?id&utm_source": RequestedPattern("enough-samples", "", 3, 0.0)},
            tuple(f"http://{HOST}{shape}/{n}?id={n}&utm_source=s{n}" for n in range(3)),
            time.time(),
        )
        for shape in SHAPES
    ]


def test_a_host_s_crawl_delay_holds_with_two_probing_workers(
    bootstrap: str, tmp_path: Path
) -> None:
    with PoliteWeb(crawl_delay=0.5) as web:
        base = Settings.from_env({"KAFKA_BOOTSTRAP_SERVERS": bootstrap})
        settings = isolated_settings(
            base,
            "ownership",
            tmp_path / "state",
            proxy=web.proxy_url,
            partitions=4,
            probe_rate_per_host=100.0,
        )
        ensure_topics(settings)
        workers = [
            WorkerProcess(
                settings.with_overrides(state_dir=tmp_path / f"state-{n}"),
                "probe",
                tmp_path / f"worker-{n}.log",
            ).start()
            for n in range(2)
        ]
        updates = TopicReader(settings, settings.topics.map_updates)
        try:
            time.sleep(20)  # both join the group before the requests come
            produce(
                settings,
                settings.topics.probe_requests,
                [request.to_bytes() for request in requests()],
                [HOST.encode()] * len(SHAPES),
            )
            assert updates.wait_for(len(SHAPES), 180), [w.log_text()[-2000:] for w in workers]
        finally:
            updates.close()
            for worker in workers:
                worker.stop()
            delete_topics(settings)
        received = web.log(HOST)
    assert received.pages >= len(SHAPES) * 3
    assert received.shortest_gap() >= 0.5 * 0.95
