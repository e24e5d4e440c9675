"""A consume -> produce loop on confluent-kafka in a thread of its own: what the
canonicalizer front (:mod:`streams.front.loop`) and the domain repartitioner
(:mod:`streams.front.repartition`) share.

Per turn, a :class:`Stage` consumes a batch, hands it to :meth:`Stage._process_batch`
(which produces the batch's records and returns its input offsets), and then:

- at least once: flushes the producer, checks that everything was delivered, and only then
  stores the batch's offsets, which the consumer commits in the background;
- exactly once (``MIQPS_PROCESSING_GUARANTEE=exactly_once``): adds the offsets to the open
  Kafka transaction, committed with the outputs of its batches every commit interval
  (:mod:`streams.kafka.transactions`).

A delivery failure stops the stage without storing the batch's offsets, and so does a stop
request while outputs are still undelivered (the broker is gone); the log then says which
inputs have no committed offset and will be delivered again. A fatal client error (a
transactional producer fenced, a transaction that required an abort while a batch was
produced) ends the clients, not the stage: new ones resume from the last commit. Any other
exception while processing a batch is a bug of ours: the batch's offsets are not stored,
and, as ``MIQPS_ON_BUG`` says, the stage stops or reads the batch again after a pause.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from streams.kafka.admin import consumer_config, producer_config
from streams.kafka.clients import (
    DeliveryReports,
    ProduceBlocked,
    StoppedBeforeDelivery,
    checkpoint,
    leave_and_close,
)
from streams.kafka.transactions import (
    InputTransaction,
    TransactionAborted,
    fatal,
    requires_abort,
    transactional_producer_config,
)
from streams.settings import Settings
from streams.worker.errorpolicy import BugBackoff, OnBug

log = logging.getLogger(__name__)

CLIENT_RESTART_FIRST_PAUSE = 1.0
CLIENT_RESTART_MAX_PAUSE = 30.0
REPORT_SECONDS = 10.0
MAX_POLL_INTERVAL_MS = 60_000
"""The consumer's ``max.poll.interval.ms``: a stage stuck for this long without taking a
batch (in a Kafka client call that does not return) loses its partitions to the other
members of the group instead of holding them for Kafka's default 5 minutes."""
ASSIGNORS = {"cooperative": "cooperative-sticky", "eager": "range,roundrobin"}
"""librdkafka's ``partition.assignment.strategy`` for each ``MIQPS_FRONT_REBALANCE``
(``range,roundrobin`` is librdkafka's default)."""
STALL_SECONDS = 60.0
"""A stage whose loop has not turned for this long logs where it is stuck."""
STUCK_SECONDS = 120.0
"""A stage whose loop has not turned for this long is stuck for good (librdkafka's
``send_offsets_to_transaction`` can ignore its timeout after the group coordinator's broker
failed, confluentinc/librdkafka#5456 and #5511): its process exits so that a new one
starts from the last commit (:meth:`Stage.stuck`)."""


def _ignore(seconds: float) -> None:
    pass


class UncommittedInputs:
    """Per partition, how far this worker consumed and how far Kafka confirmed commits,
    so that a stop can say which inputs will be delivered again."""

    def __init__(self, exactly_once: bool = False) -> None:
        self.exactly_once = exactly_once
        self._consumed: dict[tuple[str, int], tuple[int, int]] = {}
        self._committed: dict[tuple[str, int], int] = {}

    def consumed(self, messages: list[Message], ends: dict[tuple[str, int], int]) -> None:
        for key, end in ends.items():
            known = self._consumed.get(key)
            if known is None:
                first = next(
                    message.offset() or 0
                    for message in messages
                    if (message.topic() or "", message.partition() or 0) == key
                )
                self._consumed[key] = (first, end)
            else:
                self._consumed[key] = (known[0], end)

    def committed(self, partitions: list[TopicPartition]) -> None:
        for partition in partitions:
            if partition.error is None and partition.offset >= 0:
                self._committed[(partition.topic, partition.partition)] = partition.offset

    def forget(self, partitions: list[TopicPartition]) -> None:
        for partition in partitions:
            self._consumed.pop((partition.topic, partition.partition), None)
            self._committed.pop((partition.topic, partition.partition), None)

    def describe(self) -> str:
        consumed, committed = dict(self._consumed), dict(self._committed)
        ranges = []
        for (topic, partition), (first, end) in sorted(consumed.items()):
            start = max(first, committed.get((topic, partition), first))
            if end > start:
                ranges.append((end - start, f"{topic}[{partition}] offsets {start}-{end - 1}"))
        if not ranges:
            return "Every consumed input has its offset committed."
        fate = (
            "are read again; their outputs were not committed (exactly once)"
            if self.exactly_once
            else "will be delivered again (at least once)"
        )
        return (
            f"{sum(count for count, _ in ranges)} consumed inputs have no committed "
            f"offset and {fate}: {', '.join(text for _, text in ranges)}."
        )


@dataclass(slots=True)
class StageCounters:
    consumed: int = 0
    batches: int = 0
    bugs: int = 0
    client_restarts: int = 0
    aborted_transactions: int = 0
    consume_seconds: float = 0.0
    process_seconds: float = 0.0
    deliver_seconds: float = 0.0


class Stage:
    """One consume -> produce loop: its consumer reads :attr:`input_topic` in the group
    :attr:`group_id`; subclasses say what a batch produces."""

    name = "stage"
    """The thread's name (``miqps-<name>``) and its log lines' prefix."""

    def __init__(
        self,
        settings: Settings,
        counters: StageCounters,
        on_fatal: Callable[[BaseException], None] | None = None,
        transactional_id: str | None = None,
    ) -> None:
        self.settings = settings
        self.counters = counters
        self.on_fatal = on_fatal
        self.transactional_id = transactional_id or f"{self.group_id}-{uuid.uuid4().hex}"
        """Exactly once, the producer's: a stage given its predecessor's fences it (its
        open transaction is aborted at once instead of after its timeout)."""
        self.bug_backoff = BugBackoff(OnBug(settings.on_bug))
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"miqps-{self.name}", daemon=True)
        self._deliveries = DeliveryReports()
        self.uncommitted = UncommittedInputs(settings.exactly_once)
        self._transaction: InputTransaction | None = None
        self.turned_at = time.monotonic()
        """When the loop last began a turn (see :meth:`report_stall`)."""
        self.stall_seconds = STALL_SECONDS
        self.stuck_seconds = STUCK_SECONDS
        self._in_loop = False
        self.leaving = False
        """Whether the consumer is leaving the group (its last revocation is under way)."""
        self.max_poll_interval_ms = MAX_POLL_INTERVAL_MS
        self._stall_reported = 0.0
        # What a metrics exporter adds (streams.front.metrics): consumer settings, such as
        # a statistics callback, and a call with each batch's seconds.
        self.consumer_options: dict[str, Any] = {}
        self.observe_batch: Callable[[float], None] = _ignore

    @property
    def group_id(self) -> str:
        raise NotImplementedError

    @property
    def input_topic(self) -> str:
        raise NotImplementedError

    def start(self) -> None:
        self._thread.start()

    def request_stop(self) -> None:
        """Ask the loop to stop after its batch, without waiting."""
        self._stopping.set()

    def stop(self, timeout: float = 30.0) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def describe_uncommitted(self) -> str:
        return self.uncommitted.describe()

    def stuck(self) -> bool:
        """Exactly once, the loop (or the close of its clients) has held its Kafka clients
        without turning for :attr:`stuck_seconds`. (At least once, a batch may wait that
        long for its deliveries while the broker is away, on purpose, and says so every
        10 s.)"""
        return (
            self.settings.exactly_once
            and self._in_loop
            and self._thread.is_alive()
            and time.monotonic() - self.turned_at >= self.stuck_seconds
        )

    def report_stall(self) -> None:
        """Log, once per stall, where the loop is stuck when it has not turned for
        :attr:`stall_seconds` (a Kafka client call that does not return, say)."""
        since = self.turned_at
        if not self._thread.is_alive() or time.monotonic() - since < self.stall_seconds:
            return
        if self._stall_reported == since:
            return
        self._stall_reported = since
        frame = sys._current_frames().get(self._thread.ident or -1)
        where = "".join(traceback.format_stack(frame)) if frame is not None else "(unknown)\n"
        log.warning(
            "%s: no batch taken for %.0fs; the loop is at:\n%s",
            self.name,
            time.monotonic() - since,
            where.rstrip("\n"),
        )

    # What subclasses add.

    def _ready(self) -> bool:
        """Whether the loop may start consuming; asked again until it may, so it waits a
        little (half a second) before it says no."""
        return True

    def _configured(self, config: dict[str, Any]) -> None:
        """The consumer's configuration, before its consumer is made."""

    def _prepare(self, consumer: Consumer) -> None:
        """Once the clients are made, before the consumer subscribes."""

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Partitions newly assigned (the consumer's assignment is not made yet)."""

    def _revoked(self, partitions: list[TopicPartition]) -> None:
        """Partitions revoked, after the open transaction was committed."""

    def _before_consume(self, consumer: Consumer) -> None:
        """At the start of every turn."""

    def _periodic_due(self, now: float) -> bool:
        """Whether a turn that consumed nothing has work all the same."""
        return False

    def _process_batch(
        self, messages: list[Message], producer: Producer, now: float
    ) -> dict[tuple[str, int], int]:
        """Produce what ``messages`` give (and any periodic work due at ``now``); return
        (topic, partition) -> next offset of the inputs whose records were produced."""
        raise NotImplementedError

    def _report(self, per_second: float) -> None:
        """The progress line logged every :data:`REPORT_SECONDS`."""

    def _report_stopped(self) -> None:
        """The line logged when the loop ends."""

    # The loop.

    def _run(self) -> None:
        try:
            while not self._ready():
                if self._stopping.is_set():
                    return
            pause = CLIENT_RESTART_FIRST_PAUSE
            while True:
                started = time.monotonic()
                try:
                    self._loop()
                    return
                except KafkaException as error:
                    if not (fatal(error) or requires_abort(error)) or self._stopping.is_set():
                        raise
                    if time.monotonic() - started > CLIENT_RESTART_MAX_PAUSE:
                        pause = CLIENT_RESTART_FIRST_PAUSE  # the clients had been working
                    # A fatal client error (a transactional producer in an invalid state
                    # after a broker failed under it, say), or a transaction failed while
                    # a batch was produced, ends these clients, not the stage: new ones
                    # resume from the last commit.
                    log.warning(
                        "%s: Kafka client failed for good (%s); starting new clients in %gs, "
                        "from the last commit",
                        self.name,
                        error,
                        pause,
                    )
                    self.counters.client_restarts += 1
                    self._stopping.wait(pause)
                    pause = min(pause * 2, CLIENT_RESTART_MAX_PAUSE)
        except BaseException as error:
            log.exception("%s stopped", self.name)
            if self.on_fatal is not None:
                self.on_fatal(error)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        taken = {partition.partition for partition in partitions}
        log.info(
            "%s: assigned partitions %s; holds %s",
            self.name,
            sorted(taken),
            sorted(_held(consumer) | taken),
        )
        # Consumption starts over from the group's committed offsets.
        self.uncommitted.forget(partitions)
        self._assigned(consumer, partitions)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        given_up = {partition.partition for partition in partitions}
        log.info(
            "%s: revoked partitions %s; holds %s",
            self.name,
            sorted(given_up),
            sorted(_held(consumer) - given_up),
        )
        # Every batch consumed so far is processed: its outputs and offsets go together
        # before the partitions do.
        self._commit_transaction()
        self._revoked(partitions)

    def _commit_transaction(self) -> None:
        if self._transaction is None:
            return
        try:
            self.uncommitted.committed(self._transaction.commit())
        except TransactionAborted:
            self.counters.aborted_transactions += 1
            log.warning("%s: transaction aborted; its inputs are read again", self.name)

    def _abort_failed(self, transaction: InputTransaction, error: KafkaException) -> None:
        """A record of the open transaction failed (the broker refused it, or a broker
        failed under it), and the producer takes no more until the transaction is aborted:
        abort it, so its inputs are read again. If the abort fails too, its error ends
        these clients (:meth:`_run` decides whether new ones start)."""
        log.warning(
            "%s: the open transaction failed (%s); aborting it, its inputs are read again",
            self.name,
            error.args[0] if error.args else error,
        )
        transaction.abort()
        self.counters.aborted_transactions += 1

    def _on_commit(self, error: KafkaError | None, partitions: list[TopicPartition]) -> None:
        if error is None:
            self.uncommitted.committed(partitions)

    def _loop(self) -> None:
        settings = self.settings
        exactly_once = settings.exactly_once
        config = consumer_config(
            settings,
            self.group_id,
            **{
                "enable.auto.commit": not exactly_once,
                "enable.auto.offset.store": False,
                "auto.commit.interval.ms": round(settings.commit_interval * 1000),
                "fetch.max.bytes": 16 * 1024 * 1024,
                "max.partition.fetch.bytes": 1024 * 1024,
                "queued.max.messages.kbytes": 16 * 1024,
                "session.timeout.ms": 10_000,
                "heartbeat.interval.ms": 2_000,
                "max.poll.interval.ms": self.max_poll_interval_ms,
                "partition.assignment.strategy": ASSIGNORS[settings.front_rebalance],
                "on_commit": self._on_commit,
                **self.consumer_options,
            },
        )
        self._configured(config)
        consumer = Consumer(config)
        producer = Producer(
            producer_config(
                settings,
                **{
                    "delivery.report.only.error": True,
                    "on_delivery": self._deliveries,
                    **(
                        transactional_producer_config(self.transactional_id) if exactly_once else {}
                    ),
                },
            )
        )
        transaction = None
        if exactly_once:
            transaction = self._transaction = InputTransaction(
                producer, consumer, settings.commit_interval
            )
            transaction.initialize()
        self.turned_at = time.monotonic()
        self._in_loop = True
        self._prepare(consumer)
        consumer.subscribe([self.input_topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
        next_report = time.monotonic() + REPORT_SECONDS
        reported = 0
        stopped_cleanly = False
        try:
            counters = self.counters
            clock = time.perf_counter
            while not self._stopping.is_set():
                self.turned_at = time.monotonic()
                self._before_consume(consumer)
                began = clock()
                messages = consumer.consume(settings.batch_size, settings.batch_wait)
                consumed = clock()
                counters.consume_seconds += consumed - began
                now = time.monotonic()
                if not messages and not self._periodic_due(now):
                    if transaction is not None and transaction.due():
                        self._commit_transaction()
                    continue
                if transaction is not None:
                    transaction.begin()
                try:
                    offsets = self._process_batch(messages, producer, now)
                except KafkaException as error:
                    if transaction is None or fatal(error):
                        raise
                    self._abort_failed(transaction, error)
                    continue
                except ProduceBlocked:
                    raise
                except Exception as bug:
                    self._bug(bug, consumer, messages)
                    continue
                self.bug_backoff.succeeded()
                processed = clock()
                if offsets:
                    self.uncommitted.consumed(messages, offsets)
                if transaction is not None:
                    transaction.add(offsets)
                    if transaction.due():
                        self._commit_transaction()
                else:
                    try:
                        checkpoint(producer, consumer, offsets, self._deliveries, self._stopping)
                    except StoppedBeforeDelivery as stopped:
                        log.warning(
                            "%s: stopping with %s outputs undelivered; the offsets of their "
                            "inputs stay uncommitted",
                            self.name,
                            stopped,
                        )
                        break
                delivered = clock()
                counters.process_seconds += processed - consumed
                counters.deliver_seconds += delivered - processed
                counters.batches += 1
                if messages:
                    self.observe_batch(delivered - consumed)
                if now >= next_report:
                    done = counters.consumed - reported
                    reported = counters.consumed
                    self._report(done / REPORT_SECONDS)
                    next_report = now + REPORT_SECONDS
            stopped_cleanly = True
        finally:
            if transaction is not None:
                self._close_transaction(transaction, stopped_cleanly)
            try:
                undelivered = producer.flush(0 if self._stopping.is_set() else 30)
                if undelivered:
                    log.warning(
                        "%s: %d outputs not delivered before the stop", self.name, undelivered
                    )
            except KafkaException as error:
                log.warning("%s: the producer failed at the stop: %s", self.name, error)
            self._transaction = None
            self._deliveries.errors.clear()
            self.leaving = True
            try:
                leave_and_close(consumer)
            finally:
                self.leaving = False
            self._in_loop = False
            log.info("%s: %s", self.name, self.uncommitted.describe())
            self._report_stopped()

    def _close_transaction(self, transaction: InputTransaction, stopped_cleanly: bool) -> None:
        """On a clean stop, commit what the open transaction holds (whole batches only);
        otherwise, or if that fails, abort it: its inputs are read again by the partitions'
        next owner. One left open (the broker gone) is aborted by the broker after its
        timeout."""
        if not transaction.open:
            return
        try:
            if stopped_cleanly:
                self._commit_transaction()
                return
        except KafkaException as error:
            log.warning("%s: open transaction not committed at the stop: %s", self.name, error)
        try:
            transaction.abort()
        except KafkaException as error:
            log.warning("%s: open transaction not aborted (the broker will): %s", self.name, error)

    def _bug(self, bug: Exception, consumer: Consumer, messages: list[Message]) -> None:
        """Stop (raise ``bug``) or, with ``MIQPS_ON_BUG=retry``, read ``messages`` again
        after the policy's pause; their offsets are not stored either way."""
        self.counters.bugs += 1
        pause = self.bug_backoff.after_bug()
        if pause is None:
            raise bug
        log.error(
            "%s: %s; the batch is not committed and is read again in %gs (MIQPS_ON_BUG=retry)",
            self.name,
            bug,
            pause,
            exc_info=bug,
        )
        if self._transaction is not None:
            self._transaction.abort()
        else:
            self._rewind(consumer, messages)
        self._stopping.wait(pause)

    def _rewind(self, consumer: Consumer, messages: list[Message]) -> None:
        """Seek each partition back to the first of ``messages`` consumed from it."""
        firsts: dict[tuple[str, int], int] = {}
        for message in messages:
            firsts.setdefault(
                (message.topic() or "", message.partition() or 0), message.offset() or 0
            )
        for (topic, partition), offset in firsts.items():
            try:
                consumer.seek(TopicPartition(topic, partition, offset))
            except KafkaException as error:
                log.info(
                    "%s: not rewound (partition revoked?); its new owner reads from the "
                    "last commit: %s",
                    self.name,
                    error,
                )

    def _consumer_error(self, message: Message) -> None:
        error = message.error()
        if error is not None and error.fatal():
            raise KafkaException(error)
        log.warning("%s: consumer error: %s", self.name, error)


def _held(consumer: Consumer) -> set[int]:
    """The partitions ``consumer`` is assigned (before a rebalance callback's change: under
    the cooperative protocol the callbacks name only the partitions that move)."""
    return {partition.partition for partition in consumer.assignment()}
