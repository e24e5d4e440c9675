"""Publishing maps, and reading back every version published.

:func:`publish_map` is the one way a map is published: its :class:`MapVersion` record to
``miqps.map-history`` (never compacted: every version stays for the retention time), then
the map itself to the compacted ``miqps.maps``, which every worker follows live. The
probing agent and the operator's commands (:mod:`streams.cli.maps`) gather a version's
records, with its audit records for ``miqps.map-updates``, in a :class:`Publication`, and
:func:`write` sends them: at least once, one by one, flushed before anything is
acknowledged, so a version is either in both topics or retried; exactly once
(``MIQPS_PROCESSING_GUARANTEE``), in one Kafka transaction, so a ``read_committed`` reader
never sees the map without its history record and audits, nor these without the map.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import faust
from confluent_kafka import Producer
from faust.types import TopicT

from miqps.history import diff_maps
from miqps.maps import DomainMap, GateVerdict, InvalidMap, check_map, parse_map
from streams.kafka.admin import producer_config
from streams.kafka.clients import DeliveryReports, produce, read_compacted
from streams.kafka.topics import raw_topic
from streams.kafka.transactions import (
    TRANSACTION_CALL_SECONDS,
    Record,
    TransactionalWriter,
    worker_transactional_id,
)
from streams.messages import BadInput, MapUpdateRecord, MapVersion, ProducedBy
from streams.settings import Settings, Topics


class Sink(Protocol):
    async def send(self, topic: str, key: bytes, value: bytes) -> None: ...


class Publication:
    """The records of one publication, in the order they were sent."""

    def __init__(self) -> None:
        self.records: list[Record] = []

    async def send(self, topic: str, key: bytes, value: bytes) -> None:
        self.records.append((topic, key, value))


async def write(publication: Publication, sink: Sink, writer: TransactionalWriter | None) -> None:
    """Send ``publication``'s records: in one transaction of ``writer`` if there is one
    (in an executor: it blocks until committed), else one by one to ``sink``."""
    if writer is not None:
        await asyncio.get_running_loop().run_in_executor(None, writer.write, publication.records)
        return
    for topic, key, value in publication.records:
        await sink.send(topic, key, value)


def transactional_writer(
    settings: Settings,
    name: str,
    timeout: float = TRANSACTION_CALL_SECONDS,
    patience: float | None = None,
    *,
    fences_predecessor: bool = False,
) -> TransactionalWriter | None:
    """The writer of publications under ``exactly_once`` (each of its calls to Kafka
    blocking at most ``timeout`` seconds, a failed publication written again for
    ``patience`` seconds); None at least once. A worker's writer ``fences_predecessor``:
    it keeps one transactional id across the worker's restarts
    (:func:`~streams.kafka.transactions.worker_transactional_id`); an operator's command
    takes a fresh one, so that two commands never fence each other."""
    if not settings.exactly_once:
        return None
    return TransactionalWriter(
        producer_config(settings),
        f"{settings.app_id}-{name}",
        timeout,
        patience,
        worker_transactional_id(settings, name) if fences_predecessor else None,
    )


class FaustSink:
    """Records sent through a Faust app's producer (flushed before the agent commits)."""

    def __init__(self, app: faust.App) -> None:
        self.app = app
        self._topics: dict[str, TopicT] = {}

    async def send(self, topic: str, key: bytes, value: bytes) -> None:
        target = self._topics.get(topic)
        if target is None:
            target = self._topics[topic] = raw_topic(self.app, topic)
        await target.send(key=key, value=value)


class ProducerSink:
    """Records queued on a confluent-kafka producer; :meth:`flush` waits for them and
    raises if any was not delivered."""

    def __init__(self, settings: Settings) -> None:
        self.reports = DeliveryReports()
        self.producer = Producer(producer_config(settings, on_delivery=self.reports))

    async def send(self, topic: str, key: bytes, value: bytes) -> None:
        produce(self.producer, topic, value, key)

    def flush(self, timeout: float) -> None:
        pending = self.producer.flush(timeout)
        if pending:
            raise TimeoutError(f"{pending} records not delivered within {timeout:g}s")
        self.reports.raise_errors()


async def publish_map(
    sink: Sink, topics: Topics, domain_map: DomainMap, produced_by: ProducedBy, note: str = ""
) -> None:
    """Publish ``domain_map``: its history record, then the map for the workers."""
    key = domain_map.domain.encode()
    await sink.send(
        topics.map_history, key, MapVersion.of(domain_map, produced_by, note).to_bytes()
    )
    await sink.send(topics.maps, key, domain_map.dumps().encode())


def probe_producer(audits: Iterable[MapUpdateRecord]) -> tuple[ProducedBy, str]:
    """Who produced a probe's map update, from its audit records: ``reverify`` when every
    accepted pattern was a re-verification, else ``stream-probe``; and the request reasons
    as a note."""
    reasons = sorted({audit.request_reason for audit in audits if audit.accepted})
    return ("reverify" if reasons == ["reverify"] else "stream-probe"), ", ".join(reasons)


def operator_audits(
    before: DomainMap | None, after: DomainMap, verdict: GateVerdict, request_reason: str
) -> list[MapUpdateRecord]:
    """The ``miqps.map-updates`` records of an operator's update: one per pattern whose
    kept or dropped names it changed (added, changed or removed)."""
    records: list[MapUpdateRecord] = []
    for change in diff_maps(before, after):
        if change.after is None:
            removed = MapUpdateRecord.undecided(
                after.domain, change.pattern, request_reason, 0, verdict.reason, before, 0
            )
            records.append(replace(removed, accepted=True, version_after=after.version))
        else:
            records.append(
                MapUpdateRecord.decided(change.pattern, request_reason, before, after, verdict, 0)
            )
    return records


class UnknownDomain(LookupError):
    """Neither a current map nor any kept version of the domain."""


@dataclass(slots=True)
class History:
    """The kept versions of one domain's map, oldest first (the last record of each
    version), and the current map on the maps topic (None if there is none)."""

    domain: str
    versions: list[MapVersion] = field(default_factory=list)
    current: DomainMap | None = None
    unreadable: list[str] = field(default_factory=list)
    republished: list[int] = field(default_factory=list)

    def version(self, number: int) -> MapVersion | None:
        for record in self.versions:
            if record.version == number:
                return record
        return None

    def newest(self) -> DomainMap:
        """The current map, or the newest kept version if the maps topic lacks it."""
        if self.current is not None:
            return self.current
        if not self.versions:
            raise UnknownDomain(self.domain)
        return self.versions[-1].domain_map()


def read_history(settings: Settings, domain: str, timeout: float) -> History:
    """Every kept version of ``domain`` and its current map, read from the partition of
    each topic the domain's key goes to. Raises :class:`UnknownDomain` when there is
    neither, and the Kafka client's errors (KafkaException, RuntimeError for a missing
    topic, TimeoutError)."""
    key = domain.encode()
    history = History(domain)
    by_version: dict[int, MapVersion] = {}
    for record_key, value in read_compacted(settings, settings.topics.map_history, timeout, key):
        if record_key != key:
            continue
        try:
            record = MapVersion.from_bytes(value)
        except BadInput as error:
            history.unreadable.append(error.reason)
            continue
        if record.version in by_version:
            history.republished.append(record.version)
        by_version[record.version] = record
    history.versions = [by_version[number] for number in sorted(by_version)]
    for record_key, value in read_compacted(settings, settings.topics.maps, timeout, key):
        if record_key != key:
            continue
        if value is None:
            history.current = None
            continue
        try:
            history.current = parse_map(value, key=domain)
        except InvalidMap as error:
            history.unreadable.append(f"maps topic: {error}")
    if history.current is None and not history.versions:
        raise UnknownDomain(domain)
    return history


def current_versions(
    settings: Settings, domains: set[str], timeout: float
) -> dict[str, tuple[int, bool]]:
    """For each of ``domains`` that has a map, the version of its newest map and whether
    it is frozen, as :meth:`History.newest` of :func:`read_history` says, from one read of
    the maps topic (and of the history topic, for the domains it lacks). A record that is
    not a valid map or version is passed over, as ``read_history`` passes it over."""
    current: dict[str, tuple[int, bool] | None] = {}
    for record_key, value in read_compacted(settings, settings.topics.maps, timeout):
        domain = record_key.decode("utf-8", "replace") if record_key is not None else ""
        if domain not in domains:
            continue
        if value is None:
            current[domain] = None
            continue
        try:
            document = check_map(value, key=domain)
        except InvalidMap:
            continue
        current[domain] = (document["version"], document.get("frozen") is True)
    found = {domain: pair for domain, pair in current.items() if pair is not None}
    missing = domains - found.keys()
    if missing:
        kept: dict[str, tuple[int, bool]] = {}
        for record_key, value in read_compacted(settings, settings.topics.map_history, timeout):
            domain = record_key.decode("utf-8", "replace") if record_key is not None else ""
            if domain not in missing:
                continue
            try:
                record = MapVersion.from_bytes(value)
            except BadInput:
                continue
            if record.version >= kept.get(domain, (0, False))[0]:
                kept[domain] = (record.version, record.map.get("frozen") is True)
        found |= kept
    return found


def history_rows(history: History) -> list[dict[str, Any]]:
    """One row per kept version: who produced it, and per pattern what it changed of the
    version before (``changes`` None when that version is no longer kept)."""
    rows: list[dict[str, Any]] = []
    previous: MapVersion | None = None
    for record in history.versions:
        domain_map = record.domain_map()
        before = previous.domain_map() if previous is not None else None
        known = record.version == 1 or (
            previous is not None and previous.version == record.version - 1
        )
        rows.append(
            {
                "version": record.version,
                "produced_by": record.produced_by,
                "note": record.note,
                "at": record.at,
                "frozen": domain_map.frozen,
                "patterns": len(domain_map.patterns),
                "changes": [
                    {
                        "pattern": item.pattern,
                        "change": str(item.change),
                        "now_kept": sorted(item.newly_kept()),
                        "now_dropped": sorted(item.newly_dropped()),
                        "text": item.describe(),
                    }
                    for item in diff_maps(before, domain_map)
                ]
                if known
                else None,
            }
        )
        previous = record
    return rows
