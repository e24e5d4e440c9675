"""A Scrapy add-on: requests are fingerprinted by their canonical URL, so Scrapy's own
dupefilter drops a request whose canonical URL it has seen. The URL fetched stays the
site's; a domain without a map keeps the fallback (by default Scrapy's) fingerprint.

Install ``miqps[scrapy]``, then in ``settings.py``::

    ADDONS = {"miqps.scrapy.Addon": 600}
    MIQPS_MAPS = "maps.jsonl"                    # written by 'miqps learn'
    # or follow the maps topic live: MIQPS_KAFKA_BOOTSTRAP = "127.0.0.1:9092"

Settings:

- ``MIQPS_MAPS``: a maps file (validated; a bad line stops the crawl, naming ``file:line``).
- ``MIQPS_KAFKA_BOOTSTRAP`` and ``MIQPS_MAPS_TOPIC`` (default ``miqps.maps``): follow the
  compacted maps topic instead (needs the ``streams`` extra).
- ``MIQPS_USE_PRIOR`` (default True): in a mapped domain's unlearned patterns, drop
  ``utm_*``, ``gclid``, ``fbclid``, ``msclkid`` and ``dclid``, as ``miqps canonicalize`` does.
- ``MIQPS_FALLBACK_REQUEST_FINGERPRINTER_CLASS``: the fingerprinter for domains without a
  map; the add-on sets it to the ``REQUEST_FINGERPRINTER_CLASS`` it replaces.
- ``MIQPS_FEED_UNLEARNED`` (optional, off): a Kafka bootstrap address. The URL of each
  request whose pattern no map has learned (domains without a map included) is then sent
  to ``MIQPS_RAW_TOPIC`` (default ``urls.raw``) for the stream to learn, at most
  ``MIQPS_FEED_PER_PATTERN`` (default 50) URLs per host and pattern. It costs a full
  parse of each request's URL (needs the ``streams`` extra).

  The feed is advisory: when the producer's local queue stays full after a few polls,
  the URL is dropped, counted and logged, and the crawl goes on; while the queue stays
  full, each further URL gets one try without waiting.
- ``MIQPS_FEED_OBSERVATIONS`` (optional, off): a Kafka bootstrap address. Each page the
  crawl received (its final answer, after redirects) is then sent to
  ``MIQPS_OBSERVATIONS_TOPIC`` (default ``miqps.observations``), reduced to its content
  blocks (:class:`CrawlObservations`), so that the stream learns from it instead of
  fetching it again. Advisory like the feed above; it costs a parse of each page.
- ``MIQPS_MAP_FEED`` (default ``streams.maps.scrapyfeed.KafkaMapFeed``): the class (or its
  import path) of the add-on's Kafka side, :class:`MapFeed`: it follows the maps topic for
  ``MIQPS_KAFKA_BOOTSTRAP`` and feeds ``MIQPS_FEED_UNLEARNED`` and
  ``MIQPS_FEED_OBSERVATIONS``. It is loaded the way Scrapy
  loads its own classes, only when one of those two is set, so that this module imports
  nothing of Kafka.
- ``MIQPS_REWRITE_REQUESTS`` (default False): also fetch each request the spider yields
  at its canonical URL (:class:`CanonicalRequestsMiddleware`), not at the URL the site
  gave; the site's URL stays in ``request.meta["miqps_original_url"]``. Redirects are
  followed as the site sends them.

Stats: ``miqps/requests_canonicalized``, ``miqps/params_dropped`` (query parameters left
out of fingerprints), ``miqps/duplicates_filtered`` (requests the dupefilter dropped whose
URL the maps changed), ``miqps/domains_without_map`` (distinct hosts fingerprinted by the
fallback), ``miqps/unlearned_fed`` (URLs sent with ``MIQPS_FEED_UNLEARNED``),
``miqps/unlearned_dropped`` (URLs that feed dropped), ``miqps/observations_fed``,
``miqps/observations_dropped`` and ``miqps/requests_rewritten``.
"""

from __future__ import annotations

import hashlib
import logging
import re
from typing import Any, Protocol
from weakref import WeakKeyDictionary

from scrapy import Request, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured
from scrapy.http import Response
from scrapy.settings import SETTINGS_PRIORITIES, BaseSettings
from scrapy.spidermiddlewares.base import BaseSpiderMiddleware
from scrapy.statscollectors import StatsCollector
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.misc import build_from_crawler, load_object
from scrapy.utils.request import RequestFingerprinterProtocol

from miqps.canonical import Canonicalizer
from miqps.observations import InvalidObservation, observation_record
from miqps.urls import InvalidURL, parse

__all__ = [
    "Addon",
    "CanonicalRequestsMiddleware",
    "CrawlObservations",
    "MapsRequestFingerprinter",
]

log = logging.getLogger(__name__)

DEFAULT_FALLBACK = "scrapy.utils.request.RequestFingerprinter"
REWRITE_MIDDLEWARE_ORDER = 50
"""Near the engine: the spider's other middlewares see the URL the site gave."""
OBSERVATIONS_EXTENSION_ORDER = 500


class MapsRequestFingerprinter:
    """Fingerprints a request of a mapped domain by method, canonical URL and body;
    any other request by the fallback fingerprinter."""

    def __init__(
        self,
        canonicalizer: Canonicalizer,
        fallback: RequestFingerprinterProtocol,
        stats: StatsCollector | None = None,
        unlearned: UnlearnedSink | None = None,
    ) -> None:
        self.canonicalizer = canonicalizer
        self.fallback = fallback
        self.stats = stats
        self.unlearned = unlearned
        self._cache: WeakKeyDictionary[Request, bytes] = WeakKeyDictionary()
        self._unmapped: set[str] = set()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> MapsRequestFingerprinter:
        settings = crawler.settings
        use_prior = settings.getbool("MIQPS_USE_PRIOR", True)
        bootstrap = settings.get("MIQPS_KAFKA_BOOTSTRAP")
        maps = settings.get("MIQPS_MAPS")
        if bootstrap:
            canonicalizer = load_map_feed(settings, "MIQPS_KAFKA_BOOTSTRAP").follow(
                bootstrap, settings.get("MIQPS_MAPS_TOPIC", "miqps.maps"), use_prior
            )
        elif maps:
            canonicalizer = _canonicalizer_from_file(maps, use_prior)
        else:
            raise ValueError(
                "miqps.scrapy: set MIQPS_MAPS (a maps file) or "
                "MIQPS_KAFKA_BOOTSTRAP (to follow the maps topic)"
            )
        fallback_class = load_object(
            settings.get("MIQPS_FALLBACK_REQUEST_FINGERPRINTER_CLASS") or DEFAULT_FALLBACK
        )
        feed_to = settings.get("MIQPS_FEED_UNLEARNED")
        unlearned = (
            load_map_feed(settings, "MIQPS_FEED_UNLEARNED").unlearned(
                feed_to,
                settings.get("MIQPS_RAW_TOPIC", "urls.raw"),
                settings.getint("MIQPS_FEED_PER_PATTERN", 50),
            )
            if feed_to
            else None
        )
        fingerprinter = cls(
            canonicalizer, build_from_crawler(fallback_class, crawler), crawler.stats, unlearned
        )
        crawler.signals.connect(fingerprinter.request_dropped, signals.request_dropped)
        crawler.signals.connect(fingerprinter.close, signals.engine_stopped)
        return fingerprinter

    def canonical_url(self, request: Request) -> str | None:
        """The canonical URL of ``request``, or None when its domain has no map or its
        URL cannot be canonicalized."""
        if self.canonicalizer.map_for(_host(request)) is None:
            return None
        # The batch path (one URL) is the fast one; an invalid URL comes back empty.
        canonical = self.canonicalizer.canonical_texts([request.url])[0]
        return canonical or None

    def fingerprint(self, request: Request) -> bytes:
        cached = self._cache.get(request)
        if cached is not None:
            return cached
        if self.unlearned is not None:
            self._feed_if_unlearned(request)
        host = _host(request)
        if self.canonicalizer.map_for(host) is None:
            self._count_unmapped(host)
            return self.fallback.fingerprint(request)
        canonical = self.canonicalizer.canonical_texts([request.url])[0]
        if not canonical:  # a URL the canonicalizer refuses: Scrapy's own judgement
            return self.fallback.fingerprint(request)
        parts = [request.method.encode(), canonical.encode(), request.body]
        if self._redirected_to_itself(request, canonical):
            parts.append(b"redirected")
        digest = hashlib.sha1(b"\n".join(parts), usedforsecurity=False).digest()
        self._cache[request] = digest
        if self.stats is not None:
            self.stats.inc_value("miqps/requests_canonicalized")
            dropped = _params(request.url) - _params(canonical)
            if dropped:
                self.stats.inc_value("miqps/params_dropped", dropped)
        return digest

    def _redirected_to_itself(self, request: Request, canonical: str) -> bool:
        """Whether ``request`` is a redirect from a URL with the same canonical form (a site
        redirecting ``/a?utm_source=x`` to ``/a``): the dupefilter must not take it for
        a duplicate of the request it comes from, or the page is never fetched."""
        sources = request.meta.get("redirect_urls")
        if not sources:
            return False
        try:
            return bool(self.canonicalizer.canonicalize(sources[-1]) == canonical)
        except InvalidURL:
            return False

    def _feed_if_unlearned(self, request: Request) -> None:
        try:
            decision = self.canonicalizer.explain(request.url)
        except InvalidURL:
            return
        if self.unlearned is None or decision.status == "learned":
            return
        outcome = self.unlearned.send(decision.domain, decision.pattern, request.url)
        if outcome is not None and self.stats is not None:
            self.stats.inc_value(f"miqps/unlearned_{outcome}")

    def _count_unmapped(self, host: str) -> None:
        if host not in self._unmapped:
            self._unmapped.add(host)
            if self.stats is not None:
                self.stats.set_value("miqps/domains_without_map", len(self._unmapped))

    def request_dropped(self, request: Request, **_: Any) -> None:
        """Scrapy's dupefilter dropped ``request``: count it if the maps changed its URL."""
        canonical = self.canonical_url(request)
        if self.stats is not None and canonical is not None and canonical != request.url:
            self.stats.inc_value("miqps/duplicates_filtered")

    def close(self) -> None:
        self.canonicalizer.close()
        if self.unlearned is not None:
            self.unlearned.close()


class UnlearnedSink(Protocol):
    """Where :class:`MapsRequestFingerprinter` sends URLs of unlearned patterns
    (``streams.maps.scrapyfeed.UnlearnedFeed``, the Kafka producer)."""

    def send(self, domain: str, pattern: str, url: str) -> str | None:
        """The outcome counted as ``miqps/unlearned_<outcome>`` ("fed" or "dropped"), or
        None when ``url`` was not sent."""

    def close(self) -> None: ...


class ObservationSink(Protocol):
    """Where :class:`CrawlObservations` sends the crawl's pages
    (``streams.maps.scrapyfeed.ObservationFeed``, the Kafka producer)."""

    def send(self, domain: str, url: str, observation: bytes) -> str:
        """The outcome counted as ``miqps/observations_<outcome>`` ("fed" or "dropped")."""

    def close(self) -> None: ...


class MapFeed(Protocol):
    """The Kafka side of the add-on (``MIQPS_MAP_FEED``), made with no arguments."""

    def follow(self, bootstrap: str, topic: str, use_prior: bool) -> Canonicalizer:
        """A canonicalizer following the compacted maps ``topic`` live (until its
        ``close()``), once it has read it to its end."""

    def unlearned(self, bootstrap: str, topic: str, per_pattern: int) -> UnlearnedSink:
        """The sink sending URLs of unlearned patterns to ``topic``, ``per_pattern`` at
        most per host and pattern."""

    def observations(self, bootstrap: str, topic: str) -> ObservationSink:
        """The sink sending the crawl's pages to the observations ``topic``."""


DEFAULT_MAP_FEED = "streams.maps.scrapyfeed.KafkaMapFeed"


def load_map_feed(settings: BaseSettings, needed_by: str) -> MapFeed:
    """The ``MIQPS_MAP_FEED`` object, which the setting ``needed_by`` needs. An unloadable
    feed stops the crawl with a :class:`RuntimeError` naming that setting, and the
    ``streams`` extra when the default feed is not installed."""
    feed_class = settings.get("MIQPS_MAP_FEED") or DEFAULT_MAP_FEED
    try:
        feed: MapFeed = load_object(feed_class)()
    except (ImportError, NameError, ValueError) as error:
        if feed_class == DEFAULT_MAP_FEED:
            raise RuntimeError(
                f"miqps.scrapy: {needed_by} needs the 'streams' extra ({error})"
            ) from error
        raise RuntimeError(
            f"miqps.scrapy: {needed_by}: MIQPS_MAP_FEED = {feed_class!r} cannot be loaded: {error}"
        ) from error
    return feed


_PLAIN_AUTHORITY = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://([^/?#@:\[\]]*)(?:[/?#]|$)")


def _host(request: Request) -> str:
    """The host of ``request``'s URL, lowercased, as maps are filed; a regular expression
    for the common case (no userinfo, port or IPv6): 0.6 us, where parsing the whole URL
    takes 9 us, as much as canonicalizing it."""
    plain = _PLAIN_AUTHORITY.match(request.url)
    if plain is not None:
        return plain.group(1).lower()
    return urlparse_cached(request).hostname or ""


def _params(url: str) -> int:
    query = url.partition("#")[0].partition("?")[2]
    return sum(1 for pair in query.split("&") if pair)


class CanonicalRequestsMiddleware(BaseSpiderMiddleware):
    """A spider middleware, on only with ``MIQPS_REWRITE_REQUESTS = True``: each request
    the spider yields (start requests included) goes out at its canonical URL, the site's
    URL kept in ``meta["miqps_original_url"]``. Needs :class:`MapsRequestFingerprinter`
    (the add-on installs both)."""

    def __init__(self, crawler: Crawler, fingerprinter: MapsRequestFingerprinter) -> None:
        super().__init__(crawler)
        self.fingerprinter = fingerprinter
        self.stats = crawler.stats

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> CanonicalRequestsMiddleware:
        if not crawler.settings.getbool("MIQPS_REWRITE_REQUESTS", False):
            raise NotConfigured  # off by default: nothing to warn about
        fingerprinter = crawler.request_fingerprinter
        if not isinstance(fingerprinter, MapsRequestFingerprinter):
            raise ValueError(
                "miqps.scrapy: MIQPS_REWRITE_REQUESTS needs REQUEST_FINGERPRINTER_CLASS = "
                f"MapsRequestFingerprinter (enable the add-on), not {type(fingerprinter)}"
            )
        return cls(crawler, fingerprinter)

    def get_processed_request(self, request: Request, response: Response | None) -> Request | None:
        canonical = self.fingerprinter.canonical_url(request)
        if canonical is None or canonical == request.url:
            return request
        if self.stats is not None:
            self.stats.inc_value("miqps/requests_rewritten")
        meta = {"miqps_original_url": request.url, **request.meta}
        return request.replace(url=canonical, meta=meta)


class CrawlObservations:
    """Sends each page the crawl received to the stream's observations topic
    (``MIQPS_FEED_OBSERVATIONS``), reduced to its content blocks here
    (:func:`miqps.observations.observation_record`): the stream's probing worker then takes
    it instead of fetching the URL again. The page is the final answer of a request, after
    its redirects, sent under the URL the request first asked for."""

    def __init__(self, sink: ObservationSink, stats: StatsCollector | None = None) -> None:
        self.sink = sink
        self.stats = stats

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> CrawlObservations:
        settings = crawler.settings
        bootstrap = settings.get("MIQPS_FEED_OBSERVATIONS")
        if not bootstrap:
            raise NotConfigured("MIQPS_FEED_OBSERVATIONS is not set")
        sink = load_map_feed(settings, "MIQPS_FEED_OBSERVATIONS").observations(
            bootstrap, settings.get("MIQPS_OBSERVATIONS_TOPIC", "miqps.observations")
        )
        extension = cls(sink, crawler.stats)
        crawler.signals.connect(extension.response_received, signals.response_received)
        crawler.signals.connect(extension.close, signals.engine_stopped)
        return extension

    def response_received(self, response: Response, request: Request, **_: Any) -> None:
        redirects: list[str] = request.meta.get("redirect_urls") or []
        asked = redirects[0] if redirects else request.url
        try:
            host = parse(asked).host
            observation = observation_record(
                asked,
                response.status,
                response.body,
                final_url=response.url,
                redirects=len(redirects),
                content_type=(response.headers.get(b"Content-Type") or b"").decode("latin-1"),
            )
        except (InvalidURL, InvalidObservation):
            return
        outcome = self.sink.send(host, asked, observation)
        if self.stats is not None:
            self.stats.inc_value(f"miqps/observations_{outcome}")

    def close(self) -> None:
        self.sink.close()


def _canonicalizer_from_file(maps: str, use_prior: bool) -> Canonicalizer:
    """The maps of the file ``MIQPS_MAPS`` names; a file that cannot be read stops the
    crawl at start-up with an error naming the setting and the path."""
    try:
        return Canonicalizer.from_file(maps, use_prior=use_prior)
    except OSError as error:
        reason = (
            f"MIQPS_MAPS = {maps!r} cannot be read ({error.strerror or error}); write it "
            f"with 'miqps learn --urls URLS.txt --out {maps}', or set MIQPS_MAPS to a maps file"
        )
        log.error("%s", reason)
        raise ValueError(f"miqps.scrapy: {reason}") from None


class Addon:
    """Enables :class:`MapsRequestFingerprinter` through Scrapy's ``ADDONS`` setting,
    keeping the fingerprinter it replaces as the fallback for domains without a map,
    and :class:`CanonicalRequestsMiddleware` (which stays off unless
    ``MIQPS_REWRITE_REQUESTS`` is set)."""

    def update_settings(self, settings: BaseSettings) -> None:
        settings.setdefault_in_component_priority_dict(
            "SPIDER_MIDDLEWARES", CanonicalRequestsMiddleware, REWRITE_MIDDLEWARE_ORDER
        )
        settings.setdefault_in_component_priority_dict(
            "EXTENSIONS", CrawlObservations, OBSERVATIONS_EXTENSION_ORDER
        )
        current = settings.get("REQUEST_FINGERPRINTER_CLASS")
        if current is not None and load_object(current) is not MapsRequestFingerprinter:
            settings.set("MIQPS_FALLBACK_REQUEST_FINGERPRINTER_CLASS", current, "addon")
        # A fingerprinter set in the project's settings becomes the fallback too, so the
        # add-on must win over that priority.
        priority = max(
            SETTINGS_PRIORITIES["addon"], settings.getpriority("REQUEST_FINGERPRINTER_CLASS") or 0
        )
        settings.set("REQUEST_FINGERPRINTER_CLASS", MapsRequestFingerprinter, priority)
