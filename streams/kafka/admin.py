"""confluent-kafka clients and topic administration.

Every producer here uses ``murmur2_random``: the partitioner of Java clients, aiokafka and
Faust, so that a key lands in the same partition whichever client wrote it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource
from confluent_kafka.admin._resource import ResourceType
from confluent_kafka.cimpl import NewTopic

from streams.kafka.copartition import count_to_create, domain_keyed_topics
from streams.kafka.lograte import librdkafka_logger
from streams.kafka.tables import changelog_topics
from streams.settings import Settings

log = logging.getLogger(__name__)

PARTITIONER = "murmur2_random"


def producer_config(settings: Settings, **extra: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "bootstrap.servers": settings.bootstrap_servers,
        "partitioner": PARTITIONER,
        "enable.idempotence": True,
        "linger.ms": 5,
        "batch.num.messages": 10_000,
        "queue.buffering.max.messages": 1_000_000,
        "message.max.bytes": settings.topic_max_message_bytes,
        "log_level": 3,
        "logger": librdkafka_logger(),
    }
    config.update(extra)
    return config


def consumer_config(settings: Settings, group_id: str, **extra: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "bootstrap.servers": settings.bootstrap_servers,
        "group.id": group_id,
        "auto.offset.reset": "earliest",
        # librdkafka's default, said here because the maps, their history and audits, and
        # exactly once the front's outputs, are written in transactions: an aborted one's
        # records must never be read.
        "isolation.level": "read_committed",
        "enable.partition.eof": False,
        "log_level": 3,
        "logger": librdkafka_logger(),
    }
    config.update(extra)
    return config


def admin_config(settings: Settings) -> dict[str, Any]:
    return {
        "bootstrap.servers": settings.bootstrap_servers,
        "log_level": 3,
        "logger": librdkafka_logger(),
    }


@dataclass(frozen=True, slots=True)
class TopicSpec:
    name: str
    partitions: int
    config: Mapping[str, str]


def topic_specs(settings: Settings, keyed: int | None = None) -> list[TopicSpec]:
    """The topics of ``settings``: ``MIQPS_PARTITIONS`` partitions each, but ``keyed`` (if
    given) for the domain-keyed ones (:mod:`streams.kafka.copartition`)."""
    topics = settings.topics
    n = settings.partitions
    k = keyed or n
    large = {"max.message.bytes": str(settings.topic_max_message_bytes)}
    return [
        TopicSpec(topics.raw, k if settings.input_keyed_by_domain else n, large),
        *([TopicSpec(topics.by_domain, k, large)] if settings.repartition_input else []),
        TopicSpec(topics.canonical, n, {}),
        TopicSpec(topics.dlq, n, large),
        TopicSpec(topics.samples, k, {}),
        TopicSpec(topics.probe_requests, k, large),
        TopicSpec(topics.observations, k, large),
        TopicSpec(
            topics.maps,
            k,
            {
                **large,
                "cleanup.policy": "compact",
                "min.cleanable.dirty.ratio": "0.1",
                "segment.ms": str(6 * 3600 * 1000),
            },
        ),
        TopicSpec(topics.map_updates, k, large),
        TopicSpec(
            topics.map_history,
            k,
            {**large, "cleanup.policy": "delete", "retention.ms": history_retention_ms(settings)},
        ),
    ]


def history_retention_ms(settings: Settings) -> str:
    """``retention.ms`` of the map history topic: -1 keeps every version forever."""
    days = settings.map_history_retention_days
    return str(round(days * 24 * 3600 * 1000)) if days > 0 else "-1"


def ensure_topics(settings: Settings, timeout: float = 30.0) -> dict[str, int]:
    """Create the missing topics, then the tables' changelogs with the partition count of
    the topic each table follows; return the partition count of each topic. A missing
    domain-keyed topic gets the count of those that exist
    (:func:`~streams.kafka.copartition.count_to_create`)."""
    admin = AdminClient(admin_config(settings))
    existing = _partition_counts(admin, timeout)
    keyed = count_to_create(settings, existing)
    if keyed != settings.partitions and any(
        name not in existing for name in domain_keyed_topics(settings)
    ):
        log.info(
            "domain-keyed topics are created with %d partitions, as those that exist "
            "(MIQPS_PARTITIONS is %d)",
            keyed,
            settings.partitions,
        )
    counts = _create_missing(admin, settings, topic_specs(settings, keyed), timeout)
    compacted = {"cleanup.policy": "compact"}
    changelogs = [
        TopicSpec(name, counts[source], compacted)
        for name, source in changelog_topics(settings).items()
    ]
    _create_missing(admin, settings, changelogs, timeout)
    return counts


def _partition_counts(admin: AdminClient, timeout: float) -> dict[str, int]:
    return {
        name: len(metadata.partitions)
        for name, metadata in admin.list_topics(timeout=timeout).topics.items()
        if metadata.error is None and metadata.partitions
    }


def _create_missing(
    admin: AdminClient, settings: Settings, specs: list[TopicSpec], timeout: float
) -> dict[str, int]:
    existing = admin.list_topics(timeout=timeout).topics
    missing = [spec for spec in specs if spec.name not in existing]
    if missing:
        futures = admin.create_topics(
            [
                NewTopic(
                    spec.name,
                    spec.partitions,
                    settings.replication_factor,
                    config=dict(spec.config),
                )
                for spec in missing
            ],
            operation_timeout=timeout,
        )
        for name, future in futures.items():
            try:
                future.result(timeout)
                log.info("created topic %s", name)
            except KafkaException as error:
                if error.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
    return wait_for_partitions(admin, [spec.name for spec in specs], timeout)


def wait_for_partitions(admin: AdminClient, names: list[str], timeout: float) -> dict[str, int]:
    deadline = time.monotonic() + timeout
    while True:
        metadata = admin.list_topics(timeout=timeout).topics
        counts = {
            name: len(metadata[name].partitions)
            for name in names
            if name in metadata and metadata[name].error is None and metadata[name].partitions
        }
        if len(counts) == len(names) or time.monotonic() > deadline:
            absent = sorted(set(names) - set(counts))
            if absent:
                raise RuntimeError(f"topics not available: {', '.join(absent)}")
            return counts
        time.sleep(0.2)


@dataclass(frozen=True, slots=True)
class TopicFacts:
    """What says which topic a reader's state is of (:func:`topic_facts`)."""

    cluster_id: str
    topic_id: str | None
    """The id Kafka gave the topic when it created it; None when the broker gives none."""
    partitions: int
    delete_retention_ms: int | None
    """How long the topic keeps a tombstone once compacted (None when not a number)."""


NO_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"
"""The all-zero topic id, as confluent-kafka prints it: a broker without topic ids."""


def topic_facts(settings: Settings, topic: str, timeout: float = 30.0) -> TopicFacts:
    """The cluster id, topic id, partition count and ``delete.retention.ms`` of ``topic``.
    Raises :class:`KafkaException` (or :class:`RuntimeError` for a missing topic) when the
    broker does not say, within ``timeout`` seconds each."""
    admin = AdminClient(admin_config(settings))
    metadata = admin.list_topics(topic, timeout=timeout)
    found = metadata.topics.get(topic)
    if found is None or found.error is not None or not found.partitions:
        raise RuntimeError(f"topic {topic} does not exist")
    described = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout)
    topic_id = str(described[topic].result(timeout).topic_id)
    resource = ConfigResource(ResourceType.TOPIC, topic)
    [configs] = admin.describe_configs([resource], request_timeout=timeout).values()
    retention = configs.result(timeout).get("delete.retention.ms")
    try:
        retention_ms = int(retention.value) if retention is not None else None
    except (TypeError, ValueError):
        retention_ms = None
    return TopicFacts(
        str(metadata.cluster_id),
        None if topic_id == NO_TOPIC_ID else topic_id,
        len(found.partitions),
        retention_ms,
    )
