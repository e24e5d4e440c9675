"""The worker's /metrics on the real broker: a worker with both roles learns the simulated
web, and every figure it exports is checked against what went through Kafka (outputs, dead
letters, map updates, maps, samples) and against the web's own request count. The Grafana
dashboard may only query metrics this scrape shows."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client.samples import Sample

from simweb.corpus import generate_corpus
from streams.kafka.admin import ensure_topics
from streams.kafka.clients import read_compacted
from streams.kafka.tables import PATTERN_STATS_TABLE
from streams.settings import Settings
from testkit.scrape import free_port, quiet_for, scrape, value
from testkit.tools import TopicReader, WorkerProcess, produce
from tests.streams.test_pipeline import (
    BAD_INPUTS,
    Web,
    base,  # noqa: F401  (a fixture)
    documents,
    enveloped,
    fast_learning,
    wait_until,
    web,  # noqa: F401  (a fixture)
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[3]
DASHBOARD = REPO / "deploy" / "grafana" / "dashboards" / "miqps.json"


def dashboard_metrics() -> set[str]:
    """Every metric name the Grafana dashboard's queries use."""
    names: set[str] = set()

    def walk(node: object) -> Iterator[str]:
        if isinstance(node, dict):
            for key, item in node.items():
                if key == "expr" and isinstance(item, str):
                    yield item
                else:
                    yield from walk(item)
        elif isinstance(node, list):
            for item in node:
                yield from walk(item)

    for expression in walk(json.loads(DASHBOARD.read_text("utf-8"))):
        names.update(re.findall(r"\b(miqps_[a-z0-9_]+)", expression))
    return names


def verdicts_of(audits: list[dict[str, Any]]) -> dict[str, int]:
    return {
        "accepted": sum(bool(a["accepted"]) for a in audits),
        "rejected": sum(not a["accepted"] and a["kept_after"] is not None for a in audits),
        "undecided": sum(not a["accepted"] and a["kept_after"] is None for a in audits),
    }


def lagged_partitions(found: dict[str, list[Sample]]) -> set[tuple[str, str]]:
    """The (topic, partition) pairs the canonicalizer front reports a lag for."""
    return {
        (s.labels["topic"], s.labels["partition"])
        for s in found.get("miqps_consumer_lag", [])
        if s.labels["consumer"] == "canonicalizer"
    }


def moving(found: dict[str, list[Sample]]) -> tuple[float, ...]:
    """The counters that move while the probing agent works."""
    return (
        *(
            value(found, "miqps_map_updates_total", verdict=verdict)
            for verdict in ("accepted", "rejected", "undecided")
        ),
        value(found, "miqps_samples_forwarded_total"),
        value(found, "miqps_fetch_requests_total"),
        value(found, "miqps_patterns_live"),
    )


def test_the_metrics_endpoint_counts_what_went_through(
    base: Settings,  # noqa: F811
    web: Web,  # noqa: F811
    tmp_path: Path,
) -> None:
    settings = fast_learning(base, "metrics", tmp_path / "state", web.server.proxy_url)
    ensure_topics(settings)
    corpus = generate_corpus(web.sites, 150, 1)
    port = free_port()
    worker = WorkerProcess(
        settings, "canonicalize,probe", tmp_path / "worker.log", {"MIQPS_METRICS_PORT": str(port)}
    ).start()
    outputs = TopicReader(settings, settings.topics.canonical)
    dead = TopicReader(settings, settings.topics.dlq)
    updates = TopicReader(settings, settings.topics.map_updates)
    readers = (outputs, dead, updates)
    try:
        produce(settings, settings.topics.raw, enveloped(corpus, 1) + list(BAD_INPUTS))
        wait_until(lambda: outputs.wait_for(len(corpus), 0.5), 120, "outputs")
        wait_until(lambda: dead.wait_for(len(BAD_INPUTS), 0.5), 30, "dead letters")
        wait_until(quiet_for(port, 10.0), 200, "learning to settle")
        assert worker.alive(), worker.log_text()[-3000:]
        all_partitions = {(settings.topics.raw, str(n)) for n in range(settings.partitions)}
        # A probe retry scheduled by its backoff timer fetches nothing until it runs, so
        # quiet_for cannot see it coming: read the topics between two scrapes that agree.
        for _ in range(10):
            before = scrape(port)
            updates.poll(1.0)
            outs, audits = documents(outputs), documents(updates)
            maps = {
                key: orjson.loads(document)
                for key, document in read_compacted(settings, settings.topics.maps, 30)
                if document
            }
            forwarded = sum(
                item["kind"] == "url"
                for _, pack in read_compacted(settings, settings.topics.samples)
                for item in orjson.loads(pack or b"[]")
            )
            found = scrape(port)
            if moving(before) == moving(found) and lagged_partitions(found) == all_partitions:
                break
        statuses = {
            status: sum(d["status"] == status for d in outs)
            for status in ("learned", "provisional")
        }
        dashboard_needs = dashboard_metrics()
    finally:
        worker.stop()
        for reader in readers:
            reader.close()

    assert len(outs) == len(corpus)
    for status, count in statuses.items():
        assert value(found, "miqps_urls_total", status=status) == count, status
    assert value(found, "miqps_urls_consumed_total") == len(corpus) + len(BAD_INPUTS)
    assert value(found, "miqps_samples_forwarded_total") == forwarded > 0
    assert value(found, "miqps_front_up") == 1

    lags = found["miqps_consumer_lag"]
    assert lagged_partitions(found) == all_partitions
    assert {s.labels["consumer"] for s in lags} >= {"canonicalizer", "pattern-stats", "probe"}
    batches = value(found, "miqps_front_batch_seconds_count")
    assert 1 <= batches <= value(found, "miqps_front_batches_total")
    assert value(found, "miqps_front_batch_seconds_bucket", le="+Inf") == batches

    verdicts = verdicts_of(audits)
    assert verdicts["accepted"] > 0
    for verdict, count in verdicts.items():
        assert value(found, "miqps_map_updates_total", verdict=verdict) == count, verdict
    assert value(found, "miqps_patterns_live") == sum(len(m["patterns"]) for m in maps.values())
    assert value(found, "miqps_oldest_map_age_seconds") >= 0

    assert value(found, "miqps_fetch_requests_total") == web.server.requests_total() > 0
    assert value(found, "miqps_fetches_total", outcome="ok") > 0
    hosts = {s.labels["host"] for s in found["miqps_politeness_wait_seconds_total"]}
    assert hosts <= {site.host for site in web.sites} | {"_other"} and hosts
    assert value(found, "miqps_recalled_pages") > 0  # the learning runs' pages, for the next
    assert "miqps_recalled_takes_total" in found
    assert value(found, "miqps_probe_requests_pending") == 0
    assert value(found, "miqps_probe_requests_in_flight") == 0
    assert value(found, "miqps_state_bytes", table=PATTERN_STATS_TABLE) > 0

    missing = (
        dashboard_needs - {re.sub(r"_(bucket|count|sum)$", "", name) for name in found} - set(found)
    )
    assert not missing, f"the dashboard queries metrics the worker does not export: {missing}"
