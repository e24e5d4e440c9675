"""The canonicalizer's per-URL path: ``urls.raw`` -> ``urls.canonical`` (and ``urls.dlq``).

It runs in its own thread on confluent-kafka, because Faust's per-message path tops out far
below what this stage must carry (docs/STREAMS.md, "Canonicalizer front"). It is a
:class:`~streams.front.stage.Stage`, which says how a batch's offsets are committed (at
least once, or in Kafka transactions exactly once) and what becomes of a failed client or a
bug. Per batch, the front:

1. canonicalizes each message with the live maps (the compiled path writes the records of
   the plain URLs that need nothing more, :meth:`CanonicalizerFront._process`) and produces
   the output (or a DLQ record), in input order;
2. offers unlearned patterns to the local sampler, whose new samples go to the
   ``miqps.pattern-samples`` topic: repartitioned by domain, packed into one message per
   partition and batch (so the Faust agent that owns them pays its per-event cost once
   per pack), in the partition that the domain as a key would get from Java's partitioner.

Its input is ``urls.raw``, or, with ``MIQPS_REPARTITION_INPUT``, the topic the domain
repartitioner writes (:mod:`streams.front.repartition`). With input keyed by domain (either
way), it follows only the maps partitions of its input partitions, and pauses a newly
assigned input partition until that partition's maps are restored.

Errors: bad input (not JSON, no valid URL, too large) goes to the DLQ with its reason. Any
other exception while processing a batch is a bug in our code, never the input's fault: the
batch's offsets are not stored, the traceback is logged, and, as ``MIQPS_ON_BUG`` says,
the worker stops (``stop``, the default) or reads the batch again after a growing pause
(``retry``). So valid input is never dead-lettered because of a bug.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from miqps.audit import AuditRule
from miqps.canonical import Status
from streams.front.keycheck import DomainKeyCheck
from streams.front.ownership import Moves, OwnedPartitions, incremental_assignment
from streams.front.sampler import AuditForwarder, LocalSampler
from streams.front.stage import Stage, StageCounters, UncommittedInputs
from streams.kafka.clients import ProduceBlocked, produce
from streams.kafka.partitioning import key_partition
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

__all__ = [
    "CanonicalizerFront",
    "FrontCounters",
    "ProcessingBug",
    "SamplePacks",
    "UncommittedInputs",
]

log = logging.getLogger(__name__)

COUNT_FLUSH_SECONDS = 1.0
RESUME_SEEK_SECONDS = 10.0
SAMPLES_PER_MESSAGE = 500


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


@dataclass(slots=True)
class FrontCounters(StageCounters):
    learned: int = 0
    provisional: int = 0
    dead: int = 0
    forwarded: int = 0


class CanonicalizerFront(Stage):
    name = "canonicalizer"

    def __init__(
        self,
        settings: Settings,
        live_maps: LiveMaps,
        feed: MapFeed,
        on_fatal: Callable[[BaseException], None] | None = None,
        transactional_id: str | None = None,
    ) -> None:
        self.counters: FrontCounters = FrontCounters()
        super().__init__(settings, self.counters, on_fatal, transactional_id)
        self.live_maps = live_maps
        self.feed = feed
        self.sampler = LocalSampler(
            settings.local_sampler_entries,
            settings.policy.min_distinct_values,
            resend_after=settings.policy.rare_after + settings.policy.retry_after,
        )
        self.auditing = AuditForwarder(
            AuditRule(settings.audit_share, str(settings.learn.seed)),
            settings.local_sampler_entries,
        )
        self._packs: SamplePacks | None = None
        self._next_count_flush = 0.0
        self.key_check = (
            DomainKeyCheck(self.input_topic, settings.partitions)
            if settings.domain_keyed_input
            else None
        )
        """With input keyed by domain: the check of each input's key and partition
        against its domain (:mod:`streams.front.keycheck`)."""
        self.owned_maps: OwnedPartitions | None = None
        """With input keyed by domain: the maps partitions the feed follows, those of the
        input partitions assigned (:mod:`streams.front.ownership`)."""
        if settings.domain_keyed_input:
            if not feed.partitioned:
                raise ValueError("with keyed input, the front needs a partitioned map feed")
            self.owned_maps = OwnedPartitions(incremental=False)
        self.restoring: dict[int, Restore] = {}
        """Input partitions paused until their maps partition is restored."""
        self.paused: set[int] = set()
        """Input partitions paused and not resumed since. librdkafka keeps a partition's
        pause across a rebalance that revokes and assigns it again (librdkafka#1849), so
        one whose maps were restored while it was not assigned must still be resumed."""

    @property
    def group_id(self) -> str:
        return f"{self.settings.app_id}-canonicalizer"

    @property
    def input_topic(self) -> str:
        return self.settings.front_input_topic

    def _ready(self) -> bool:
        return self.feed.wait_ready(0.5)

    def _configured(self, config: dict[str, Any]) -> None:
        if self.owned_maps is not None:
            self.owned_maps.incremental = incremental_assignment(config)

    def _prepare(self, consumer: Consumer) -> None:
        settings = self.settings
        metadata = consumer.list_topics(settings.topics.samples, timeout=30)
        self._packs = SamplePacks(len(metadata.topics[settings.topics.samples].partitions))
        if self.key_check is not None:
            topic = self.input_topic
            found = consumer.list_topics(topic, timeout=30).topics[topic]
            self.key_check.set_partitions(len(found.partitions))
        self._next_count_flush = time.monotonic() + COUNT_FLUSH_SECONDS

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
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
            self.paused.update(p.partition for p in waiting)
            log.info(
                "canonicalizer: partitions %s wait for their maps to be restored",
                sorted(p.partition for p in waiting),
            )
        still_paused = [
            p
            for p in partitions
            if p.partition in self.paused and p.partition not in self.restoring
        ]
        if still_paused:
            self._resume(consumer, still_paused)

    def _move_maps(self, moves: Moves) -> None:
        if moves.give_up:
            self.feed.unfollow(moves.give_up)
            for partition in moves.give_up:
                self.restoring.pop(partition, None)
        if moves.take or moves.first:
            self.restoring.update(self.feed.follow(moves.take))

    def _before_consume(self, consumer: Consumer) -> None:
        if self.restoring:
            self._resume_restored(consumer)

    def _resume_restored(self, consumer: Consumer) -> None:
        """Resume the input partitions whose maps are restored."""
        restored = [p for p, restore in self.restoring.items() if restore.done.is_set()]
        if not restored:
            return
        for partition in restored:
            del self.restoring[partition]
        topic = self.input_topic
        assigned = {p.partition for p in consumer.assignment() if p.topic == topic}
        resumed = [TopicPartition(topic, p) for p in sorted(restored) if p in assigned]
        if resumed:
            self._resume(consumer, resumed)

    def _resume(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Resume ``partitions``, paused since they were assigned, from their committed
        offsets: a pause right after the assignment can make librdkafka drop the
        assignment's start, and the partition then never fetches (librdkafka#2190); a
        seek starts it again. Nothing of them was read while they were paused."""
        consumer.resume(partitions)
        self.paused.difference_update(p.partition for p in partitions)
        try:
            for committed in consumer.committed(partitions, RESUME_SEEK_SECONDS):
                offset = committed.offset if committed.offset >= 0 else OFFSET_BEGINNING
                consumer.seek(TopicPartition(committed.topic, committed.partition, offset))
        except KafkaException as error:
            log.warning(
                "canonicalizer: partitions %s resumed without a seek to their committed "
                "offsets (%s)",
                [p.partition for p in partitions],
                error,
            )
        log.info(
            "canonicalizer: partitions %s resumed, their maps restored",
            [p.partition for p in partitions],
        )

    def _revoked(self, partitions: list[TopicPartition]) -> None:
        if self.owned_maps is None:
            return
        if self.leaving:
            self._move_maps(self.owned_maps.left())
        else:
            self._move_maps(self.owned_maps.revoked(p.partition for p in partitions))

    def _periodic_due(self, now: float) -> bool:
        return now >= self._next_count_flush

    def _process_batch(
        self, messages: list[Message], producer: Producer, now: float
    ) -> dict[tuple[str, int], int]:
        offsets = self._process(messages, producer)
        if now >= self._next_count_flush:
            self._forward_counts()
            self._next_count_flush = now + COUNT_FLUSH_SECONDS
        self._send_samples(producer)
        return offsets

    def _report(self, per_second: float) -> None:
        counters = self.counters
        log.info(
            "canonicalizer: %d in (%.0f/s), %d learned, %d provisional, "
            "%d dead-lettered, %d samples forwarded, %d domain maps; "
            "seconds consuming %.1f, processing %.1f, delivering %.1f",
            counters.consumed,
            per_second,
            counters.learned,
            counters.provisional,
            counters.dead,
            counters.forwarded,
            len(self.live_maps),
            counters.consume_seconds,
            counters.process_seconds,
            counters.deliver_seconds,
        )

    def _report_stopped(self) -> None:
        log.info(
            "canonicalizer stopped after %d messages (%d learned, %d provisional, "
            "%d dead-lettered)",
            self.counters.consumed,
            self.counters.learned,
            self.counters.provisional,
            self.counters.dead,
        )

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

    def _dead_letter(self, producer: Producer, message: Message, reason: str) -> None:
        """Dead-letter ``message``, naming where it was read: for a record of the
        repartition hop, the original input its header names."""
        source = Source.from_headers(message.headers()) if self.settings.repartition_input else None
        if source is None:
            timestamp_type, timestamp = message.timestamp()
            source = Source(
                message.topic() or "",
                message.partition() or 0,
                message.offset() or 0,
                timestamp if timestamp_type else None,
            )
        record = DeadLetter.of(
            reason,
            message.value(),
            message.key(),
            source,
            "canonicalize",
            self.settings.topic_max_message_bytes // 2,
        )
        produce(producer, self.settings.topics.dlq, record.to_bytes(), message.key() or b"")

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
