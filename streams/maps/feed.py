"""A worker process follows the compacted ``miqps.maps`` topic into its :class:`LiveMaps`.

Each feed reads from the beginning with its own consumer (no group, no commits), so a
restarted worker rebuilds its maps from the topic before it canonicalizes or decides
anything. A feed that is not ``partitioned`` (the canonicalizer front's, unless the input
is keyed by domain) reads every partition, so every front sees every map; ``ready`` is set
once the topic has been read up to where it ended when the feed started.

Every record is validated (``miqps.maps.check_map``, and its key must be the map's domain).
An invalid one is dead-lettered, in the DLQ format with its reason, and the last valid map
of its domain stays live. Each feed that reads it dead-letters it, so a record can be there
more than once (once per worker process and restart, and per restore of its partition):
its topic, partition and offset identify it.

A ``partitioned`` feed follows only the maps partitions it is asked for
(:meth:`MapFeed.follow`): a canonicalizer front with ``MIQPS_INPUT_KEYED_BY_DOMAIN`` asks
for the numbers of its input partitions, the worker's Faust process for those of its
agents' partitions (:mod:`streams.worker.ownedmaps`), since a domain is in the same
partition of each. Each partition taken is read from its beginning up to where it ended
then (a :class:`Restore`), and each domain is filed under the partition that brought it, so
that :meth:`MapFeed.unfollow` removes the maps of a partition given up.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from miqps.maps import InvalidMap, check_map
from streams.kafka.admin import consumer_config, producer_config
from streams.kafka.clients import ProduceBlocked, produce, read_to_end
from streams.maps.live import LiveMaps
from streams.messages import DeadLetter, Source, Stage
from streams.settings import Settings

log = logging.getLogger(__name__)

DEAD_LETTER_STAGE: Stage = "canonicalize"
"""The DLQ schema's stage of the maps the canonicalizer reads (the topic says which)."""

SendDeadLetter = Callable[[bytes | None, bytes], None]
"""Sends one DLQ record (the source key, the encoded record)."""


WATERMARK_SECONDS = 30.0


@dataclass(slots=True)
class Restore:
    """One maps partition read from its beginning up to where it ended when it was taken.
    The feed's thread fills it in and sets :attr:`done` at the end."""

    partition: int
    started: float = field(default_factory=time.monotonic)
    end: int = -1
    """The partition's end offset when the read began (-1 until then)."""
    records: int = 0
    domains: int = 0
    """Domains filed under the partition once it is restored."""
    seconds: float = 0.0
    done: threading.Event = field(default_factory=threading.Event)


@dataclass(slots=True)
class RestoreTotals:
    """What the restores of a partitioned feed have read so far."""

    partitions: int = 0
    records: int = 0
    seconds: float = 0.0


class MapFeed:
    def __init__(
        self,
        settings: Settings,
        live_maps: LiveMaps,
        on_fatal: Callable[[BaseException], None] | None = None,
        dead_letter: SendDeadLetter | None = None,
        *,
        partitioned: bool = False,
    ) -> None:
        """``dead_letter`` is where invalid records go; by default a producer to the DLQ
        topic, made when the feed starts. ``partitioned``: follow only the partitions
        asked for (:meth:`follow`), none until then."""
        self.settings = settings
        self.live_maps = live_maps
        self.on_fatal = on_fatal
        self.dead_letter = dead_letter
        self.partitioned = partitioned
        self.followed: set[int] = set()
        """Partitioned: the partitions asked for and not given up (restored or not)."""
        self.totals = RestoreTotals()
        self._requests: list[tuple[int, Restore | None]] = []
        self._requests_lock = threading.Lock()
        self._following: set[int] = set()
        self._restoring: dict[int, Restore] = {}
        self.ready = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="miqps-map-feed", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def wait_ready(self, timeout: float | None = None) -> bool:
        return self.ready.wait(timeout)

    def follow(self, partitions: Iterable[int]) -> dict[int, Restore]:
        """Partitioned: start following ``partitions`` from their beginning (from any
        thread); each one's :class:`Restore` is done once it is read up to where it ended
        when the feed took it."""
        restores = {partition: Restore(partition) for partition in sorted(partitions)}
        with self._requests_lock:
            for partition, restore in restores.items():
                self._requests.append((partition, restore))
                self.followed.add(partition)
        return restores

    def unfollow(self, partitions: Iterable[int]) -> None:
        """Partitioned: stop following ``partitions`` (from any thread) and remove the maps
        of the domains they brought."""
        with self._requests_lock:
            for partition in sorted(partitions):
                self._requests.append((partition, None))
                self.followed.discard(partition)

    def _run(self) -> None:
        try:
            self._follow()
        except BaseException as error:
            log.exception("map feed failed")
            if self.on_fatal is not None:
                self.on_fatal(error)

    def _follow(self) -> None:
        topic = self.settings.topics.maps
        consumer = Consumer(
            consumer_config(
                self.settings,
                f"{self.settings.app_id}-maps-{uuid.uuid4().hex}",
                **{"enable.auto.commit": False, "fetch.wait.max.ms": 100},
            )
        )
        producer: Producer | None = None
        if self.dead_letter is None:
            producer = Producer(producer_config(self.settings))
            self.dead_letter = self._producing_to_dlq(producer)
        try:
            if self.partitioned:
                self._follow_partitions(consumer, producer)
                return
            started = time.monotonic()
            for message in read_to_end(consumer, topic, stopping=self._stopping):
                self._apply_message(message, producer)
            if self._stopping.is_set():
                return
            self._set_ready(started)
            while not self._stopping.is_set():
                for message in consumer.consume(500, 0.2):
                    self._apply_message(message, producer)
                if producer is not None:
                    producer.poll(0)
        finally:
            consumer.close()
            if producer is not None:
                producer.flush(5.0)

    def _follow_partitions(self, consumer: Consumer, producer: Producer | None) -> None:
        log.info("map feed: following only the maps partitions of the input partitions held")
        self.ready.set()
        while not self._stopping.is_set():
            self._take_requests(consumer)
            messages = consumer.consume(500, 0.2)
            for message in messages:
                if message.error() is None and message.partition() not in self._following:
                    continue  # read before its partition was given up
                self._apply_message(message, producer)
                restore = self._restoring.get(message.partition() or 0)
                if restore is not None:
                    restore.records += 1
                    if (message.offset() or 0) + 1 >= restore.end:
                        self._restored(restore)
            if self._restoring:
                self._restore_reached(consumer)
            if producer is not None:
                producer.poll(0)

    def _take_requests(self, consumer: Consumer) -> None:
        with self._requests_lock:
            requests, self._requests = self._requests, []
        topic = self.settings.topics.maps
        for index, (partition, restore) in enumerate(requests):
            if restore is not None:
                try:
                    low, high = consumer.get_watermark_offsets(
                        TopicPartition(topic, partition), timeout=WATERMARK_SECONDS
                    )
                except KafkaException as error:
                    log.warning(
                        "map feed: no end offset of %s[%d] (%s); trying again",
                        topic,
                        partition,
                        error,
                    )
                    with self._requests_lock:
                        self._requests[:0] = requests[index:]
                    return
            if partition in self._following:
                consumer.incremental_unassign([TopicPartition(topic, partition)])
                self._following.discard(partition)
                self._restoring.pop(partition, None)
            if restore is None:
                removed = self.live_maps.forget_partition(partition)
                log.info(
                    "map feed: %s[%d] given up; %d domain maps removed", topic, partition, removed
                )
                continue
            consumer.incremental_assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
            self._following.add(partition)
            restore.end = high
            if high > low:
                self._restoring[partition] = restore
            else:
                self._restored(restore)

    def _restore_reached(self, consumer: Consumer) -> None:
        """Finish the restores whose position reached their end: offsets can have gaps
        (compaction, transaction markers)."""
        topic = self.settings.topics.maps
        positions = consumer.position([TopicPartition(topic, p) for p in self._restoring])
        for position in positions:
            restore = self._restoring.get(position.partition)
            if restore is not None and position.offset >= 0 and position.offset >= restore.end:
                self._restored(restore)

    def _restored(self, restore: Restore) -> None:
        self._restoring.pop(restore.partition, None)
        restore.seconds = time.monotonic() - restore.started
        restore.domains = self.live_maps.filed_under(restore.partition)
        totals = self.totals
        totals.partitions += 1
        totals.records += restore.records
        totals.seconds += restore.seconds
        log.info(
            "map feed: %s[%d] restored: %d records, %d domain maps, in %.2fs",
            self.settings.topics.maps,
            restore.partition,
            restore.records,
            restore.domains,
            restore.seconds,
        )
        restore.done.set()

    def _apply_message(self, message: Message, producer: Producer | None) -> None:
        if message.error() is not None:
            log.warning("map feed: %s", message.error())
            return
        self.apply_record(message.key(), message.value(), _source(message))
        if producer is not None:
            producer.poll(0)

    def _producing_to_dlq(self, producer: Producer) -> SendDeadLetter:
        topic = self.settings.topics.dlq

        def send(key: bytes | None, record: bytes) -> None:
            try:
                produce(producer, topic, record, key or b"")
            except (ProduceBlocked, KafkaException) as error:
                log.error("map feed: could not dead-letter an invalid map: %s", error)

        return send

    def _set_ready(self, started: float) -> None:
        log.info(
            "map feed: %d domain maps live after %.1fs",
            len(self.live_maps),
            time.monotonic() - started,
        )
        self.ready.set()

    def apply_record(self, key: bytes | None, value: bytes | None, source: Source) -> None:
        """Install the map of one record of the maps topic, remove its domain's map if it
        is a tombstone, or dead-letter it if it is invalid (the live map stays)."""
        if value is None:
            if key is not None:
                domain = key.decode("utf-8", "replace")
                self.live_maps.remove(domain)
                if self.partitioned:
                    self.live_maps.unfile(source.partition, domain)
            return
        try:
            if key is None:
                raise InvalidMap("domain key", "a record without a key")
            try:
                domain = key.decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidMap("domain key", "a key that is not UTF-8") from None
            document = check_map(value, key=domain)
        except InvalidMap as error:
            self._reject(
                error.at(f"{source.topic}[{source.partition}]@{source.offset}"), key, value, source
            )
            return
        if self.partitioned:
            self.live_maps.file_under(source.partition, domain)
        if (
            self.live_maps.apply_document(document, value)
            and self.ready.is_set()
            and source.partition not in self._restoring
        ):
            log.info(
                "map live: %s v%d (%d patterns)",
                domain,
                document["version"],
                len(document["patterns"]),
            )

    def _reject(self, error: InvalidMap, key: bytes | None, value: bytes, source: Source) -> None:
        log.warning("map feed: dead-lettered; the last valid map stays live: %s", error)
        if self.dead_letter is not None:
            self.dead_letter(
                key,
                DeadLetter.of(
                    str(error),
                    value,
                    key,
                    source,
                    DEAD_LETTER_STAGE,
                    self.settings.topic_max_message_bytes // 2,
                ).to_bytes(),
            )


def _source(message: Message) -> Source:
    timestamp_type, timestamp = message.timestamp()
    return Source(
        message.topic() or "",
        message.partition() or 0,
        message.offset() or 0,
        timestamp if timestamp_type else None,
    )
