"""``miqps dashboard``: a live view of a running stream processor in the browser.

A process of its own that only reads Kafka, never a part of the worker: the workers'
two hot loops keep every core they are given, one dashboard sees what every worker
published (a worker sees only its partitions), it runs, restarts and gets upgraded without
touching the stream, and it works with no worker running at all.

It reads, each with a consumer of its own (no group, no commits):

- the compacted ``miqps.maps`` through :class:`~streams.maps.feed.MapFeed` into one
  :class:`~miqps.canonical.Canonicalizer`: the domain pages and *Explain a URL* (the same
  answer as ``miqps canonicalize --json``, from :meth:`Canonicalizer.explain`);
- ``miqps.map-updates`` from the beginning: the feed keeps the last :data:`FEED_SIZE`
  records, and the fetches each run spent are summed per domain;
- a tail of ``urls.canonical`` (at most :data:`TAIL_PER_PARTITION` records back per
  partition, then live) into :class:`miqps.report.ReportBuilder`, the view model of the
  parameter-sprawl report; after :data:`SPRAWL_WINDOW` URLs a fresh builder starts, so its
  memory is bounded;
- the high watermarks of ``urls.raw`` and ``urls.canonical`` once a second: URLs in and out
  per second, with no worker involved.

It serves one page (``streams/ops/assets/dashboard.*``: plain HTML, JS and inline SVG) and a small
JSON API behind it from the standard library's threading HTTP server.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import signal
import sys
import threading
import time
import urllib.request
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Message, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from miqps.canonical import Canonicalizer
from miqps.maps import DomainMap
from miqps.report import Limits, ReportBuilder
from miqps.urls import InvalidURL
from streams.kafka.admin import consumer_config
from streams.maps.feed import MapFeed
from streams.maps.live import LiveMaps
from streams.settings import Settings

log = logging.getLogger(__name__)

DEFAULT_PORT = 8050
WORKER_METRICS_SECONDS = 5.0
FEED_SIZE = 500
SERIES_POINTS = 900
"""One point a second: the plots cover the last 15 minutes."""
TAIL_PER_PARTITION = 5000
SPRAWL_WINDOW = 200_000
DOMAIN_ROWS = 200
"""Rows of the domain list a page gets; the others are counted."""
LIMITS = Limits(patterns_per_domain=100, params_per_domain=100)
"""What one domain's page shows; the rest is counted."""
TICK_SECONDS = 1.0
TOPIC_WAIT_SECONDS = 2.0
ASSETS = {
    "/": ("dashboard.html", "text/html"),
    "/dashboard.js": ("dashboard.js", "text/javascript"),
    "/dashboard.css": ("dashboard.css", "text/css"),
    "/report.css": ("report.css", "text/css"),
    "/report.explain.js": ("report.explain.js", "text/javascript"),
}
CSP = (
    "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'"
)


@dataclass(frozen=True, slots=True)
class DomainRow:
    """One line of the domain list."""

    domain: str
    version: int
    updated_at: str
    patterns: int
    kept: int
    dropped: int


def domain_row(domain_map: DomainMap) -> DomainRow:
    kept = dropped = 0
    for decision in domain_map.patterns.values():
        kept += len(decision.kept)
        dropped += len(decision.dropped)
    return DomainRow(
        domain_map.domain,
        domain_map.version,
        domain_map.updated_at,
        len(domain_map.patterns),
        kept,
        dropped,
    )


class DashboardMaps(LiveMaps):
    """The live maps in one canonicalizer (maps kept as objects: explaining stays fast),
    with a row per domain for the list."""

    def __init__(self) -> None:
        super().__init__(reverify_after=0.0, canonicalizer=Canonicalizer())
        self.rows: dict[str, DomainRow] = {}
        self.changes = 0

    def apply(self, domain_map: DomainMap, document: bytes | None = None) -> bool:
        if not super().apply(domain_map, document):
            return False
        self.rows[domain_map.domain] = domain_row(domain_map)
        self.changes += 1
        return True

    def remove(self, domain: str) -> None:
        super().remove(domain)
        self.rows.pop(domain, None)
        self.changes += 1


class _MapsByDomain(Mapping[str, DomainMap]):
    """The live maps as the mapping :class:`ReportBuilder` reads."""

    def __init__(self, maps: DashboardMaps) -> None:
        self._maps = maps

    def __getitem__(self, domain: str) -> DomainMap:
        found = self._maps.map_for(domain)
        if found is None:
            raise KeyError(domain)
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._maps.rows))

    def __len__(self) -> int:
        return len(self._maps.rows)


@dataclass(frozen=True, slots=True)
class Point:
    at: float
    urls_in: float
    urls_out: float
    learned_share: float | None
    fetches: int
    saved: int


class DashboardState:
    """Everything the page shows, fed by the readers and read by the HTTP threads."""

    def __init__(
        self,
        *,
        feed_size: int = FEED_SIZE,
        sprawl_window: int = SPRAWL_WINDOW,
        limits: Limits | None = None,
    ) -> None:
        self.maps = DashboardMaps()
        self.canonicalizer = self.maps.canonicalizer
        self.status = "starting"
        self._limits = limits or LIMITS
        self._sprawl_window = sprawl_window
        self._lock = threading.Lock()
        self._builder = self._new_builder()
        self._builder_urls = 0
        self._saved_before = 0
        self._feed: deque[dict[str, Any]] = deque(maxlen=feed_size)
        self._feed_seq = 0
        self._audit_restores = 0
        self._fetches: Counter[str] = Counter()
        self._last_run: dict[str, tuple[str, int]] = {}
        self._tick_statuses: Counter[str] = Counter()
        self.series: deque[Point] = deque(maxlen=SERIES_POINTS)
        self._last_totals: tuple[float, int, int] | None = None
        self._sorted_domains: tuple[int, list[str]] = (-1, [])
        self._politeness: dict[str, dict[str, Any]] = {}

    def _new_builder(self) -> ReportBuilder:
        return ReportBuilder(self.canonicalizer, _MapsByDomain(self.maps), self._limits)

    # ------------------------------------------------------------------ feeding

    def add_canonical(self, value: bytes | None) -> None:
        """One ``urls.canonical`` record: its input URL into the sprawl tally."""
        try:
            record = orjson.loads(value or b"null")
            url, status = record["url"], record["status"]
        except (orjson.JSONDecodeError, TypeError, KeyError):
            log.warning("dashboard: skipped a canonical record that is not one")
            return
        with self._lock:
            if self._builder_urls >= self._sprawl_window:
                self._saved_before += self._builder.duplicates_saved()
                self._builder, self._builder_urls = self._new_builder(), 0
            self._builder.add(str(url))
            self._builder_urls += 1
            if record.get("kept") or record.get("dropped"):
                self._tick_statuses[str(status)] += 1

    def add_map_update(self, value: bytes | None) -> None:
        """One audit record: into the feed, and its run's fetches into the domain's sum."""
        try:
            record = orjson.loads(value or b"null")
            domain, fetches = str(record["domain"]), int(record["fetches"])
            run = (str(record["at"]), int(record["version_before"]))
        except (orjson.JSONDecodeError, TypeError, KeyError, ValueError):
            log.warning("dashboard: skipped a map-update record that is not one")
            return
        with self._lock:
            # A run writes one record per pattern, each with the run's fetches.
            if self._last_run.get(domain) != run:
                self._last_run[domain] = run
                self._fetches[domain] += fetches
            self._feed_seq += 1
            if record.get("request_reason") == "audit" and record.get("accepted") is True:
                self._audit_restores += 1
            self._feed.append(
                {
                    "seq": self._feed_seq,
                    **{
                        key: record.get(key)
                        for key in (
                            "domain",
                            "pattern",
                            "accepted",
                            "reason",
                            "request_reason",
                            "version_before",
                            "version_after",
                            "kept_after",
                            "dropped_after",
                            "flipped_to_dropped",
                            "fetches",
                            "at",
                        )
                    },
                }
            )

    def tick(self, now: float, raw_total: int, canonical_total: int) -> Point:
        """One point of the plots from the topics' high watermarks at ``now``."""
        with self._lock:
            statuses, self._tick_statuses = self._tick_statuses, Counter()
            saved = self._saved_before + self._builder.duplicates_saved()
            fetches = sum(self._fetches.values())
        urls_in = urls_out = 0.0
        if self._last_totals is not None:
            then, raw_before, canonical_before = self._last_totals
            elapsed = max(now - then, 1e-6)
            urls_in = max(raw_total - raw_before, 0) / elapsed
            urls_out = max(canonical_total - canonical_before, 0) / elapsed
        self._last_totals = (now, raw_total, canonical_total)
        counted = statuses["learned"] + statuses["provisional"]
        point = Point(
            now,
            urls_in,
            urls_out,
            statuses["learned"] / counted if counted else None,
            fetches,
            saved,
        )
        self.series.append(point)
        return point

    # ------------------------------------------------------------------ the API

    def summary(self) -> dict[str, Any]:
        rows = list(self.maps.rows.values())
        last = self.series[-1] if self.series else None
        return {
            "status": self.status,
            "domains": len(rows),
            "patterns": sum(row.patterns for row in rows),
            "feed": self._feed_seq,
            "audit_restores": self._audit_restores,
            "fetches": last.fetches if last else 0,
            "saved": last.saved if last else 0,
        }

    def domains(self, wanted: str = "", limit: int = DOMAIN_ROWS) -> dict[str, Any]:
        """The domains whose name holds ``wanted``, by name, at most ``limit`` of them."""
        changes, names = self._sorted_domains
        if changes != self.maps.changes:
            names = sorted(self.maps.rows)
            self._sorted_domains = (self.maps.changes, names)
        wanted = wanted.strip().lower()
        matching = [name for name in names if wanted in name] if wanted else names
        rows = self.maps.rows
        shown = [dataclasses.asdict(rows[name]) for name in matching[:limit] if name in rows]
        with self._lock:
            for row in shown:
                row["fetches"] = self._fetches[row["domain"]]
        return {"total": len(names), "matching": len(matching), "rows": shown}

    def domain(self, name: str) -> dict[str, Any] | None:
        """One domain's view (the report's :class:`~miqps.report.DomainView`), with the
        fetches its audit records count and its latest feed entries; None if unknown."""
        with self._lock:
            domain_view = self._builder.domain_view(name)
            if name not in self.maps.rows and not domain_view.urls:
                return None
            view = dataclasses.asdict(domain_view)
            view["audit_fetches"] = self._fetches[name]
            view["feed"] = [entry for entry in self._feed if entry["domain"] == name][-20:]
            politeness = self._politeness.get(name, {})
            view["robots"] = politeness.get("robots")
            view["pace_seconds"] = politeness.get("pace_seconds")
        view["duplicates_saved"] = view["distinct_urls"] - view["canonical_urls"]
        return view

    def add_worker_metrics(self, exposition: str) -> None:
        """Each host's robots.txt status and pace, from the probing worker's metrics
        (``miqps_robots_status``, ``miqps_probe_delay_seconds``)."""
        politeness: dict[str, dict[str, Any]] = {}
        for family in text_string_to_metric_families(exposition):
            for sample in family.samples:
                host = sample.labels.get("host")
                if host is None:
                    continue
                if sample.name == "miqps_robots_status" and sample.value:
                    politeness.setdefault(host, {})["robots"] = sample.labels.get("status")
                elif sample.name == "miqps_probe_delay_seconds":
                    politeness.setdefault(host, {})["pace_seconds"] = sample.value
        with self._lock:
            self._politeness = politeness

    def feed(self, after: int = 0) -> list[dict[str, Any]]:
        with self._lock:
            return [entry for entry in self._feed if entry["seq"] > after]

    def explain(self, url: str) -> dict[str, Any]:
        """What ``miqps canonicalize --json`` prints for ``url``."""
        try:
            return self.canonicalizer.explain(url).to_json()
        except InvalidURL as error:
            return {"url": url, "error": error.reason}

    def plots(self) -> list[dict[str, Any]]:
        return [dataclasses.asdict(point) for point in list(self.series)]


# ---------------------------------------------------------------------- Kafka


class StreamReaders:
    """The dashboard's Kafka side: the map feed, and one thread reading the audit topic,
    the tail of the canonical topic and the watermarks."""

    def __init__(self, settings: Settings, state: DashboardState) -> None:
        self.settings = settings
        self.state = state
        self._stopping = threading.Event()
        self._feed_broken = threading.Event()
        self._feed: MapFeed | None = None
        self._thread = threading.Thread(
            target=self._run, name="miqps-dashboard-readers", daemon=True
        )

    def start(self) -> StreamReaders:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._feed is not None:
            self._feed.stop()
        self._thread.join(10.0)

    def _run(self) -> None:
        try:
            self._follow()
        except BaseException as error:
            log.exception("dashboard: reading Kafka failed")
            self.state.status = f"reading Kafka failed: {error}"

    def _follow(self) -> None:
        topics = self.settings.topics
        consumer = Consumer(
            consumer_config(
                self.settings,
                f"miqps-dashboard-{uuid.uuid4().hex}",
                **{"enable.auto.commit": False, "fetch.wait.max.ms": 100},
            )
        )
        try:
            partitions = self._wait_for_topics(consumer)
            if partitions is None:
                return
            self._feed = MapFeed(
                self.settings, self.state.maps, self._feed_failed, dead_letter=_no_dead_letters
            )
            self._feed.start()
            # The tail is canonicalized as it arrives: with every map, not the first few.
            self.state.status = "reading the maps"
            while not self._feed.wait_ready(0.2):
                if self._stopping.is_set() or self._feed_broken.is_set():
                    return
            consumer.assign(self._start_positions(consumer, partitions))
            self.state.status = "live"
            handlers: dict[str, Callable[[bytes | None], None]] = {
                topics.canonical: self.state.add_canonical,
                topics.map_updates: self.state.add_map_update,
            }
            next_tick = time.monotonic()
            while not self._stopping.is_set():
                for message in consumer.consume(500, 0.2):
                    self._handle(message, handlers)
                if time.monotonic() >= next_tick:
                    next_tick += TICK_SECONDS
                    self.state.tick(
                        time.time(),
                        _high_total(consumer, topics.raw, partitions[topics.raw]),
                        _high_total(consumer, topics.canonical, partitions[topics.canonical]),
                    )
        finally:
            consumer.close()

    def _feed_failed(self, error: BaseException) -> None:
        self._feed_broken.set()
        self.state.status = f"following the maps failed: {error}"

    def _wait_for_topics(self, consumer: Consumer) -> dict[str, list[int]] | None:
        """The partitions of each topic read, once they all exist (a dashboard may start
        before the first worker creates them); None when asked to stop first."""
        topics = self.settings.topics
        wanted = (topics.maps, topics.map_updates, topics.raw, topics.canonical)
        while not self._stopping.is_set():
            try:
                metadata = consumer.list_topics(timeout=10.0).topics
                missing = [
                    name for name in wanted if name not in metadata or not metadata[name].partitions
                ]
                if not missing:
                    return {name: sorted(metadata[name].partitions) for name in wanted}
                self.state.status = f"waiting for the topics {', '.join(missing)}"
            except KafkaException as error:
                self.state.status = f"waiting for the broker: {error}"
            self._stopping.wait(TOPIC_WAIT_SECONDS)
        return None

    def _start_positions(
        self, consumer: Consumer, partitions: dict[str, list[int]]
    ) -> list[TopicPartition]:
        topics = self.settings.topics
        positions = [
            TopicPartition(topics.map_updates, partition, OFFSET_BEGINNING)
            for partition in partitions[topics.map_updates]
        ]
        for partition in partitions[topics.canonical]:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topics.canonical, partition), timeout=10.0
            )
            positions.append(
                TopicPartition(topics.canonical, partition, max(low, high - TAIL_PER_PARTITION))
            )
        return positions

    @staticmethod
    def _handle(
        message: Message,
        handlers: Mapping[str, Callable[[bytes | None], None]],
    ) -> None:
        if message.error() is not None:
            log.warning("dashboard: %s", message.error())
            return
        handler = handlers.get(message.topic() or "")
        if handler is not None:
            handler(message.value())


def _no_dead_letters(key: bytes | None, record: bytes) -> None:
    """The dashboard only reads: the workers' own feeds dead-letter invalid maps."""


def _high_total(consumer: Consumer, topic: str, partitions: Sequence[int]) -> int:
    total = 0
    for partition in partitions:
        _, high = consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=5.0, cached=False
        )
        total += max(high, 0)
    return total


# ---------------------------------------------------------------------- HTTP


def _asset(name: str) -> bytes:
    """The dashboard's own files, or the report's styles and explain view it shares."""
    if name.startswith("report."):
        return resources.files("miqps").joinpath(f"data/{name}").read_bytes()
    return resources.files("streams.ops").joinpath(f"assets/{name}").read_bytes()


def _first(query: dict[str, list[str]], name: str, default: str = "") -> str:
    values = query.get(name)
    return values[0] if values else default


def _number(text: str, default: int) -> int:
    try:
        return max(int(text), 0)
    except ValueError:
        return default


class DashboardServer:
    """The page and its JSON API on ``host:port`` (port 0: any free port), in a thread."""

    def __init__(
        self, state: DashboardState, host: str = "127.0.0.1", port: int = DEFAULT_PORT
    ) -> None:
        self.state = state
        handler = type("Handler", (_Handler,), {"state": state})
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},  # stop() returns within 50 ms
            name="miqps-dashboard-http",
            daemon=True,
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/"

    def start(self) -> DashboardServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5.0)


class _Handler(BaseHTTPRequestHandler):
    state: DashboardState
    server_version = "miqps-dashboard"

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        asset = ASSETS.get(parts.path)
        if asset is not None:
            name, kind = asset
            self._send(HTTPStatus.OK, _asset(name), f"{kind}; charset=utf-8")
            return
        api = self._api(parts.path, query)
        if api is None:
            self._json(HTTPStatus.NOT_FOUND, {"error": f"no such page: {parts.path}"})
        else:
            self._json(*api)

    def _api(
        self,
        path: str,
        query: dict[str, list[str]],
    ) -> tuple[HTTPStatus, Any] | None:
        state = self.state
        if path == "/api/summary":
            return HTTPStatus.OK, state.summary()
        if path == "/api/domains":
            return HTTPStatus.OK, state.domains(
                _first(query, "filter"), _number(_first(query, "limit"), DOMAIN_ROWS)
            )
        if path == "/api/domain":
            name = _first(query, "name")
            view = state.domain(name)
            if view is None:
                return HTTPStatus.NOT_FOUND, {"error": f"no map and no URL of {name!r} yet"}
            return HTTPStatus.OK, view
        if path == "/api/feed":
            return HTTPStatus.OK, state.feed(_number(_first(query, "after"), 0))
        if path == "/api/explain":
            if "url" not in query:
                return HTTPStatus.BAD_REQUEST, {"error": "give the URL as ?url="}
            return HTTPStatus.OK, state.explain(_first(query, "url"))
        if path == "/api/plots":
            return HTTPStatus.OK, state.plots()
        return None

    def _json(self, status: HTTPStatus, body: Any) -> None:
        self._send(status, orjson.dumps(body), "application/json")

    def _send(self, status: HTTPStatus, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("dashboard http: " + format, *args)


# ---------------------------------------------------------------------- command


def dashboard_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="miqps dashboard",
        description="Serve a live dashboard of the stream processor, read from Kafka.",
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="the address to listen on (default: loopback only)"
    )
    parser.add_argument(
        "--port",
        type=_port,
        default=DEFAULT_PORT,
        help=f"the port to listen on (default {DEFAULT_PORT}; 0: any free)",
    )
    parser.add_argument(
        "--worker-metrics",
        metavar="URL",
        help="the probing worker's metrics endpoint (MIQPS_METRICS_PORT), read every "
        f"{WORKER_METRICS_SECONDS:g} s for each domain's robots.txt status and pace",
    )
    return parser


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535, not {port}")
    return port


def run_dashboard(
    settings: Settings,
    host: str,
    port: int,
    ready: Callable[[str], None] | None = None,
    stopping: threading.Event | None = None,
    worker_metrics: str | None = None,
) -> int:
    """Serve until ``stopping`` is set, or Ctrl-C or SIGTERM; ``ready`` gets the page's URL."""
    state = DashboardState()
    stopping = stopping or threading.Event()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda signum, frame: stopping.set())
    try:
        server = DashboardServer(state, host, port)
    except OSError as error:
        print(f"miqps dashboard: cannot listen on {host}:{port}: {error}", file=sys.stderr)
        return 1
    readers = StreamReaders(settings, state).start()
    if worker_metrics:
        threading.Thread(
            target=_follow_worker_metrics,
            args=(state, worker_metrics, stopping),
            name="miqps-dashboard-worker-metrics",
            daemon=True,
        ).start()
    server.start()
    (ready or _announce)(server.url)
    try:
        stopping.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        readers.stop()
    return 0


def _follow_worker_metrics(state: DashboardState, url: str, stopping: threading.Event) -> None:
    """Read the worker's metrics every few seconds; a failed read keeps what was shown."""
    warned = False
    while not stopping.is_set():
        try:
            with urllib.request.urlopen(url, timeout=WORKER_METRICS_SECONDS) as answer:
                state.add_worker_metrics(answer.read(4 * 1024 * 1024).decode("utf-8", "replace"))
            warned = False
        except (OSError, ValueError) as error:
            if not warned:
                log.warning("dashboard: cannot read the worker's metrics at %s: %s", url, error)
                warned = True
        stopping.wait(WORKER_METRICS_SECONDS)


def _announce(url: str) -> None:
    print(f"miqps dashboard: {url}", flush=True)
