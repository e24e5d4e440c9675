"""What the dashboard's page shows, fed by the readers and read by the HTTP threads.

- the live maps in one :class:`~miqps.canonical.Canonicalizer` (:class:`DashboardMaps`),
  with a row per domain for the list: the domain pages and *Explain a URL* (the same answer
  as ``miqps canonicalize --json``, from :meth:`Canonicalizer.explain`);
- the feed of map updates: the last :data:`FEED_SIZE` audit records, and the fetches each
  run spent summed per domain;
- the tail of ``urls.canonical`` in :class:`miqps.report.ReportBuilder`, the view model of
  the parameter-sprawl report; after :data:`SPRAWL_WINDOW` URLs a fresh builder starts, so
  its memory is bounded;
- one :class:`Point` of the plots a second (:data:`SERIES_POINTS` of them), and each host's
  robots.txt status and pace from the probing worker's metrics.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections import Counter, deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from prometheus_client.parser import text_string_to_metric_families

from miqps.canonical import Canonicalizer
from miqps.maps import DomainMap
from miqps.report import Limits, ReportBuilder
from miqps.urls import InvalidURL
from streams.maps.live import LiveMaps

log = logging.getLogger(__name__)

FEED_SIZE = 500
SERIES_POINTS = 900
"""One point a second: the plots cover the last 15 minutes."""
SPRAWL_WINDOW = 200_000
DOMAIN_ROWS = 200
"""Rows of the domain list a page gets; the others are counted."""
LIMITS = Limits(patterns_per_domain=100, params_per_domain=100)
"""What one domain's page shows; the rest is counted."""


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
