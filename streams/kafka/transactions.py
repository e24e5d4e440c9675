"""Exactly once for a consume -> produce loop: Kafka transactions (KIP-98) with the
consumer's offsets committed inside them and fencing by consumer group generation (KIP-447).

:class:`InputTransaction` holds at most one open transaction of a transactional producer.
The loop begins it before it produces, adds each batch's input offsets, and commits when
:meth:`~InputTransaction.due`; the outputs and the offsets that cover their inputs become
visible to ``read_committed`` consumers together, or not at all. When a transaction must
be aborted, the consumer is rewound to the group's committed offsets, so the inputs of the
aborted transaction are processed again and their outputs written once.

A producer that another one fenced, or any fatal error, raises (:func:`fatal`): the front
replaces its clients and resumes from the last commit.

:class:`TransactionalWriter` is for records that must appear together or not at all, with
no input offsets: a published map version (its history record, the map, its audit records).
"""

from __future__ import annotations

import hashlib
import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from streams.kafka.clients import produce
from streams.settings import Settings

log = logging.getLogger(__name__)

TRANSACTION_CALL_SECONDS = 30.0
"""How long one transactional call (begin, send offsets, commit, abort) may block."""
TRANSACTION_TIMEOUT_MS = 10_000
"""``transaction.timeout.ms``: a transaction its producer left open (a worker killed) is
aborted by the broker after this long; until then ``read_committed`` consumers wait at it.
Kafka Streams uses the same figure."""
RETRIES = 5
FIRST_PAUSE = 0.2
MAX_PAUSE = 5.0


class TransactionAborted(Exception):
    """The open transaction was aborted; its inputs are read again from the last commit."""


def transactional_producer_config(transactional_id: str) -> dict[str, object]:
    """What a producer needs on top of its usual settings to write transactions."""
    return {
        "transactional.id": transactional_id,
        "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
    }


def fatal(error: KafkaException) -> bool:
    """The client that raised ``error`` cannot be used any more."""
    kafka_error = error.args[0] if error.args else None
    return isinstance(kafka_error, KafkaError) and kafka_error.fatal()


def requires_abort(error: KafkaException) -> bool:
    kafka_error = error.args[0] if error.args else None
    return isinstance(kafka_error, KafkaError) and kafka_error.txn_requires_abort()


def retriable(error: KafkaException) -> bool:
    kafka_error = error.args[0] if error.args else None
    return isinstance(kafka_error, KafkaError) and kafka_error.retriable()


class InputTransaction:
    """The open transaction of ``producer``, and the offsets of ``consumer``'s inputs it
    covers."""

    def __init__(self, producer: Producer, consumer: Consumer, interval: float) -> None:
        self.producer = producer
        self.consumer = consumer
        self.interval = interval
        self.open = False
        self.began = 0.0
        self.offsets: dict[tuple[str, int], int] = {}

    def initialize(self) -> None:
        """Register the transactional id, fencing an earlier producer that had it and
        aborting whatever that one left open."""
        self.producer.init_transactions(TRANSACTION_CALL_SECONDS)

    def begin(self) -> None:
        if not self.open:
            self.producer.begin_transaction()
            self.open = True
            self.began = time.monotonic()

    def add(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """Offsets (topic, partition) -> next offset of inputs whose outputs are in the
        transaction."""
        self.offsets.update(offsets)

    def due(self) -> bool:
        return self.open and time.monotonic() - self.began >= self.interval

    def commit(self) -> list[TopicPartition]:
        """Commit the outputs and the offsets together; return the offsets committed.

        Raises :class:`TransactionAborted` when Kafka required an abort (which is done,
        and the consumer rewound)."""
        if not self.open:
            return []
        partitions = [
            TopicPartition(topic, partition, offset)
            for (topic, partition), offset in self.offsets.items()
        ]
        try:
            if partitions:
                _retrying(
                    lambda: self.producer.send_offsets_to_transaction(
                        partitions,
                        self.consumer.consumer_group_metadata(),
                        TRANSACTION_CALL_SECONDS,
                    )
                )
            _retrying(lambda: self.producer.commit_transaction(TRANSACTION_CALL_SECONDS))
        except KafkaException as error:
            if not requires_abort(error):
                raise
            log.warning("transaction not committed (%s); aborting it", error.args[0])
            self.abort()
            raise TransactionAborted(str(error.args[0])) from error
        self.open = False
        self.offsets = {}
        return partitions

    def abort(self) -> None:
        """Abort the open transaction, if any, and rewind the consumer to the committed
        offsets of what it holds, so the transaction's inputs are read again."""
        if self.open:
            _retrying(lambda: self.producer.abort_transaction(TRANSACTION_CALL_SECONDS))
            self.open = False
        self.offsets = {}
        self.rewind()

    def rewind(self) -> None:
        assignment = self.consumer.assignment()
        if not assignment:
            return
        for committed in self.consumer.committed(assignment, TRANSACTION_CALL_SECONDS):
            offset = committed.offset if committed.offset >= 0 else OFFSET_BEGINNING
            try:
                self.consumer.seek(TopicPartition(committed.topic, committed.partition, offset))
            except KafkaException as error:
                log.info(
                    "not rewound (partition revoked?); its new owner reads from the "
                    "last commit: %s",
                    error,
                )


Record = tuple[str, bytes, bytes]
"""(topic, key, value)."""


def worker_transactional_id(settings: Settings, role: str) -> str:
    """The transactional id of a worker's ``role`` (``canonicalizer``, ``probe``): the same
    for every producer that role starts in the worker with this state directory on this
    host, across restarts, so that a new producer fences its predecessor and aborts the
    transaction that one left open at once (instead of ``read_committed`` readers waiting
    for ``transaction.timeout.ms``); different for every other worker, since each has a
    state directory of its own."""
    where = f"{socket.gethostname()}:{settings.state_dir.resolve()}"
    digest = hashlib.sha256(where.encode()).hexdigest()[:16]
    return f"{settings.app_id}-{role}-{digest}"


class TransactionalWriter:
    """Writes each call's records in one Kafka transaction: a ``read_committed`` consumer
    of their topics sees all of them or none.

    An attempt that fails (a broker failed under it, a record refused) is aborted and
    written again, with new clients after a fatal error, for as long as the writer's
    patience lasts; then the error is raised. Blocking, and one call at a time (a
    producer holds one transaction): an asyncio caller runs :meth:`write` in an
    executor."""

    def __init__(
        self,
        config: Mapping[str, Any],
        name: str,
        timeout: float = TRANSACTION_CALL_SECONDS,
        patience: float | None = None,
        transactional_id: str | None = None,
    ) -> None:
        """``config``: the producer's settings without the transactional ones; ``name``
        starts each producer's transactional id (a random suffix follows), unless
        ``transactional_id`` gives every producer the same one (so each new producer
        fences the one before, :func:`worker_transactional_id`); ``timeout``:
        how long one transactional call may block; ``patience``: how long a call of
        :meth:`write` tries again (``timeout`` if None: a failed attempt is not retried
        once it has taken that long)."""
        self.config = dict(config)
        self.name = name
        self.timeout = timeout
        self.patience = timeout if patience is None else patience
        self.transactional_id = transactional_id
        self._producer: Producer | None = None
        self._one_at_a_time = threading.Lock()

    def write(self, records: Sequence[Record]) -> None:
        with self._one_at_a_time:
            self._write(records)

    def _write(self, records: Sequence[Record]) -> None:
        """One transaction per attempt; any Kafka error aborts the attempt (or drops the
        producer, when the error is fatal or the abort fails) and, within
        :attr:`patience`, a new attempt follows after a growing pause."""
        deadline = time.monotonic() + self.patience
        pause = FIRST_PAUSE
        while True:
            try:
                producer = self._ready_producer()
                try:
                    producer.begin_transaction()
                    for topic, key, value in records:
                        produce(producer, topic, value, key)
                    _retrying(partial(producer.commit_transaction, self.timeout))
                    return
                except KafkaException as error:
                    if fatal(error):
                        self._drop_producer()
                    else:
                        self._abort(producer)
                    raise
            except KafkaException as error:
                if time.monotonic() + pause > deadline:
                    raise
                log.warning("%s: transaction failed (%s); writing it again", self.name, error)
                time.sleep(pause)
                pause = min(pause * 2, MAX_PAUSE)
            except BaseException:
                self._drop_producer()  # its transaction is left open: the broker aborts it
                raise

    def close(self) -> None:
        self._drop_producer()

    def _ready_producer(self) -> Producer:
        if self._producer is None:
            transactional_id = self.transactional_id or f"{self.name}-{uuid.uuid4().hex}"
            producer = Producer({**self.config, **transactional_producer_config(transactional_id)})
            producer.init_transactions(self.timeout)
            self._producer = producer
        return self._producer

    def _abort(self, producer: Producer) -> None:
        try:
            producer.abort_transaction(self.timeout)
        except KafkaException as error:
            log.warning("%s: abort failed (%s); new clients", self.name, error)
            self._drop_producer()

    def _drop_producer(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            producer.flush(0)


def _retrying(call: Callable[[], object]) -> None:
    """``call()``, again after a retriable error (as librdkafka asks of a transactional
    call that timed out), up to :data:`RETRIES` times."""
    for attempt in range(RETRIES):
        try:
            call()
            return
        except KafkaException as error:
            if not retriable(error) or attempt == RETRIES - 1:
                raise
            log.info("transaction call failed, retrying: %s", error.args[0])
            time.sleep(0.2 * (attempt + 1))
