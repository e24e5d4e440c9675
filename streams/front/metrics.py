"""The canonicalizer front's metrics, collected in its child process.

The front counts in plain integers (:class:`~streams.front.loop.FrontCounters`); the collector
reads them when asked, librdkafka's statistics callback (once a second) gives the lag of
each partition, and a histogram takes one observation per batch: nothing is added to the
per-URL path. A thread sends the collected families to the worker process every
``SNAPSHOT_SECONDS`` over a pipe, where :class:`streams.ops.metrics.FrontSnapshots` serves
the latest on the worker's ``/metrics``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping
from multiprocessing.connection import Connection
from typing import Any

import orjson
from prometheus_client import CollectorRegistry, Histogram, ProcessCollector
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from streams.front.keycheck import KEY, PARTITION
from streams.front.loop import CanonicalizerFront
from streams.front.repartition import DomainRepartitioner
from streams.front.stage import Stage
from streams.maps.feed import RestoreTotals
from streams.maps.live import FRONT_PROCESS, LiveMaps

log = logging.getLogger(__name__)

SNAPSHOT_SECONDS = 1.0
STATISTICS_INTERVAL_MS = 1000
BATCH_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def lag_by_partition(
    statistics: dict[str, Any], previous: Mapping[tuple[str, int], int] | None = None
) -> dict[tuple[str, int], int]:
    """(topic, partition) -> messages between the committed offset and the end, for the
    partitions this consumer holds, from librdkafka's statistics document.

    librdkafka reports -1 while it cannot tell (no end offset fetched yet, or no offset
    committed or stored since an assignment); a held partition then keeps its ``previous``
    figure, so its series has no gaps."""
    previous = previous or {}
    lag: dict[tuple[str, int], int] = {}
    for topic, info in statistics.get("topics", {}).items():
        for number, partition in info.get("partitions", {}).items():
            key = (topic, int(number))
            if key[1] < 0 or partition.get("fetch_state") == "none":
                continue
            value = partition.get("consumer_lag", -1)
            if value >= 0:
                lag[key] = value
            elif key in previous:
                lag[key] = previous[key]
    return lag


class ConsumerLag:
    """The lag of one stage's consumer, from its statistics callback."""

    def __init__(self, stage: Stage) -> None:
        self.name = stage.name
        self.lag: dict[tuple[str, int], int] = {}
        stage.consumer_options = {
            "statistics.interval.ms": STATISTICS_INTERVAL_MS,
            "stats_cb": self.on_statistics,
        }

    def on_statistics(self, document: str) -> None:
        try:
            self.lag = lag_by_partition(orjson.loads(document), self.lag)
        except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError) as error:
            log.warning("%s: unreadable consumer statistics: %s", self.name, error)


class FrontCollector(Collector):
    """The front's figures, and the repartition hop's when it runs."""

    def __init__(self, front: CanonicalizerFront, hop: DomainRepartitioner | None = None) -> None:
        self.front = front
        self.hop = hop
        self.lags = [ConsumerLag(front)] + ([ConsumerLag(hop)] if hop is not None else [])
        self.batch_seconds = Histogram(
            "miqps_front_batch_seconds",
            "Seconds from a batch consumed to its outputs delivered and offsets stored",
            buckets=BATCH_BUCKETS,
            registry=None,
        )
        front.observe_batch = self.batch_seconds.observe

    def collect(self) -> Iterator[Metric]:
        counters = self.front.counters
        yield labelled_counter(
            "miqps_urls",
            "URLs the front took in, by outcome",
            "status",
            {
                "learned": counters.learned,
                "provisional": counters.provisional,
                "dead_lettered": counters.dead,
            },
        )
        yield CounterMetricFamily(
            "miqps_urls_consumed", "Messages the front consumed", value=counters.consumed
        )
        yield CounterMetricFamily(
            "miqps_samples_forwarded",
            "Samples of unlearned or due patterns the front forwarded to the pattern-stats agents",
            value=counters.forwarded,
        )
        yield CounterMetricFamily(
            "miqps_front_batches", "Batches the front completed", value=counters.batches
        )
        yield CounterMetricFamily(
            "miqps_front_bugs", "Batches a bug of ours failed", value=counters.bugs
        )
        yield CounterMetricFamily(
            "miqps_front_client_restarts",
            "Times the front replaced its Kafka clients after a fatal client error",
            value=counters.client_restarts,
        )
        yield CounterMetricFamily(
            "miqps_front_aborted_transactions",
            "Transactions of the front aborted after a record or the commit failed (exactly "
            "once); their inputs were read again",
            value=counters.aborted_transactions,
        )
        key_check = self.front.key_check
        yield labelled_counter(
            "miqps_input_key_mismatches",
            "Inputs not keyed by their URL's domain (reason key) or not in that key's murmur2 "
            "partition (reason partition), with MIQPS_INPUT_KEYED_BY_DOMAIN set; each was "
            "canonicalized all the same",
            "reason",
            key_check.mismatches if key_check is not None else dict.fromkeys((KEY, PARTITION), 0),
        )
        yield labelled_counter(
            "miqps_front_busy_seconds",
            "Seconds the front spent, by phase",
            "phase",
            {
                "consume": counters.consume_seconds,
                "process": counters.process_seconds,
                "deliver": counters.deliver_seconds,
            },
        )
        yield GaugeMetricFamily(
            "miqps_front_domains_live",
            "Domains with a live map in the front (with MIQPS_INPUT_KEYED_BY_DOMAIN, those of "
            "its input partitions)",
            value=len(self.front.live_maps),
        )
        feed = self.front.feed
        if self.front.owned_maps is not None:
            yield from restore_families(
                FRONT_PROCESS, len(feed.followed), len(self.front.restoring), feed.totals
            )
        if self.hop is not None:
            hop = self.hop.counters
            yield labelled_counter(
                "miqps_repartitioned",
                "Inputs the repartition hop (MIQPS_REPARTITION_INPUT) wrote to the topic keyed "
                "by domain, by outcome: rekeyed (under their URL's domain) or unreadable (no "
                "readable URL: under their own key, for the front to dead-letter)",
                "outcome",
                {"rekeyed": hop.rekeyed, "unreadable": hop.unreadable},
            )
        yield consumer_lag(
            {
                (lag.name, topic, partition): value
                for lag in self.lags
                for (topic, partition), value in lag.lag.items()
            }
        )
        yield from self.batch_seconds.collect()


class MapsHeldCollector(Collector):
    """``miqps_maps_held``: the domains whose map one process of the worker holds in
    memory, compiled in its canonicalizer or as a live-map record; ``miqps_maps_read``:
    the maps it read from its store for a domain it did not hold."""

    def __init__(self, live_maps: LiveMaps, process: str) -> None:
        self.live_maps = live_maps
        self.process = process

    def collect(self) -> Iterator[Metric]:
        held = self.live_maps.held()
        family = GaugeMetricFamily(
            "miqps_maps_held",
            "Domains whose map a process of the worker holds in memory (the front or the "
            "worker), compiled in its canonicalizer or as a live-map record (version and "
            "re-verification times)",
            labels=["process", "form"],
        )
        family.add_metric([self.process, "compiled"], held.compiled)
        family.add_metric([self.process, "live"], held.live)
        yield family
        read = CounterMetricFamily(
            "miqps_maps_read",
            "Maps a process of the worker read from its store because a URL of a domain "
            "whose map it did not hold came (a cold domain): with miqps_maps_held at "
            "MIQPS_MAPS_CACHE_DOMAINS, a rate near the URLs' says the bound is too small",
            labels=["process"],
        )
        read.add_metric([self.process], held.read)
        yield read


def restore_families(
    process: str, owned: int, restoring: int, totals: RestoreTotals
) -> Iterator[Metric]:
    """The maps partitions one process of a worker follows (``process``: the front with
    MIQPS_INPUT_KEYED_BY_DOMAIN, or the worker's Faust process), and what restoring them
    read."""
    families: tuple[GaugeMetricFamily | CounterMetricFamily, ...] = (
        GaugeMetricFamily(
            "miqps_maps_partitions_owned",
            "Maps partitions a process of the worker follows: the front, those of its input "
            "partitions; the worker, those of its agents' partitions",
            labels=["process"],
        ),
        GaugeMetricFamily(
            "miqps_maps_partitions_restoring",
            "Maps partitions being restored: the front's input partitions paused until "
            "then; the worker's agents wait for them",
            labels=["process"],
        ),
        CounterMetricFamily(
            "miqps_maps_restores",
            "Maps partitions a process of the worker restored when it took them (read from "
            "their beginning, or from the offset its kept store noted)",
            labels=["process"],
        ),
        CounterMetricFamily(
            "miqps_maps_restore_records",
            "Records of the maps topic a process of the worker read to restore partitions",
            labels=["process"],
        ),
        CounterMetricFamily(
            "miqps_maps_restore_seconds",
            "Seconds a process of the worker's restores of maps partitions took, summed",
            labels=["process"],
        ),
    )
    values = (owned, restoring, totals.partitions, totals.records, totals.seconds)
    for family, figure in zip(families, values, strict=True):
        family.add_metric([process], figure)
        yield family


def labelled_counter(
    name: str, documentation: str, label: str, values: Mapping[str, float]
) -> CounterMetricFamily:
    """A counter family with one sample per value of its one ``label``."""
    family = CounterMetricFamily(name, documentation, labels=[label])
    for key, value in values.items():
        family.add_metric([key], value)
    return family


def consumer_lag(lags: dict[tuple[str, str, int], int]) -> GaugeMetricFamily:
    """The lag family from (consumer, topic, partition) -> messages."""
    family = GaugeMetricFamily(
        "miqps_consumer_lag",
        "Messages in a partition after the consumer's committed offset",
        labels=["consumer", "topic", "partition"],
    )
    for (consumer, topic, partition), lag in sorted(lags.items()):
        family.add_metric([consumer, topic, str(partition)], lag)
    return family


class SnapshotSender:
    """Sends the families of ``registry`` over ``connection`` every ``every`` seconds,
    until stopped or the worker process is gone."""

    def __init__(
        self, registry: CollectorRegistry, connection: Connection, every: float = SNAPSHOT_SECONDS
    ) -> None:
        self.registry = registry
        self.connection = connection
        self.every = every
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="miqps-front-metrics", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(self.every + 1.0)

    def _run(self) -> None:
        while True:
            try:
                self.connection.send(list(self.registry.collect()))
            except (OSError, EOFError):  # the worker process is gone: it will stop us
                return
            if self._stopping.wait(self.every):
                return


def front_exporter(
    front: CanonicalizerFront, connection: Connection, hop: DomainRepartitioner | None = None
) -> SnapshotSender:
    """Instruments ``front`` (and the repartition ``hop``, if any) and returns the
    (unstarted) sender of their metrics."""
    registry = CollectorRegistry()
    registry.register(FrontCollector(front, hop))
    registry.register(MapsHeldCollector(front.live_maps, FRONT_PROCESS))
    ProcessCollector(namespace="miqps_front", registry=registry)
    return SnapshotSender(registry, connection)
