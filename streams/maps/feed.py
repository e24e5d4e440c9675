"""A worker process follows the compacted ``miqps.maps`` topic into its :class:`LiveMaps`.

Each feed reads with its own consumer (no group, no commits), so a restarted worker has
its maps from the topic before it canonicalizes or decides anything. A feed that is not
``partitioned`` (the canonicalizer front's, unless the input is keyed by domain) reads
every partition, so every front sees every map; ``ready`` is set once the topic has been
read up to where it ended when the feed started.

Live maps on disk (:class:`StoredLiveMaps`) are kept across restarts (:mod:`streams.maps.kept`):
before it reads anything, the feed empties the store unless it is of the same maps topic
(cluster, name, topic id, partition count), with one log line saying why. Each partition
is then read from where the store says the last run stopped (the stored offset, noted
after the records before it are applied), when it is still between the partition's low
and high watermarks and younger than the topic's ``delete.retention.ms``; otherwise the
partition's maps are removed and it is read from its beginning (one log line). In memory
(:class:`LiveMaps`) every partition is read from its beginning.

Every record is validated (``miqps.maps.check_map``, and its key must be the map's domain).
An invalid one is dead-lettered, in the DLQ format with its reason, and the last valid map
of its domain stays live. Each feed that reads it dead-letters it, so a record can be there
more than once (once per worker process, and per restore that reads it again): its topic,
partition and offset identify it.

A ``partitioned`` feed follows only the maps partitions it is asked for
(:meth:`MapFeed.follow`): a canonicalizer front with ``MIQPS_INPUT_KEYED_BY_DOMAIN`` asks
for the numbers of its input partitions, the worker's Faust process for those of its
agents' partitions (:mod:`streams.worker.ownedmaps`), since a domain is in the same
partition of each. Each partition taken is read from its beginning up to where it ended
then (a :class:`Restore`; from its stored offset, with a kept store), and each domain is
filed under the partition that brought it, so that :meth:`MapFeed.unfollow` removes the
maps of a partition given up, and its stored offset. The first :meth:`MapFeed.follow`
(the process's first assignment, even an empty one) says which partitions a kept store
keeps: the maps and offsets of the others are removed, since another process follows them
now.
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
from streams.kafka.admin import consumer_config, producer_config, topic_facts
from streams.kafka.clients import ProduceBlocked, produce, read_to_end
from streams.maps.kept import StoredOffset, StoreOrigin, resume_from
from streams.maps.live import LiveMaps, StoredLiveMaps
from streams.messages import DeadLetter, Source, Stage
from streams.settings import Settings

log = logging.getLogger(__name__)

DEAD_LETTER_STAGE: Stage = "canonicalize"
"""The DLQ schema's stage of the maps the canonicalizer reads (the topic says which)."""

SendDeadLetter = Callable[[bytes | None, bytes], None]
"""Sends one DLQ record (the source key, the encoded record)."""


WATERMARK_SECONDS = 30.0
OFFSETS_NOTED_EVERY = 60.0
"""Seconds between two notes of the stored offsets of partitions read up to their end with
nothing new: each note says they were caught up then (:class:`StoredOffset`)."""
NOTE_EVERY_RECORDS = 500
"""Records of a catch-up between two notes of where it is."""


@dataclass(slots=True)
class Restore:
    """One maps partition read from its beginning (or, with a kept store, from its stored
    offset) up to where it ended when it was taken. The feed's thread fills it in and sets
    :attr:`done` at the end."""

    partition: int
    started: float = field(default_factory=time.monotonic)
    end: int = -1
    """The partition's end offset when the read began (-1 until then)."""
    resumed_from: int | None = None
    """The stored offset the read began at; None: from the beginning."""
    records: int = 0
    """Records read (with a kept store, only those after its stored offset)."""
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
        self._keep_only: frozenset[int] | None = None
        self._first_followed = False
        self._following: set[int] = set()
        self._restoring: dict[int, Restore] = {}
        self._store = live_maps if isinstance(live_maps, StoredLiveMaps) else None
        # A kept store files every domain under its partition, so that a partition whose
        # stored offset is not good can be read again alone.
        self._files = partitioned or self._store is not None
        self._delete_retention_ms: int | None = None
        self._next: dict[int, int] = {}
        """With a kept store, per partition read: the offset after the last record applied."""
        self._as_of: dict[int, float] = {}
        """Per partition not yet read to its end: the ``as_of`` of its stored offset."""
        self._unnoted: set[int] = set()
        self._note_all_at = 0.0
        self.resumed: set[int] = set()
        """The partitions last read from their stored offset (a kept store)."""
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
        """Partitioned: start following ``partitions`` from their beginning, or their
        stored offset (from any thread); each one's :class:`Restore` is done once it is read
        up to where it ended when the feed took it. The first call says which partitions
        a kept store keeps: the maps and offsets of any other are removed."""
        restores = {partition: Restore(partition) for partition in sorted(partitions)}
        with self._requests_lock:
            if not self._first_followed:
                self._first_followed = True
                self._keep_only = frozenset(restores)
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
            if self._store is not None:
                self._keep_store(self._store)
            if self.partitioned:
                self._follow_partitions(consumer, producer)
                self._note_offsets(every=True)
                return
            started = time.monotonic()
            read = 0
            for message in read_to_end(
                consumer, topic, stopping=self._stopping, start_at=self._start_at
            ):
                self._apply_message(message, producer)
                read += 1
                if read % NOTE_EVERY_RECORDS == 0:
                    self._note_offsets()
            if self._stopping.is_set():
                self._note_offsets(every=True)
                return
            self._set_ready(started, read)
            self._note_offsets()
            while not self._stopping.is_set():
                for message in consumer.consume(500, 0.2):
                    self._apply_message(message, producer)
                self._note_offsets()
                if producer is not None:
                    producer.poll(0)
            self._note_offsets(every=True)
        finally:
            consumer.close()
            if producer is not None:
                producer.flush(5.0)

    def _keep_store(self, store: StoredLiveMaps) -> None:
        """Keep the store's maps if they are of this maps topic, or empty it (one line says
        why). A topic the broker does not describe counts as another one."""
        topic = self.settings.topics.maps
        try:
            facts = topic_facts(self.settings, topic, WATERMARK_SECONDS)
        except (KafkaException, RuntimeError) as error:
            origin = StoreOrigin("", topic, None, 0)
            why = store.keep_if_of(origin)
            log.warning(
                "map feed: %s not described (%s); the live-map store is emptied%s",
                topic,
                error,
                f" ({why})" if why else "",
            )
            return
        self._delete_retention_ms = facts.delete_retention_ms
        origin = StoreOrigin(facts.cluster_id, topic, facts.topic_id, facts.partitions)
        why = store.keep_if_of(origin)
        if why is not None:
            log.info("map feed: the live-map store in %s is emptied: %s", store.store.path, why)
        elif len(store):
            log.info(
                "map feed: the live-map store in %s is kept: %d domain maps of %s",
                store.store.path,
                len(store),
                topic,
            )

    def _start_at(self, partition: int, low: int, high: int) -> int | None:
        """Where to read ``partition`` from (its offsets ``low``..``high``): its stored
        offset (:func:`~streams.maps.kept.resume_from`), or its beginning (None), its maps
        removed first."""
        store = self._store
        if store is None:
            return None
        now = time.time()
        stored = store.stored_offset(partition)
        resume = resume_from(stored, low, high, now, self._delete_retention_ms)
        self._unnoted.discard(partition)
        if stored is not None and resume.offset is not None:
            self._next[partition] = resume.offset
            self._as_of[partition] = stored.as_of
            self.resumed.add(partition)
            return resume.offset
        self.resumed.discard(partition)
        removed = store.forget_partition(partition)
        if resume.why is not None:
            log.info(
                "map feed: %s[%d] is read from its beginning, its %d domain maps removed: %s",
                self.settings.topics.maps,
                partition,
                removed,
                resume.why,
            )
        self._next[partition] = low
        self._as_of[partition] = now
        return None

    def _note_offsets(self, *, every: bool = False) -> None:
        """With a kept store, note where each partition read has its next record: those
        with records applied since the last note, and every one at times
        (:data:`OFFSETS_NOTED_EVERY`) or when ``every``. A partition read up to its end is
        noted as caught up now; one not yet, as of its read's beginning."""
        store = self._store
        if store is None:
            return
        now = time.time()
        if every or now >= self._note_all_at:
            self._unnoted.update(self._next)
            self._note_all_at = now + OFFSETS_NOTED_EVERY
        if not self._unnoted:
            return
        notes: dict[int, StoredOffset] = {}
        for partition in self._unnoted:
            following = partition in self._following if self.partitioned else True
            if partition not in self._next or not following:
                continue
            caught_up = (
                partition not in self._restoring if self.partitioned else self.ready.is_set()
            )
            if caught_up:
                self._as_of[partition] = now
            notes[partition] = StoredOffset(self._next[partition], self._as_of[partition])
        self._unnoted.clear()
        store.note_offsets(notes)

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
            self._note_offsets()
            if producer is not None:
                producer.poll(0)

    def _keep_followed(self, partitions: frozenset[int]) -> None:
        """At the first follow: remove the maps and offsets of the partitions a kept store
        holds that are not among ``partitions`` (another process follows them now)."""
        store = self._store
        if store is None:
            return
        origin = store.origin()
        stale = sorted(store.stored_partitions(origin.partitions if origin else 0) - partitions)
        if stale:
            removed = sum(store.forget_partition(partition) for partition in stale)
            log.info(
                "map feed: %s partitions %s of the kept store are not followed; their %d "
                "domain maps removed",
                self.settings.topics.maps,
                ", ".join(str(partition) for partition in stale),
                removed,
            )

    def _take_requests(self, consumer: Consumer) -> None:
        with self._requests_lock:
            requests, self._requests = self._requests, []
            keep_only, self._keep_only = self._keep_only, None
        if keep_only is not None:
            self._keep_followed(keep_only)
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
            self._next.pop(partition, None)
            self._as_of.pop(partition, None)
            if restore is None:
                removed = self.live_maps.forget_partition(partition)
                log.info(
                    "map feed: %s[%d] given up; %d domain maps removed", topic, partition, removed
                )
                continue
            start = self._start_at(partition, low, high)
            consumer.incremental_assign(
                [TopicPartition(topic, partition, OFFSET_BEGINNING if start is None else start)]
            )
            self._following.add(partition)
            restore.end = high
            restore.resumed_from = start
            if high > (low if start is None else start):
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
            "map feed: %s[%d] restored: %d records, %d domain maps, in %.2fs%s",
            self.settings.topics.maps,
            restore.partition,
            restore.records,
            restore.domains,
            restore.seconds,
            "" if restore.resumed_from is None else f", from offset {restore.resumed_from}",
        )
        self._unnoted.add(restore.partition)  # caught up now
        restore.done.set()

    def _apply_message(self, message: Message, producer: Producer | None) -> None:
        if message.error() is not None:
            log.warning("map feed: %s", message.error())
            return
        source = _source(message)
        self.apply_record(message.key(), message.value(), source)
        if self._store is not None:
            self._next[source.partition] = source.offset + 1
            self._unnoted.add(source.partition)
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

    def _set_ready(self, started: float, read: int) -> None:
        log.info(
            "map feed: %d domain maps live after %.1fs: %d records read%s",
            len(self.live_maps),
            time.monotonic() - started,
            read,
            f", {len(self.resumed)} of {len(self._next)} partitions from their stored offsets"
            if self._store is not None
            else "",
        )
        self.ready.set()

    def apply_record(self, key: bytes | None, value: bytes | None, source: Source) -> None:
        """Install the map of one record of the maps topic, remove its domain's map if it
        is a tombstone, or dead-letter it if it is invalid (the live map stays)."""
        if value is None:
            if key is not None:
                domain = key.decode("utf-8", "replace")
                self.live_maps.remove(domain)
                if self._files:
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
        if self._files:
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
