"""Every worker follows the whole compacted ``miqps.maps`` topic into its :class:`LiveMaps`.

Each worker reads every partition from the beginning with its own consumer (no group, no
commits), so every worker sees every map; a restarted worker rebuilds its maps from the
topic before it canonicalizes anything. ``ready`` is set once the topic has been read up to
where it ended when the feed started.

Every record is validated (``miqps.maps.parse_map``, and its key must be the map's domain).
An invalid one is dead-lettered, in the DLQ format with its reason, and the last valid map
of its domain stays live. Each feed that reads it dead-letters it, so a record can be there
more than once (once per worker process and restart): its topic, partition and offset
identify it.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaException, Message, Producer

from miqps.maps import InvalidMap, parse_map
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


class MapFeed:
    def __init__(
        self,
        settings: Settings,
        live_maps: LiveMaps,
        on_fatal: Callable[[BaseException], None] | None = None,
        dead_letter: SendDeadLetter | None = None,
    ) -> None:
        """``dead_letter`` is where invalid records go; by default a producer to the DLQ
        topic, made when the feed starts."""
        self.settings = settings
        self.live_maps = live_maps
        self.on_fatal = on_fatal
        self.dead_letter = dead_letter
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
                self.live_maps.remove(key.decode("utf-8", "replace"))
            return
        try:
            if key is None:
                raise InvalidMap("domain key", "a record without a key")
            try:
                domain = key.decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidMap("domain key", "a key that is not UTF-8") from None
            domain_map = parse_map(value, key=domain)
        except InvalidMap as error:
            self._reject(
                error.at(f"{source.topic}[{source.partition}]@{source.offset}"), key, value, source
            )
            return
        if self.live_maps.apply(domain_map, value) and self.ready.is_set():
            log.info(
                "map live: %s v%d (%d patterns)",
                domain_map.domain,
                domain_map.version,
                len(domain_map.patterns),
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
