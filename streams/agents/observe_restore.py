"""The restores of the observing agent's partitions: when the Faust process is assigned a
partition of ``miqps.observations``, the pages of that partition are read again from its
beginning (what retention still holds) up to the offset the app's group committed there,
where the agent reads on from, into the process's :class:`~miqps.observations.ObservedPages`.
So observations sent before the worker started, or while another worker owned their
domain's partition, are held again after a restart or a rebalance.

- **Which partitions.** Those of ``miqps.observations`` in each assignment (Faust's
  ``on_partitions_assigned`` signal): the ones the observing agent reads on from the
  committed offset, so the restore and the agent together read each partition whole. Faust
  assigns eagerly, so what is given up is known at the assignment, as in
  :mod:`streams.worker.ownedmaps`; a partition kept across a rebalance is not read again.
- **A partition given up** has its pages dropped: its domains are probed by the worker that
  took it, which restores them itself, and here they would only crowd the pages of this
  worker's own domains out of the ``MIQPS_OBSERVED_PAGES`` bound.
- **Latest wins.** A restore reads in offset order into a
  :class:`~miqps.observations.RestoredPages` of its own (the latest of each URL, at most
  ``MIQPS_OBSERVED_PAGES``), while the agent goes on reading the partition's newer records
  live; once done it is merged but for the URLs the agent observed meanwhile
  (:meth:`~miqps.observations.ObservedPages.restored`).
- **Counted, not dead-lettered.** A record that is not an observation was dead-lettered when
  it was read live (every record before the committed offset was); a restore counts it and
  sends nothing. A page that is no evidence is counted as live.
- **Who waits.** Restores run one at a time in a thread of their own, parsing as the agent
  does. A probe run waits for the restore of its domain's partition, if one is under way, at
  most ``MIQPS_OBSERVATIONS_RESTORE_WAIT`` seconds (:data:`RESTORE_PATIENCE` by default;
  :meth:`ObservationRestores.held`); observations only spare
  fetches, so past that the run goes on and fetches what the restore would have spared.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from confluent_kafka import Consumer, KafkaException, TopicPartition

from miqps.observations import (
    RESTORE_OUTCOMES,
    InvalidObservation,
    ObservedPages,
    RestoredPages,
    read_observation,
)
from streams.front.ownership import OwnedPartitions
from streams.kafka.admin import consumer_config
from streams.kafka.clients import read_partition
from streams.kafka.partitioning import key_partition
from streams.ops.metrics import ObservationCounts
from streams.settings import Settings

log = logging.getLogger(__name__)

RESTORE_PATIENCE = 30.0
"""How long a probe run waits for the restore of its domain's observations partition."""
KAFKA_CALL_SECONDS = 30.0


class AssignedPartition(Protocol):
    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...


class PartitionReader(Protocol):
    """What a restore asks of Kafka."""

    def committed(self, partition: int) -> int:
        """The group's committed offset of ``partition`` (-1: none)."""
        ...

    def values(
        self, partition: int, end: int, stopping: Callable[[], bool]
    ) -> Iterator[bytes | None]:
        """The values of ``partition`` from its beginning, before offset ``end``."""
        ...

    def close(self) -> None: ...


class KafkaPartitionReader:
    """Reads the app group's committed offsets (never writes them), and the partitions with
    a consumer that joins no group and commits nothing, as the live agent reads them:
    records of open or aborted transactions too, as Faust's consumer does at least once.

    The offsets are asked of a consumer of the app's group that never subscribes (so never
    joins it) and commits nothing. An admin client's request for them
    (``list_consumer_group_offsets``) crashed the process when the group's coordinator
    answered NOT_COORDINATOR: librdkafka 2.16 then asks the client's consumer group, which an
    admin client does not have, to look the coordinator up (a NULL dereference in its main
    thread, which blocks signals, so the process died without a stack)."""

    def __init__(self, settings: Settings, topic: str) -> None:
        self.topic = topic
        self.offsets = Consumer(
            consumer_config(settings, settings.app_id, **{"enable.auto.commit": False})
        )
        self.consumer = Consumer(
            consumer_config(
                settings,
                f"{settings.app_id}-observations-{uuid.uuid4().hex}",
                **{
                    "enable.auto.commit": False,
                    "isolation.level": "read_uncommitted",
                    "fetch.wait.max.ms": 100,
                },
            )
        )

    def committed(self, partition: int) -> int:
        [found] = self.offsets.committed(
            [TopicPartition(self.topic, partition)], timeout=KAFKA_CALL_SECONDS
        )
        if found.error is not None:
            raise KafkaException(found.error)
        return int(found.offset) if found.offset >= 0 else -1

    def values(
        self, partition: int, end: int, stopping: Callable[[], bool]
    ) -> Iterator[bytes | None]:
        for message in read_partition(self.consumer, self.topic, partition, end, stopping=stopping):
            yield message.value()

    def close(self) -> None:
        self.consumer.close()
        self.offsets.close()


@dataclass(slots=True, eq=False)
class ObservationsRestore:
    """One observations partition read again; the restore thread fills it in, the event
    loop merges it and sets :attr:`done`."""

    partition: int
    started: float = field(default_factory=time.monotonic)
    end: int = -1
    """The committed offset read up to (-1: none committed, nothing read)."""
    pages: RestoredPages | None = None
    merged: int = 0
    """Pages the merge added to those held."""
    seconds: float = 0.0
    error: str | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    given_up: threading.Event = field(default_factory=threading.Event)


class ObservationRestores:
    """The observations partitions the observing agent is assigned, and the restore of each."""

    def __init__(
        self,
        topic: str,
        partitions: int,
        pages: ObservedPages,
        counts: ObservationCounts,
        max_bytes: int,
        reader: Callable[[], PartitionReader],
        patience: float = RESTORE_PATIENCE,
    ) -> None:
        """``partitions``: the topic's partition count; ``reader`` makes the restore
        thread's :class:`PartitionReader`."""
        self.topic = topic
        self.partitions = partitions
        self.pages = pages
        self.counts = counts
        self.max_bytes = max_bytes
        self.reader = reader
        self.patience = patience
        self.restores: dict[int, ObservationsRestore] = {}
        """The partitions held, each with its restore (done or not)."""
        self._owned = OwnedPartitions(incremental=False)
        self._queue: queue.SimpleQueue[ObservationsRestore | None] = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        counts.restoring = self.restoring

    def assigned(self, assigned: Iterable[AssignedPartition]) -> None:
        """Faust's whole new assignment (on the event loop): restore the observations
        partitions taken, drop the pages of those given up."""
        moves = self._owned.assigned(tp.partition for tp in assigned if tp.topic == self.topic)
        dropped = 0
        for partition in sorted(moves.give_up):
            restore = self.restores.pop(partition, None)
            if restore is not None:
                restore.given_up.set()
            dropped += self.pages.give_up(partition)
        for partition in sorted(moves.take):
            self.pages.restoring(partition)
            restore = self.restores[partition] = ObservationsRestore(partition)
            self._queue.put(restore)
        if moves.take:
            self._start()
        if moves.give_up or moves.take:
            log.info(
                "observations partitions held: %s (taken, restoring: %s; given up: %s, "
                "%d pages dropped)",
                _listed(self.restores),
                _listed(moves.take),
                _listed(moves.give_up),
                dropped,
            )

    def partition_of(self, domain: str) -> int:
        return key_partition(domain.encode(), self.partitions)

    async def held(self, domain: str) -> None:
        """Return once the observations partition of ``domain`` is restored, if a restore
        of it is under way, or after :attr:`patience` seconds."""
        restore = self.restores.get(self.partition_of(domain))
        if restore is None or restore.done.is_set():
            return
        try:
            await asyncio.wait_for(restore.done.wait(), self.patience)
        except TimeoutError:
            log.info(
                "observations: %s[%d] still restoring after %.0fs; probing %s without waiting "
                "longer (what the restore would spare is fetched)",
                self.topic,
                restore.partition,
                self.patience,
                domain,
            )

    def restoring(self) -> int:
        """Partitions held and not restored yet."""
        return sum(1 for restore in self.restores.values() if not restore.done.is_set())

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        self._queue.put(None)
        if self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout)

    def _start(self) -> None:
        if self._thread is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(
            target=self._run, name="miqps-observations-restore", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        reader: PartitionReader | None = None
        try:
            while not self._stopping.is_set():
                restore = self._queue.get()
                if restore is None or self._stopping.is_set():
                    return
                if restore.given_up.is_set():
                    continue
                try:
                    if reader is None:
                        reader = self.reader()
                    restore.pages = self._read(reader, restore)
                except Exception as error:
                    restore.error = f"{type(error).__name__}: {error}"
                if self._stopping.is_set():
                    return  # read in part: the worker is stopping
                self._call(self._finish, restore)
        finally:
            if reader is not None:
                reader.close()

    def _read(self, reader: PartitionReader, restore: ObservationsRestore) -> RestoredPages:
        """The pages of ``restore``'s partition before the committed offset (in the thread)."""
        pages = RestoredPages(restore.partition, self.pages.max_pages)
        restore.end = reader.committed(restore.partition)
        if restore.end <= 0:
            return pages

        def stopping() -> bool:
            return restore.given_up.is_set() or self._stopping.is_set()

        for value in reader.values(restore.partition, restore.end, stopping):
            try:
                observation = read_observation(value, max_bytes=self.max_bytes)
            except InvalidObservation:
                pages.invalid()
                continue
            pages.add(observation)
        return pages

    def _call(
        self, callback: Callable[[ObservationsRestore], None], restore: ObservationsRestore
    ) -> None:
        if self._loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: the worker is stopping
            self._loop.call_soon_threadsafe(callback, restore)

    def _finish(self, restore: ObservationsRestore) -> None:
        """Merge a restore's pages (on the event loop), unless its partition was given up."""
        restore.seconds = time.monotonic() - restore.started
        if restore.given_up.is_set() or self.restores.get(restore.partition) is not restore:
            restore.done.set()
            return
        where = f"{self.topic}[{restore.partition}]"
        pages = restore.pages
        if pages is None:
            self.pages.abandon(restore.partition)
            log.warning(
                "observations: %s not restored (%s); the agent reads on from the committed "
                "offset, and the URLs of the pages before it are fetched",
                where,
                restore.error,
            )
            restore.done.set()
            return
        restore.merged = self.pages.restored(pages)
        counts = self.counts
        for outcome in RESTORE_OUTCOMES:
            counts.restored[outcome] += pages.by_outcome[outcome]
        counts.restores += 1
        counts.restore_seconds += restore.seconds
        outcomes = pages.by_outcome
        log.info(
            "observations: %s restored: %d records%s (%d kept, %d no evidence, %d invalid, "
            "not dead-lettered again), %d pages held, in %.2fs",
            where,
            pages.records,
            f" up to offset {restore.end}" if restore.end >= 0 else ", no offset committed",
            outcomes["kept"],
            outcomes["no evidence"],
            outcomes["invalid"],
            self.pages.held(restore.partition),
            restore.seconds,
        )
        restore.done.set()


def _listed(partitions: Iterable[int]) -> str:
    return ", ".join(str(p) for p in sorted(partitions)) or "none"
