"""The canonicalizer's per-URL path: ``urls.raw`` -> ``urls.canonical`` (and ``urls.dlq``).

It runs in its own thread on confluent-kafka, because Faust's per-message path tops out far
below what this stage must carry (docs/STREAMS.md, "Canonicalizer front"). Per batch:

1. consume up to ``batch_size`` messages;
2. canonicalize each with the live maps (the compiled path writes the records of the plain
   URLs that need nothing more, :meth:`CanonicalizerFront._process`); produce the output
   (or a DLQ record), in input order; offer
   unlearned patterns to the local sampler, whose new samples go to the
   ``miqps.pattern-samples`` topic: repartitioned by domain, packed into one message per
   partition and batch (so the Faust agent that owns them pays its per-event cost once
   per pack), in the partition that the domain as a key would get from Java's partitioner;
3. flush the producer and check that everything was delivered;
4. only then store the batch's offsets, which the consumer commits in the background.

So an offset is never committed before the outputs of the messages it covers are in Kafka:
at least once. With ``MIQPS_PROCESSING_GUARANTEE=exactly_once`` steps 3 and 4 are one
Kafka transaction per commit interval (:mod:`streams.kafka.transactions`): the outputs of
its batches and the offsets of their inputs are committed together, so a ``read_committed``
consumer sees every input once, whatever crashed.

A delivery failure stops the worker without storing the batch's offsets, and so does a
stop request while outputs are still undelivered (the broker is gone); the log then says
which inputs have no committed offset and will be delivered again.

Errors: bad input (not JSON, no valid URL, too large) goes to the DLQ with its reason. Any
other exception while processing a batch is a bug in our code, never the input's fault: the
batch's offsets are not stored, the traceback is logged, and, as ``MIQPS_ON_BUG`` says,
the worker stops (``stop``, the default) or reads the batch again after a growing pause
(``retry``). So valid input is never dead-lettered because of a bug.
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

from miqps.audit import AuditRule
from miqps.canonical import Status
from streams.front.keycheck import DomainKeyCheck
from streams.front.ownership import Moves, OwnedPartitions, incremental_assignment
from streams.front.sampler import AuditForwarder, LocalSampler
from streams.kafka.admin import consumer_config, producer_config
from streams.kafka.clients import (
    DeliveryReports,
    ProduceBlocked,
    StoppedBeforeDelivery,
    checkpoint,
    leave_and_close,
    produce,
)
from streams.kafka.partitioning import key_partition
from streams.kafka.transactions import (
    InputTransaction,
    TransactionAborted,
    fatal,
    requires_abort,
    transactional_producer_config,
)
from streams.maps.feed import MapFeed, Restore
from streams.maps.live import LiveMaps
from streams.messages import (
    BadInput,
    CanonicalOutput,
    CountSample,
    DeadLetter,
    SamplePack,
    Source,
    UrlSample,
    decode_input,
    sample_to_bytes,
)
from streams.settings import Settings
from streams.worker.errorpolicy import BugBackoff, OnBug

log = logging.getLogger(__name__)

COUNT_FLUSH_SECONDS = 1.0
CLIENT_RESTART_FIRST_PAUSE = 1.0
CLIENT_RESTART_MAX_PAUSE = 30.0
REPORT_SECONDS = 10.0
MAX_POLL_INTERVAL_MS = 60_000
"""The consumer's ``max.poll.interval.ms``: a front stuck for this long without taking a
batch (in a Kafka client call that does not return) loses its partitions to the other
members of the group instead of holding them for Kafka's default 5 minutes."""
STALL_SECONDS = 60.0
"""A front whose loop has not turned for this long logs where it is stuck."""
STUCK_SECONDS = 120.0
"""A front whose loop has not turned for this long is stuck for good (librdkafka's
``send_offsets_to_transaction`` can ignore its timeout after the group coordinator's broker
failed, confluentinc/librdkafka#5456 and #5511): its process exits so that a new one
starts from the last commit (:meth:`CanonicalizerFront.stuck`)."""
SAMPLES_PER_MESSAGE = 500


def _ignore(seconds: float) -> None:
    pass


class ProcessingBug(RuntimeError):
    """Our code raised while processing an input: a bug, not bad input."""


class SamplePacks:
    """Samples waiting to go out, grouped by the partition their domain belongs to."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self._packs: dict[int, list[bytes]] = {}
        self._partition_of: dict[str, int] = {}

    def add(self, domain: str, sample: bytes) -> None:
        partition = self._partition_of.get(domain)
        if partition is None:
            if len(self._partition_of) > 100_000:
                self._partition_of.clear()
            partition = self._partition_of[domain] = key_partition(domain.encode(), self.partitions)
        self._packs.setdefault(partition, []).append(sample)

    def drain(self) -> list[tuple[int, bytes]]:
        """(partition, JSON array of samples) messages, emptying the packs."""
        messages = []
        for partition, samples in self._packs.items():
            for start in range(0, len(samples), SAMPLES_PER_MESSAGE):
                chunk = samples[start : start + SAMPLES_PER_MESSAGE]
                messages.append((partition, SamplePack.from_items(chunk)))
        self._packs.clear()
        return messages


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
class FrontCounters:
    consumed: int = 0
    learned: int = 0
    provisional: int = 0
    dead: int = 0
    forwarded: int = 0
    batches: int = 0
    bugs: int = 0
    client_restarts: int = 0
    aborted_transactions: int = 0
    consume_seconds: float = 0.0
    process_seconds: float = 0.0
    deliver_seconds: float = 0.0


class CanonicalizerFront:
    def __init__(
        self,
        settings: Settings,
        live_maps: LiveMaps,
        feed: MapFeed,
        on_fatal: Callable[[BaseException], None] | None = None,
        transactional_id: str | None = None,
    ) -> None:
        self.settings = settings
        self.transactional_id = transactional_id or f"{self.group_id}-{uuid.uuid4().hex}"
        """Exactly once, the producer's: a front given its predecessor's fences it (its
        open transaction is aborted at once instead of after its timeout)."""
        self.bug_backoff = BugBackoff(OnBug(settings.on_bug))
        self.live_maps = live_maps
        self.feed = feed
        self.on_fatal = on_fatal
        self.counters = FrontCounters()
        self.sampler = LocalSampler(
            settings.local_sampler_entries,
            settings.policy.min_distinct_values,
            resend_after=settings.policy.rare_after + settings.policy.retry_after,
        )
        self.auditing = AuditForwarder(
            AuditRule(settings.audit_share, str(settings.learn.seed)),
            settings.local_sampler_entries,
        )
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="miqps-canonicalizer", daemon=True)
        self._deliveries = DeliveryReports()
        self._packs: SamplePacks | None = None
        self.key_check = (
            DomainKeyCheck(settings.topics.raw, settings.partitions)
            if settings.input_keyed_by_domain
            else None
        )
        """With ``MIQPS_INPUT_KEYED_BY_DOMAIN``: the check of each input's key and partition
        against its domain (:mod:`streams.front.keycheck`)."""
        self.owned_maps: OwnedPartitions | None = None
        """With ``MIQPS_INPUT_KEYED_BY_DOMAIN``: the maps partitions the feed follows,
        those of the input partitions assigned (:mod:`streams.front.ownership`)."""
        if settings.input_keyed_by_domain:
            if not feed.partitioned:
                raise ValueError("with keyed input, the front needs a partitioned map feed")
            self.owned_maps = OwnedPartitions(incremental=False)
        self.restoring: dict[int, Restore] = {}
        """Input partitions paused until their maps partition is restored."""
        self.uncommitted = UncommittedInputs(settings.exactly_once)
        self._transaction: InputTransaction | None = None
        self.turned_at = time.monotonic()
        """When the loop last began a turn (see :meth:`report_stall`)."""
        self.stall_seconds = STALL_SECONDS
        self.stuck_seconds = STUCK_SECONDS
        self._in_loop = False
        self.max_poll_interval_ms = MAX_POLL_INTERVAL_MS
        self._stall_reported = 0.0
        # What a metrics exporter adds (streams.front.metrics): consumer settings, such as
        # a statistics callback, and a call with each batch's seconds.
        self.consumer_options: dict[str, Any] = {}
        self.observe_batch: Callable[[float], None] = _ignore

    @property
    def group_id(self) -> str:
        return f"{self.settings.app_id}-canonicalizer"

    def start(self) -> None:
        self._thread.start()

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
            "canonicalizer: no batch taken for %.0fs; the loop is at:\n%s",
            time.monotonic() - since,
            where.rstrip("\n"),
        )

    def _run(self) -> None:
        try:
            while not self.feed.wait_ready(0.5):
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
                    # a batch was produced, ends these clients, not the front: new ones
                    # resume from the last commit.
                    log.warning(
                        "canonicalizer: Kafka client failed for good (%s); starting new "
                        "clients in %gs, from the last commit",
                        error,
                        pause,
                    )
                    self.counters.client_restarts += 1
                    self._stopping.wait(pause)
                    pause = min(pause * 2, CLIENT_RESTART_MAX_PAUSE)
        except BaseException as error:
            log.exception("canonicalizer stopped")
            if self.on_fatal is not None:
                self.on_fatal(error)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        log.info(
            "canonicalizer: assigned partitions %s",
            sorted(partition.partition for partition in partitions),
        )
        # Consumption starts over from the group's committed offsets.
        self.uncommitted.forget(partitions)
        if self.owned_maps is not None:
            self._take_maps(consumer, partitions)

    def _take_maps(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Follow the maps partitions of newly assigned input partitions, and pause those
        input partitions until their maps are restored; give up those no longer assigned
        (eager). The assignment is made here, so that it can be paused at once."""
        assert self.owned_maps is not None
        self._move_maps(self.owned_maps.assigned(p.partition for p in partitions))
        if self.owned_maps.incremental:
            consumer.incremental_assign(partitions)
        else:
            consumer.assign(partitions)
        waiting = [p for p in partitions if p.partition in self.restoring]
        if waiting:
            consumer.pause(waiting)
            log.info(
                "canonicalizer: partitions %s wait for their maps to be restored",
                sorted(p.partition for p in waiting),
            )

    def _move_maps(self, moves: Moves) -> None:
        if moves.give_up:
            self.feed.unfollow(moves.give_up)
            for partition in moves.give_up:
                self.restoring.pop(partition, None)
        if moves.take:
            self.restoring.update(self.feed.follow(moves.take))

    def _resume_restored(self, consumer: Consumer) -> None:
        """Resume the input partitions whose maps are restored."""
        restored = [p for p, restore in self.restoring.items() if restore.done.is_set()]
        if not restored:
            return
        for partition in restored:
            del self.restoring[partition]
        topic = self.settings.topics.raw
        assigned = {p.partition for p in consumer.assignment() if p.topic == topic}
        resumed = [TopicPartition(topic, p) for p in sorted(restored) if p in assigned]
        if resumed:
            consumer.resume(resumed)
            log.info(
                "canonicalizer: partitions %s resumed, their maps restored",
                [p.partition for p in resumed],
            )

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        log.info(
            "canonicalizer: revoked partitions %s",
            sorted(partition.partition for partition in partitions),
        )
        # Every batch consumed so far is processed: its outputs and offsets go together
        # before the partitions do.
        self._commit_transaction()
        if self.owned_maps is not None:
            self._move_maps(self.owned_maps.revoked(p.partition for p in partitions))

    def _commit_transaction(self) -> None:
        if self._transaction is None:
            return
        try:
            self.uncommitted.committed(self._transaction.commit())
        except TransactionAborted:
            self.counters.aborted_transactions += 1
            log.warning("canonicalizer: transaction aborted; its inputs are read again")

    def _abort_failed(self, transaction: InputTransaction, error: KafkaException) -> None:
        """A record of the open transaction failed (the broker refused it, or a broker
        failed under it), and the producer takes no more until the transaction is aborted:
        abort it, so its inputs are read again. If the abort fails too, its error ends
        these clients (:meth:`_run` decides whether new ones start)."""
        log.warning(
            "canonicalizer: the open transaction failed (%s); aborting it, its inputs are "
            "read again",
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
                "on_commit": self._on_commit,
                **self.consumer_options,
            },
        )
        if self.owned_maps is not None:
            self.owned_maps.incremental = incremental_assignment(config)
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
        metadata = consumer.list_topics(settings.topics.samples, timeout=30)
        self._packs = SamplePacks(len(metadata.topics[settings.topics.samples].partitions))
        if self.key_check is not None:
            raw = consumer.list_topics(settings.topics.raw, timeout=30).topics[settings.topics.raw]
            self.key_check.set_partitions(len(raw.partitions))
        consumer.subscribe(
            [settings.topics.raw], on_assign=self._on_assign, on_revoke=self._on_revoke
        )
        next_count_flush = time.monotonic() + COUNT_FLUSH_SECONDS
        next_report = time.monotonic() + REPORT_SECONDS
        reported = 0
        stopped_cleanly = False
        try:
            counters = self.counters
            clock = time.perf_counter
            while not self._stopping.is_set():
                self.turned_at = time.monotonic()
                if self.restoring:
                    self._resume_restored(consumer)
                began = clock()
                messages = consumer.consume(settings.batch_size, settings.batch_wait)
                consumed = clock()
                counters.consume_seconds += consumed - began
                now = time.monotonic()
                flush_counts = now >= next_count_flush
                if not messages and not flush_counts:
                    if transaction is not None and transaction.due():
                        self._commit_transaction()
                    continue
                if transaction is not None:
                    transaction.begin()
                try:
                    offsets = self._process(messages, producer)
                    if flush_counts:
                        self._forward_counts()
                        next_count_flush = now + COUNT_FLUSH_SECONDS
                    self._send_samples(producer)
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
                            "canonicalizer: stopping with %s outputs undelivered; the "
                            "offsets of their inputs stay uncommitted",
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
                    log.info(
                        "canonicalizer: %d in (%.0f/s), %d learned, %d provisional, "
                        "%d dead-lettered, %d samples forwarded, %d domain maps; "
                        "seconds consuming %.1f, processing %.1f, delivering %.1f",
                        counters.consumed,
                        done / REPORT_SECONDS,
                        counters.learned,
                        counters.provisional,
                        counters.dead,
                        counters.forwarded,
                        len(self.live_maps),
                        counters.consume_seconds,
                        counters.process_seconds,
                        counters.deliver_seconds,
                    )
                    next_report = now + REPORT_SECONDS
            stopped_cleanly = True
        finally:
            if transaction is not None:
                self._close_transaction(transaction, stopped_cleanly)
            try:
                undelivered = producer.flush(0 if self._stopping.is_set() else 30)
                if undelivered:
                    log.warning(
                        "canonicalizer: %d outputs not delivered before the stop", undelivered
                    )
            except KafkaException as error:
                log.warning("canonicalizer: the producer failed at the stop: %s", error)
            self._transaction = None
            self._deliveries.errors.clear()
            leave_and_close(consumer)
            self._in_loop = False
            log.info("canonicalizer: %s", self.uncommitted.describe())
            log.info(
                "canonicalizer stopped after %d messages (%d learned, %d provisional, "
                "%d dead-lettered)",
                self.counters.consumed,
                self.counters.learned,
                self.counters.provisional,
                self.counters.dead,
            )

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
            log.warning("canonicalizer: open transaction not committed at the stop: %s", error)
        try:
            transaction.abort()
        except KafkaException as error:
            log.warning("canonicalizer: open transaction not aborted (the broker will): %s", error)

    def _process(self, messages: list[Message], producer: Producer) -> dict[tuple[str, int], int]:
        """Produce each message's output, in order; return the offsets to store. The
        compiled path writes the records of the messages it can take whole
        (:meth:`~miqps.canonical.Canonicalizer.stream_records`), :meth:`_process_one`
        takes the others."""
        settings = self.settings
        canonical_topic = settings.topics.canonical
        wall_now = time.time()
        offsets: dict[tuple[str, int], int] = {}
        counters = self.counters
        canonicalizer = self.live_maps.canonicalizer
        answered = None
        if canonicalizer.native:
            answered = canonicalizer.stream_records(
                [message.value() if message.error() is None else None for message in messages],
                settings.max_message_bytes,
                wall_now - self.live_maps.reverify_after,
                self.auditing.rule.chosen_below if settings.audit_share > 0 else 0,
                self.auditing.rule.seed,
            )
        if answered is None:
            records: list[bytes | None] = [None] * len(messages)
            keys: list[bytes | None] = records
            learned = written = 0
        else:
            records, keys, learned = answered
            written = len(records) - records.count(None)
        process_one = self._process_one
        key_check = self.key_check
        for message, record, key in zip(messages, records, keys, strict=True):
            if record is not None:
                produce(producer, canonical_topic, record, key)
                if key_check is not None:
                    key_check.record(
                        message.key(), record, message.partition() or 0, message.offset() or 0
                    )
            elif message.error() is not None:
                self._consumer_error(message)
                continue
            else:
                process_one(message, producer, wall_now)
            offsets[(message.topic() or "", message.partition() or 0)] = (message.offset() or 0) + 1
        counters.consumed += len(messages)
        counters.learned += learned
        counters.provisional += written - learned
        return offsets

    def _process_one(self, message: Message, producer: Producer, wall_now: float) -> None:
        """Decode, decide and produce one message (or dead-letter it), and offer it to the
        local sampler and the audit forwarder."""
        counters = self.counters
        try:
            raw = decode_input(message.value(), self.settings.max_message_bytes)
        except BadInput as error:
            self._dead_letter(producer, message, error.reason)
            counters.dead += 1
            return
        live_maps = self.live_maps
        try:
            url = raw.url
            if self.key_check is not None:
                self.key_check.check(
                    message.key(),
                    url.host.encode(),
                    message.partition() or 0,
                    message.offset() or 0,
                )
            decision = live_maps.decide(url, raw.text)
            output = CanonicalOutput.encode(
                raw.text,
                decision.canonical_url,
                url.host,
                decision.pattern,
                decision.kept,
                decision.dropped,
                decision.status,
                decision.map_version,
                raw.meta,
            )
            produce(
                producer, self.settings.topics.canonical, output, decision.canonical_url.encode()
            )
            if decision.status is Status.LEARNED:
                counters.learned += 1
                basis = live_maps.due_for_reverification(decision, wall_now)
                if decision.dropped and self.settings.audit_share > 0:
                    audit = self.auditing.offer(
                        live_maps.canonicalizer.dropping_decisions,
                        decision.map_version,
                        url,
                        decision.pattern,
                        wall_now,
                    )
                    if audit is not None:
                        produce(
                            producer, self.settings.topics.probe_requests, audit, url.host.encode()
                        )
            else:
                counters.provisional += 1
                basis = "" if url.has_params else None
            if basis is not None:
                count = self.sampler.offer(url.host, decision.pattern, url, basis)
                if count:
                    counters.forwarded += 1
                    assert self._packs is not None
                    self._packs.add(
                        url.host,
                        sample_to_bytes(
                            UrlSample(url.host, decision.pattern, url.url, count, basis)
                        ),
                    )
        except (KafkaException, ProduceBlocked):
            raise
        except Exception as error:
            raise ProcessingBug(
                f"a bug while processing {message.topic()}[{message.partition()}]@"
                f"{message.offset()} (valid input: not dead-lettered)"
            ) from error

    def _bug(self, bug: Exception, consumer: Consumer, messages: list[Message]) -> None:
        """Stop (raise ``bug``) or, with ``MIQPS_ON_BUG=retry``, read ``messages`` again
        after the policy's pause; their offsets are not stored either way."""
        self.counters.bugs += 1
        pause = self.bug_backoff.after_bug()
        if pause is None:
            raise bug
        log.error(
            "canonicalizer: %s; the batch is not committed and is read again in %gs "
            "(MIQPS_ON_BUG=retry)",
            bug,
            pause,
            exc_info=bug,
        )
        if self._transaction is not None:
            self._transaction.abort()
        else:
            self._rewind(consumer, messages)
        self._stopping.wait(pause)

    @staticmethod
    def _rewind(consumer: Consumer, messages: list[Message]) -> None:
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
                    "canonicalizer: not rewound (partition revoked?); its new owner "
                    "reads from the last commit: %s",
                    error,
                )

    def _dead_letter(self, producer: Producer, message: Message, reason: str) -> None:
        timestamp_type, timestamp = message.timestamp()
        record = DeadLetter.of(
            reason,
            message.value(),
            message.key(),
            Source(
                message.topic() or "",
                message.partition() or 0,
                message.offset() or 0,
                timestamp if timestamp_type else None,
            ),
            "canonicalize",
            self.settings.topic_max_message_bytes // 2,
        )
        produce(producer, self.settings.topics.dlq, record.to_bytes(), message.key() or b"")

    def _consumer_error(self, message: Message) -> None:
        error = message.error()
        if error is not None and error.fatal():
            raise KafkaException(error)
        log.warning("canonicalizer: consumer error: %s", error)

    def _forward_counts(self) -> None:
        """The counts of URLs not forwarded, and the samples forwarded again."""
        assert self._packs is not None
        for pending in self.sampler.drain_counts():
            self._packs.add(
                pending.domain,
                sample_to_bytes(
                    CountSample(pending.domain, pending.pattern, pending.count, pending.basis)
                ),
            )
        for resend in self.sampler.due_resends(self.live_maps.needs_learning):
            self._packs.add(
                resend.domain,
                sample_to_bytes(
                    UrlSample(resend.domain, resend.pattern, resend.url, 0, resend.basis)
                ),
            )

    def _send_samples(self, producer: Producer) -> None:
        assert self._packs is not None
        topic = self.settings.topics.samples
        for partition, value in self._packs.drain():
            produce(producer, topic, value, None, partition)
