"""Two deployments on one broker, told apart only by ``MIQPS_TOPIC_PREFIX``: real worker
processes, the real broker and the simulated web. Neither may see the other's state: its
topics, its consumer groups, its tables' changelogs, its outputs or its maps."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import orjson
import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException
from confluent_kafka.admin import AdminClient

from simweb.corpus import generate_corpus
from simweb.server import SimWeb
from simweb.sites import Site, build_sites
from streams.kafka.admin import ensure_topics
from streams.settings import Settings, Topics, variables
from testkit.tools import TopicReader, produce, worker_command

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(540)]

URLS_PER_SITE = 150


@dataclass
class Deployment:
    """One deployment: a prefix, the site whose URLs it gets, and its worker process."""

    prefix: str
    site: Site
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = None

    @property
    def settings(self) -> Settings:
        return Settings.from_env(self.env)

    def start(self) -> None:
        """``miqps worker`` with nothing but the prefix to tell it from the other one."""
        child = {key: value for key, value in os.environ.items() if key not in declared()}
        child.pop(Topics.PREFIX.name, None)
        self.log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            worker_command(),
            env={**child, **self.env, "PYTHONUNBUFFERED": "1"},
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(30)
        if self.log is not None:
            self.log.close()

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self) -> str:
        return self.log_path.read_text("utf-8", "replace")[-3000:]


def declared() -> set[str]:
    return {variable.name for variable in variables()}


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.5)


def wait_while_alive(deployment: Deployment, condition: Callable[[], bool], what: str) -> None:
    wait_until(lambda: condition() or not deployment.alive(), 240, what)
    assert deployment.alive(), deployment.log_tail()


def outputs_arrived(reader: TopicReader) -> Callable[[], bool]:
    return lambda: reader.wait_for(URLS_PER_SITE, 0.5)


def audited(settings: Settings) -> Callable[[], bool]:
    """Whether the probing agent answered a request: an audit record, learned or not."""
    return lambda: bool(record_keys(settings, settings.topics.map_updates))


def committed_topics_by_group(admin: AdminClient) -> dict[str, set[str]]:
    """Every consumer group on the broker, with the topics it has committed offsets on."""
    groups = admin.list_consumer_groups(request_timeout=30).result().valid
    committed: dict[str, set[str]] = {}
    for listing in groups:
        request = [ConsumerGroupTopicPartitions(listing.group_id)]
        for future in admin.list_consumer_group_offsets(request, request_timeout=30).values():
            with contextlib.suppress(KafkaException):  # a group deleted meanwhile
                offsets = future.result().topic_partitions or []
                committed[listing.group_id] = {p.topic for p in offsets if p.offset >= 0}
    return committed


def record_keys(settings: Settings, topic: str) -> set[str]:
    with TopicReader(settings, topic) as reader:
        reader.poll(3.0)
        return {key.decode() for key, _, _ in reader.records if key is not None}


@pytest.fixture
def deployments(bootstrap: str, tmp_path: Path) -> Iterator[tuple[Deployment, Deployment]]:
    sites = build_sites("tuning", 2, 0)
    with SimWeb(sites, seed=0, rate_limit_per_second=0, flaky_rate=0.0) as web:
        pair = tuple(
            Deployment(
                prefix,
                site,
                {
                    "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
                    Topics.PREFIX.name: prefix,
                    "MIQPS_STATE_DIR": str(tmp_path / label / "state"),
                    "MIQPS_PROXY": web.proxy_url,
                    "MIQPS_PARTITIONS": "2",
                    "MIQPS_PROBE_RATE": "50",
                    "MIQPS_RARE_AFTER": "4",
                    "MIQPS_STOP_TIMEOUT": "30",
                },
                tmp_path / f"{label}.log",
            )
            for label, site in zip("ab", sites, strict=True)
            for prefix in [f"iso{label}-{uuid.uuid4().hex[:8]}."]
        )
        first, second = pair
        try:
            yield first, second
        finally:
            for deployment in pair:
                deployment.stop()
            delete_prefixed(bootstrap, [deployment.prefix for deployment in pair])


def delete_prefixed(bootstrap: str, prefixes: list[str]) -> None:
    """The topics and groups named with these prefixes (only those: the broker is shared)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    prefixed = tuple(prefixes)
    groups = [
        listing.group_id
        for listing in admin.list_consumer_groups(request_timeout=30).result().valid
        if listing.group_id.startswith(prefixed)
    ]
    if groups:
        for future in admin.delete_consumer_groups(groups, request_timeout=30).values():
            with contextlib.suppress(KafkaException):
                future.result()
    topics = [name for name in admin.list_topics(timeout=30).topics if name.startswith(prefixed)]
    if topics:
        for future in admin.delete_topics(topics, operation_timeout=30).values():
            with contextlib.suppress(KafkaException):
                future.result(30)


def test_two_prefixed_deployments_on_one_broker_share_no_state(
    bootstrap: str, deployments: tuple[Deployment, Deployment]
) -> None:
    inputs: dict[str, set[str]] = {}
    for deployment in deployments:
        corpus = generate_corpus([deployment.site], URLS_PER_SITE, 1)
        inputs[deployment.prefix] = {item.url for item in corpus}
        ensure_topics(deployment.settings)  # as `miqps worker --create-topics-only` does
        deployment.start()
        produce(
            deployment.settings,
            deployment.settings.topics.raw,
            [item.url.encode() for item in corpus],
        )
    readers = {
        deployment.prefix: TopicReader(deployment.settings, deployment.settings.topics.canonical)
        for deployment in deployments
    }
    try:
        for deployment in deployments:
            wait_while_alive(
                deployment,
                outputs_arrived(readers[deployment.prefix]),
                f"the outputs of {deployment.prefix}",
            )
        for deployment in deployments:
            wait_while_alive(
                deployment,
                audited(deployment.settings),
                f"a probe run of {deployment.prefix}",
            )
        time.sleep(8.0)  # both kinds of consumer commit in the background, every few seconds
        for reader in readers.values():
            reader.poll(1.0)
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        committed = committed_topics_by_group(admin)
        topic_names = set(admin.list_topics(timeout=30).topics)
    finally:
        for reader in readers.values():
            reader.close()

    first, second = deployments
    for deployment, other in ((first, second), (second, first)):
        mine, theirs = deployment.prefix, other.prefix
        outputs = [orjson.loads(value) for _, value, _ in readers[mine].records if value]
        assert {document["url"] for document in outputs} == inputs[mine]
        assert {document["domain"] for document in outputs} == {deployment.site.host}

        settings = deployment.settings
        assert record_keys(settings, settings.topics.map_updates) == {deployment.site.host}
        assert record_keys(settings, settings.topics.maps) <= {deployment.site.host}

        changelogs = {
            name for name in topic_names if name.startswith(mine) and name.endswith("-changelog")
        }
        tables = {
            table
            for table in ("pattern-stats", "probe-demand")
            for name in changelogs
            if table in name
        }
        assert tables == {"pattern-stats", "probe-demand"}, (
            f"the tables' changelogs of {mine} are not named with its prefix: {changelogs}"
        )
        for changelog in changelogs:
            domains = {key.split("\t")[0] for key in record_keys(settings, changelog)}
            assert domains == {deployment.site.host}, (changelog, domains)

        groups = {
            group for group, topics in committed.items() if any(t.startswith(mine) for t in topics)
        }
        # The front's group reads the input; Faust's reads the samples and probe requests.
        assert len(groups) >= 2, (mine, committed)
        strays = {group for group in groups if not group.startswith(mine)}
        assert not strays, f"groups of {mine} not named with its prefix: {strays}"
        shared = {group for group in groups if any(t.startswith(theirs) for t in committed[group])}
        assert not shared, f"groups that read both deployments: {shared}"
