"""Every worker follows the whole compacted ``miqps.maps`` topic into its :class:`LiveMaps`.

Each worker reads every partition from the beginning with its own consumer (no group, no
commits), so every worker sees every map; a restarted worker rebuilds its maps from the
topic before it canonicalizes anything. ``ready`` is set once the topic has been read up to
where it ended when the feed started.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable

import orjson
from confluent_kafka import Consumer

from miqps.maps import DomainMap
from streams.kafka import assign_from_beginning, consumer_config, drop_reached, pending_partitions
from streams.livemaps import LiveMaps
from streams.settings import Settings

log = logging.getLogger(__name__)


class MapFeed:
    def __init__(self, settings: Settings, live_maps: LiveMaps,
                 on_fatal: Callable[[BaseException], None] | None = None) -> None:
        self.settings = settings
        self.live_maps = live_maps
        self.on_fatal = on_fatal
        self.ready = threading.Event()
        self.applied = 0
        self.rejected = 0
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
        consumer = Consumer(consumer_config(
            self.settings, f"{self.settings.app_id}-maps-{uuid.uuid4().hex}",
            **{"enable.auto.commit": False, "fetch.wait.max.ms": 100},
        ))
        try:
            partitions = assign_from_beginning(consumer, topic, 30.0)
            catching_up = pending_partitions(consumer, partitions, 30.0)
            started = time.monotonic()
            if not catching_up:
                self._set_ready(started)
            while not self._stopping.is_set():
                messages = consumer.consume(500, 0.2)
                for message in messages:
                    if message.error() is not None:
                        log.warning("map feed: %s", message.error())
                        continue
                    self._apply(message.key(), message.value())
                    if catching_up:
                        partition, offset = message.partition() or 0, message.offset() or 0
                        end = catching_up.get(partition)
                        if end is not None and offset + 1 >= end:
                            del catching_up[partition]
                            if not catching_up:
                                self._set_ready(started)
                if catching_up and not messages:
                    drop_reached(consumer, topic, catching_up)
                    if not catching_up:
                        self._set_ready(started)
        finally:
            consumer.close()

    def _set_ready(self, started: float) -> None:
        log.info("map feed: %d domain maps live after %.1fs", len(self.live_maps),
                 time.monotonic() - started)
        self.ready.set()

    def _apply(self, key: bytes | None, value: bytes | None) -> None:
        if value is None:
            if key is not None:
                self.live_maps.remove(key.decode("utf-8", "replace"))
            return
        try:
            domain_map = DomainMap.from_json(orjson.loads(value))
        except (ValueError, KeyError, TypeError) as error:
            self.rejected += 1
            log.warning("map feed: skipped a record that is not a MIQPS map: %s", error)
            return
        if self.live_maps.apply(domain_map, value):
            self.applied += 1
            if self.ready.is_set():
                log.info("map live: %s v%d (%d patterns)", domain_map.domain,
                         domain_map.version, len(domain_map.patterns))
