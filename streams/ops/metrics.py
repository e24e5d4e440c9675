"""Prometheus metrics of a worker, at ``/metrics`` on ``MIQPS_METRICS_PORT``.

Every figure is read at scrape time from state the worker keeps anyway: the live maps, the
probing agent's scheduler, acknowledgements and fetch statistics, Faust's offsets, the
state directory, and the front's snapshot. Nothing is counted per URL. What lives on the
event loop is read on the event loop (:meth:`AgentCollector.collect` waits for it), so the
HTTP thread never walks a structure the loop is changing.

The canonicalizer front runs in a child process; its metrics arrive every second over a
pipe (:mod:`streams.front.metrics`) and are served here with the others, so one port covers
the whole worker. The server listens on every interface: in a container, Prometheus
scrapes it from another host.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sized
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Protocol
from wsgiref.simple_server import WSGIServer

from faust.exceptions import ConsumerNotStarted
from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from miqps.audit import Audit
from miqps.fetch import FetchStats
from miqps.native import CanonicalizerPath, canonicalizer_path
from miqps.observations import RecalledPages
from miqps.politeness import RobotsStatus
from streams.front.metrics import (
    MapsHeldCollector,
    consumer_lag,
    labelled_counter,
    restore_families,
)
from streams.maps.feed import RestoreTotals
from streams.maps.live import LIVE_MAPS_FOLDER, WORKER_PROCESS, LiveMaps
from streams.messages import UNDECIDED_CAUSES, MapUpdateRecord
from streams.settings import Settings

log = logging.getLogger(__name__)

LISTEN_ADDRESS = "0.0.0.0"
MAX_HOST_LABELS = 20
OTHER_HOSTS = "_other"
LOOP_READ_SECONDS = 2.0
FRONT_SILENT_SECONDS = 5.0
_TABLE_DIRECTORY = re.compile(r"^(?P<table>.+)-\d+\.db$")


class Scheduler(Protocol):
    def load(self) -> tuple[int, int]: ...


@dataclass(slots=True)
class ProbeAgentState:
    """What the probing agent exposes: its scheduler, its unacknowledged requests (the
    ``len`` of its :class:`~streams.agents.acks.OrderedAcks`) and its fetcher's statistics."""

    scheduler: Scheduler
    unacknowledged: Callable[[], int]
    fetch_stats: FetchStats
    recalled: RecalledPages | None = None


@dataclass(slots=True)
class MapUpdateCounts:
    """Audit records the probing agent published, by verdict: ``accepted`` (live),
    ``rejected`` (by the anomaly gate) and ``undecided`` (unreachable, walled, no samples
    or a failed run)."""

    by_verdict: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(("accepted", "rejected", "undecided"), 0)
    )
    undecided_by_cause: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(UNDECIDED_CAUSES.values(), 0)
    )

    def count(self, audits: Iterable[MapUpdateRecord]) -> None:
        for audit in audits:
            if audit.accepted:
                verdict = "accepted"
            elif audit.kept_after is not None:
                verdict = "rejected"
            else:
                verdict = "undecided"
                cause = UNDECIDED_CAUSES.get(audit.reason, "other")
                self.undecided_by_cause[cause] = self.undecided_by_cause.get(cause, 0) + 1
            self.by_verdict[verdict] += 1


@dataclass(slots=True)
class ObservationCounts:
    """Observations the observing agent read, by outcome: ``kept`` (held as evidence),
    ``no evidence`` (a page a probe would find inconclusive: 429 or 5xx, an interstitial,
    a shell, a body over the cap) and ``invalid`` (dead-lettered); and the pages held.

    And the restores of its partitions (:mod:`streams.agents.observe_restore`): records
    read again, by the same outcomes (``invalid`` ones counted, not dead-lettered again),
    partitions restored, the seconds they took, and the partitions being restored."""

    pages: Sized
    by_outcome: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(("kept", "no evidence", "invalid"), 0)
    )
    restored: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(("kept", "no evidence", "invalid"), 0)
    )
    restores: int = 0
    restore_seconds: float = 0.0
    restoring: Callable[[], int] = lambda: 0

    def families(self) -> list[Metric]:
        held = GaugeMetricFamily(
            "miqps_observed_pages",
            "Observed pages the probing worker holds as evidence (MIQPS_OBSERVED_PAGES at most)",
            value=len(self.pages),
        )
        return [
            labelled_counter(
                "miqps_observations",
                "Observations (pages a crawler fetched) the probing worker read, by outcome",
                "outcome",
                self.by_outcome,
            ),
            held,
            labelled_counter(
                "miqps_observations_restored",
                "Observations read again by the restores of the observing agent's partitions, "
                "by outcome (invalid ones are not dead-lettered again)",
                "outcome",
                self.restored,
            ),
            CounterMetricFamily(
                "miqps_observations_restores",
                "Partitions of the observations topic restored: read from their beginning up "
                "to the committed offset when the observing agent was assigned them",
                value=self.restores,
            ),
            CounterMetricFamily(
                "miqps_observations_restore_seconds",
                "Seconds the restores of observations partitions took, summed",
                value=self.restore_seconds,
            ),
            GaugeMetricFamily(
                "miqps_observations_partitions_restoring",
                "Partitions of the observations topic being restored",
                value=self.restoring(),
            ),
        ]


@dataclass(slots=True)
class AuditCounts:
    """What the probing agent's audits did: requests taken, items compared (``audited``),
    items that showed nothing conclusive, changes not confirmed, parameters restored (per
    path shape) and fetches."""

    requests: int = 0
    by_outcome: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(("audited", "inconclusive", "unconfirmed"), 0)
    )
    restored: int = 0
    fetches: int = 0

    def count(self, audit: Audit | None, requests: int) -> None:
        self.requests += requests
        if audit is None:
            return
        self.by_outcome["audited"] += audit.audited
        self.by_outcome["inconclusive"] += audit.inconclusive
        self.by_outcome["unconfirmed"] += audit.unconfirmed
        if audit.published is not None:
            self.restored += len(audit.restored)
        self.fetches += audit.update.fetches

    def families(self) -> Iterator[Metric]:
        yield CounterMetricFamily(
            "miqps_audit_requests",
            "Audit requests (URLs of learned patterns that drop parameters) the probing agent took",
            value=self.requests,
        )
        yield labelled_counter(
            "miqps_audit_items",
            "Items audited: compared (audited), evidence of nothing (inconclusive, not "
            "counted), or a change the confirming fetches did not show again (unconfirmed)",
            "outcome",
            self.by_outcome,
        )
        yield CounterMetricFamily(
            "miqps_audit_restored",
            "Dropped parameters an audit restored (per path shape), published",
            value=self.restored,
        )
        yield CounterMetricFamily(
            "miqps_audit_fetches", "HTTP requests sent by audits", value=self.fetches
        )


class HostLabels:
    """Per-host label values, bounded: the first ``limit`` hosts that show up (largest
    first) keep a label of their own, every later host is summed under ``_other``."""

    def __init__(self, limit: int = MAX_HOST_LABELS) -> None:
        self.limit = limit
        self._named: set[str] = set()

    def fold(self, by_host: Mapping[str, float]) -> dict[str, float]:
        for host, _ in sorted(by_host.items(), key=lambda item: -item[1]):
            if len(self._named) >= self.limit:
                break
            self._named.add(host)
        folded = {host: 0.0 for host in self._named}
        other = 0.0
        for host, value in by_host.items():
            if host in folded:
                folded[host] = value
            else:
                other += value
        if other:
            folded[OTHER_HOSTS] = other
        return folded


class LiveMapsCollector(Collector):
    def __init__(self, live_maps: LiveMaps, clock: Callable[[], float] = time.time) -> None:
        self.live_maps = live_maps
        self.clock = clock

    def collect(self) -> Iterator[Metric]:
        summary = self.live_maps.summary()
        yield GaugeMetricFamily(
            "miqps_domains_live", "Domains with a live map", value=summary.domains
        )
        yield GaugeMetricFamily(
            "miqps_patterns_live", "Patterns decided in the live maps", value=summary.patterns
        )
        if summary.oldest_update is not None:
            yield GaugeMetricFamily(
                "miqps_oldest_map_age_seconds",
                "Seconds since the least recently updated live map was updated",
                value=max(0.0, self.clock() - summary.oldest_update),
            )


def state_bytes(state_dir: Path) -> dict[str, int]:
    """Bytes on disk under ``state_dir``, by table (a Faust table's partitions are
    ``<table>-<partition>.db`` directories; the live maps of the worker's processes are
    ``live-maps``); anything else counts as ``other``."""
    sizes: dict[str, int] = {}
    for root, _, files in os.walk(state_dir):
        table = "other"
        parts = Path(root).relative_to(state_dir).parts
        if parts[:1] == (LIVE_MAPS_FOLDER,):
            table = LIVE_MAPS_FOLDER
            parts = ()
        for part in parts:
            found = _TABLE_DIRECTORY.match(part)
            if found:
                table = found["table"]
                break
        for name in files:
            try:
                size = (Path(root) / name).stat().st_size
            except OSError:  # RocksDB removed it since the walk listed it
                continue
            sizes[table] = sizes.get(table, 0) + size
    return sizes


class StateCollector(Collector):
    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "miqps_state_bytes", "Bytes of RocksDB state on disk, by table", labels=["table"]
        )
        for table, size in sorted(state_bytes(self.state_dir).items()):
            family.add_metric([table], size)
        yield family


class AgentCollector(Collector):
    """The Faust side: the agents' consumer lag and the probing agent's work, read on the
    event loop."""

    def __init__(self, agent_topics: Mapping[str, str]) -> None:
        self.agent_topics = dict(agent_topics)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.app: Any = None
        self.probing: ProbeAgentState | None = None
        self.map_updates = MapUpdateCounts()
        self.audits = AuditCounts()
        self.observations: ObservationCounts | None = None
        self.hosts = HostLabels()

    def collect(self) -> Iterator[Metric]:
        loop = self.loop
        if loop is None or not loop.is_running():
            return
        future = asyncio.run_coroutine_threadsafe(self._on_loop(), loop)
        try:
            families = future.result(LOOP_READ_SECONDS)
        except FutureTimeout:
            future.cancel()
            log.warning(
                "metrics: the event loop did not answer within %gs; agent metrics "
                "left out of this scrape",
                LOOP_READ_SECONDS,
            )
            return
        yield from families

    async def _on_loop(self) -> list[Metric]:
        families: list[Metric] = [self._lag()]
        if self.probing is not None:
            families.extend(self._probing(self.probing))
        families.append(
            labelled_counter(
                "miqps_map_updates",
                "Map update records (one per pattern) the probing agent "
                "published, by verdict of the anomaly gate",
                "verdict",
                self.map_updates.by_verdict,
            )
        )
        families.append(
            labelled_counter(
                "miqps_patterns_undecided",
                "Patterns the probing agent left undecided, by cause: the pages are "
                "shells or interstitials, robots.txt disallowed them or does not answer, the "
                "domain opted out or asked for too long a pause, every fetch failed, ...",
                "cause",
                self.map_updates.undecided_by_cause,
            )
        )
        families.extend(self.audits.families())
        if self.observations is not None:
            families.extend(self.observations.families())
        return families

    def _lag(self) -> GaugeMetricFamily:
        lags: dict[tuple[str, str, int], int] = {}
        app = self.app
        if app is not None:
            try:
                assigned = app.consumer.assignment()
            except ConsumerNotStarted:  # a scrape while the worker starts
                assigned = set()
            monitor = app.monitor
            for tp in assigned:
                agent = self.agent_topics.get(tp.topic)
                end = monitor.tp_end_offsets.get(tp)
                if agent is None or end is None:
                    continue
                committed = monitor.tp_committed_offsets.get(tp)
                if committed is None:
                    read = monitor.tp_read_offsets.get(tp)
                    committed = read + 1 if read is not None else None
                if committed is not None:
                    lags[(agent, tp.topic, tp.partition)] = max(0, end - committed)
        return consumer_lag(lags)

    def _probing(self, probing: ProbeAgentState) -> Iterator[Metric]:
        pending, domains = probing.scheduler.load()
        yield GaugeMetricFamily(
            "miqps_probe_requests_pending",
            "Probe requests waiting for their domain's next run",
            value=pending,
        )
        yield GaugeMetricFamily(
            "miqps_probe_requests_in_flight",
            "Probe requests taken in, not waiting and not "
            "acknowledged yet (being learned, or behind an earlier one)",
            value=max(0, probing.unacknowledged() - pending),
        )
        yield GaugeMetricFamily(
            "miqps_probe_domains_in_flight",
            "Domains with a learning run due or under way",
            value=domains,
        )
        if probing.recalled is not None:
            yield GaugeMetricFamily(
                "miqps_recalled_pages",
                "Pages the probing worker fetched, held for its domains' next learning runs "
                "(MIQPS_RECALLED_PAGES at most, MIQPS_RECALL_SECONDS each)",
                value=len(probing.recalled),
            )
            yield CounterMetricFamily(
                "miqps_recalled_takes",
                "First takes of learning runs served by pages the worker fetched before",
                value=probing.recalled.served,
            )
        stats = probing.fetch_stats
        yield labelled_counter(
            "miqps_fetches",
            "Probe fetches by outcome: ok, inconclusive (a page no prober "
            "could judge), refused (address guard), failed, retried (an attempt tried again)",
            "outcome",
            {
                "ok": stats.fetched - stats.unjudgeable,
                "inconclusive": stats.unjudgeable,
                "refused": stats.refused,
                "failed": stats.failed,
                "retried": stats.retries,
            },
        )
        yield CounterMetricFamily(
            "miqps_fetch_requests", "HTTP requests sent by probes", value=stats.requests
        )
        yield labelled_counter(
            "miqps_politeness_wait_seconds",
            "Seconds probe fetches waited for a host's "
            f"concurrency slot and rate limit, by host (at most {MAX_HOST_LABELS} hosts, "
            f"the rest as {OTHER_HOSTS})",
            "host",
            dict(sorted(self.hosts.fold(stats.politeness_wait_seconds).items())),
        )
        yield CounterMetricFamily(
            "miqps_probe_disallowed",
            "Probe URLs not fetched because robots.txt disallows them or does not answer",
            value=stats.disallowed,
        )
        yield CounterMetricFamily(
            "miqps_probe_deferred_seconds",
            "Seconds hosts were paused or deferred at their request (Retry-After)",
            value=stats.deferred_seconds,
        )
        yield labelled_counter(
            "miqps_robots_fetch",
            "robots.txt fetches by result: rules, none (4xx: everything allowed), "
            "unreachable (nothing allowed until it answers)",
            "result",
            {str(status): stats.robots_fetches[status] for status in RobotsStatus},
        )
        delays = GaugeMetricFamily(
            "miqps_probe_delay_seconds",
            "Current seconds between request starts to a host (its pace: the rate, its "
            f"Crawl-delay, its latency), by host (at most {MAX_HOST_LABELS} hosts)",
            labels=["host"],
        )
        for host, delay in sorted(self.hosts.fold(stats.delay_by_host).items()):
            if host in stats.delay_by_host:
                delays.add_metric([host], delay)
        yield delays
        robots = GaugeMetricFamily(
            "miqps_robots_status",
            "1 for each host's robots.txt status as last fetched: rules, none (4xx: everything "
            f"allowed) or unreachable (nothing allowed), by host (at most {MAX_HOST_LABELS} hosts)",
            labels=["host", "status"],
        )
        for host in sorted(self.hosts.fold(dict.fromkeys(stats.robots_by_host, 1.0))):
            if host in stats.robots_by_host:  # the named hosts of every metric: not all fetched it
                robots.add_metric([host, stats.robots_by_host[host]], 1.0)
        yield robots


class FrontSnapshots(Collector):
    """The latest families the front process sent, received by a thread of its own."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self._latest: list[Metric] = []
        self._received_at: float | None = None
        self._thread = threading.Thread(
            target=self._receive, name="miqps-front-metrics", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def _receive(self) -> None:
        while True:
            try:
                families = self.connection.recv()
            except (EOFError, OSError):  # the front process ended
                return
            self._latest = families
            self._received_at = time.monotonic()

    def collect(self) -> Iterator[Metric]:
        received = self._received_at
        fresh = received is not None and time.monotonic() - received < FRONT_SILENT_SECONDS
        yield GaugeMetricFamily(
            "miqps_front_up",
            f"1 if the front process sent its metrics in the last {FRONT_SILENT_SECONDS:g}s",
            value=1 if fresh else 0,
        )
        yield from self._latest


class FrontReplacements(Collector):
    """How many times the worker replaced its front process, by why."""

    def __init__(self, replacements: Mapping[str, int]) -> None:
        self.replacements = replacements

    def collect(self) -> Iterator[Metric]:
        yield labelled_counter(
            "miqps_front_replacements",
            "Canonicalizer front processes replaced by the worker: stuck (exited after a "
            "Kafka client call did not return) or frozen (no heartbeat)",
            "reason",
            dict(self.replacements),
        )


class BuildInfo(Collector):
    """``miqps_build_info``: the installed version and the canonicalizer's per-URL path,
    with why (:func:`miqps.native.canonicalizer_path`). The front's child process has this
    process's environment and packages, so the same rule gives it the same path."""

    def __init__(self, path: CanonicalizerPath | None = None) -> None:
        self.path = path or canonicalizer_path()
        try:
            self.version = version("miqps")
        except PackageNotFoundError:  # run from a source tree that is not installed
            self.version = "unknown"

    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            "miqps_build_info",
            "1, labelled with the miqps version and the canonicalizer's per-URL path: "
            "compiled (miqps_native) or python, and why",
            labels=["version", "canonicalizer_path", "reason"],
        )
        info.add_metric([self.version, self.path.name, self.path.reason], 1)
        yield info


class MergedCollector(Collector):
    """The families of ``sources``, those of the same name merged into one (the front and
    the agents both report ``miqps_consumer_lag``)."""

    def __init__(self, sources: list[Collector]) -> None:
        self.sources = sources

    def collect(self) -> Iterator[Metric]:
        merged: dict[str, Metric] = {}
        for source in self.sources:
            for family in source.collect():
                into = merged.get(family.name)
                if into is None:
                    into = merged[family.name] = Metric(
                        family.name, family.documentation, family.type, family.unit
                    )
                into.samples.extend(family.samples)
        yield from merged.values()


class OwnedMapsState(Protocol):
    @property
    def restores(self) -> Sized: ...

    def restoring(self) -> int: ...


class OwnedMapsCollector(Collector):
    """The maps partitions the worker's Faust process follows, for its agents'
    partitions (:class:`~streams.worker.ownedmaps.OwnedMaps`), and what restoring them
    read."""

    def __init__(self, owned: OwnedMapsState, totals: RestoreTotals) -> None:
        self.owned = owned
        self.totals = totals

    def collect(self) -> Iterator[Metric]:
        yield from restore_families(
            WORKER_PROCESS, len(self.owned.restores), self.owned.restoring(), self.totals
        )


class WorkerMetrics:
    """The metrics of one worker process; served once :meth:`start` is called, if
    ``MIQPS_METRICS_PORT`` is set."""

    def __init__(self, settings: Settings, live_maps: LiveMaps) -> None:
        self.settings = settings
        topics = settings.topics
        self.agents = AgentCollector(
            {
                topics.samples: "pattern-stats",
                topics.probe_requests: "probe",
                topics.observations: "observe",
            }
        )
        self._sources: list[Collector] = [
            BuildInfo(),
            LiveMapsCollector(live_maps),
            MapsHeldCollector(live_maps, WORKER_PROCESS),
            StateCollector(settings.state_dir),
            self.agents,
        ]
        self._server: WSGIServer | None = None

    @property
    def map_updates(self) -> MapUpdateCounts:
        return self.agents.map_updates

    @property
    def audits(self) -> AuditCounts:
        return self.agents.audits

    def follow_app(self, app: Any) -> None:
        """Read the agents' consumer lag from this Faust app's monitor."""
        self.agents.app = app

    def follow_probing(self, probing: ProbeAgentState) -> None:
        self.agents.probing = probing

    def follow_observations(self, pages: Sized) -> ObservationCounts:
        """Count what the observing agent reads into ``pages``."""
        counts = self.agents.observations = ObservationCounts(pages)
        return counts

    def follow_maps(self, owned: OwnedMapsState, totals: RestoreTotals) -> None:
        """Count the maps partitions the Faust process follows, and their restores."""
        self._sources.append(OwnedMapsCollector(owned, totals))

    def follow_front(self, replacements: Mapping[str, int]) -> None:
        """Count the front's replacements (``FrontProcess.replacements``)."""
        self._sources.append(FrontReplacements(replacements))

    def start(self, loop: asyncio.AbstractEventLoop, front: Connection | None) -> None:
        port = self.settings.metrics_port
        if port is None:
            return
        self.agents.loop = loop
        sources = list(self._sources)
        if front is not None:
            snapshots = FrontSnapshots(front)
            snapshots.start()
            sources.append(snapshots)
        registry = CollectorRegistry()
        registry.register(MergedCollector(sources))
        ProcessCollector(namespace="miqps", registry=registry)
        try:
            self._server, _ = start_http_server(port, LISTEN_ADDRESS, registry)
        except OSError as error:
            raise RuntimeError(
                f"MIQPS_METRICS_PORT={port}: cannot serve metrics on "
                f"{LISTEN_ADDRESS}:{port}: {error}"
            ) from error
        log.info("metrics at http://%s:%d/metrics", LISTEN_ADDRESS, port)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
