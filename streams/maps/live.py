"""The current MIQPS maps of every domain, for the stream workers.

The canonical form and the decision are the core's: :class:`miqps.canonical.Canonicalizer`
compiles each map once and decides every URL (:meth:`~miqps.canonical.Canonicalizer.decide`).
This module holds one canonicalizer per process and adds what only the stream needs: which
map version is live, and when each learned pattern's decision is due for re-verification.

Two ways to hold them:

- :class:`LiveMaps` holds every map in memory, compiled in its canonicalizer and as a
  :class:`LiveMap` per domain: ``streams.from_kafka``, the dashboard, and a worker with
  ``MIQPS_MAPS_CACHE_DOMAINS=0``;
- :class:`StoredLiveMaps` keeps every map on disk, in a :class:`~miqps.mapstore.MapStore`
  of the process's own, and holds only what the domains met last need: each worker process
  by default (:func:`worker_live_maps`). The store is kept across restarts, with the maps
  topic it is of and where the feed reads each maps partition next (:mod:`streams.maps.kept`).
"""

from __future__ import annotations

import logging
import shutil
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial, wraps
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast

import orjson

from miqps.canonical import (
    DEFAULT_CACHE_DOMAINS,
    Canonicalizer,
    Decision,
    MapFacts,
    StaticLayers,
    facts_record_of_document,
)
from miqps.maps import DomainMap, timestamp_seconds
from miqps.mapstore import INDEX_FORMAT, MapStore
from miqps.urls import NormalizedURL
from streams.maps.kept import StoredOffset, StoreOrigin, why_emptied
from streams.settings import Settings

log = logging.getLogger(__name__)

FRONT_PROCESS = "front"
WORKER_PROCESS = "worker"
"""The processes of a worker: the canonicalizer front's child, and the Faust process."""
LIVE_MAPS_FOLDER = "live-maps"
"""The folder under ``MIQPS_STATE_DIR`` of each worker process's stored maps (one folder
per process: two processes cannot open one store)."""
# Notes of the store: a domain's LiveMap record, and each map filed by its updated_at.
_RECORD = b"v:"
_BY_AGE = b"u:"
# A domain filed under the maps partition that brought it: b"p:" + partition (4 bytes,
# big-endian) + domain.
_BY_PARTITION = b"p:"
# Where the feed reads a maps partition next: b"o:" + partition (4 bytes) -> StoredOffset.
_OFFSET = b"o:"
_FORMAT = "format"
_STORE_FORMAT = str(INDEX_FORMAT).encode()
"""What the store's documents and facts records are written as: the format of a maps
file's index, which holds the same (a store of another one is emptied at start)."""
_ORIGIN = "origin"
"""The store's meta: the maps topic it holds the maps of (a :class:`StoreOrigin`)."""


class Decide(Protocol):
    def __call__(self, url: NormalizedURL, original: str | None = None) -> Decision: ...


@dataclass(frozen=True, slots=True)
class PatternRule:
    """When a learned pattern was decided, and when its decision is due to be checked again."""

    decided_at: str
    reverify_at: float


@dataclass(frozen=True, slots=True)
class HeldMaps:
    """How many domains a process holds something of in memory."""

    compiled: int
    """Maps compiled in the canonicalizer."""
    live: int
    """:class:`LiveMap` records (version and re-verification times)."""
    read: int = 0
    """Maps read from the store since the start, each when a URL of a domain whose map
    was not held came (always 0 with every map held)."""


@dataclass(frozen=True, slots=True)
class LiveMap:
    """What the stream knows of one domain's live map beside its compiled rules."""

    version: int
    decided: Mapping[str, tuple[str, float]]
    """Per pattern, when it was decided: as written, and in seconds since the epoch."""
    reverify_after: float
    """How long after its decision a pattern is due to be checked again, in seconds."""
    updated_at: float = 0.0
    """The map's ``updated_at``, in seconds since the epoch (0 if it has none)."""

    def rule(self, pattern: str) -> PatternRule | None:
        """The rule of ``pattern``, made on demand: a map read back from the store for a
        URL's decision is read for one pattern, and making every pattern's rule took most
        of reading it."""
        decided = self.decided.get(pattern)
        if decided is None:
            return None
        decided_at, seconds = decided
        return PatternRule(decided_at, seconds + self.reverify_after)


@dataclass(frozen=True, slots=True)
class MapsSummary:
    """What the metrics say of the live maps."""

    domains: int
    patterns: int
    oldest_update: float | None
    """The ``updated_at`` of the least recently updated map, in seconds since the epoch;
    None when no map has one."""


def live_map(domain_map: DomainMap, reverify_after: float) -> LiveMap:
    return LiveMap(
        domain_map.version,
        {
            key: (decision.decided_at, timestamp_seconds(decision.decided_at))
            for key, decision in domain_map.patterns.items()
        },
        reverify_after,
        timestamp_seconds(domain_map.updated_at),
    )


class LiveMaps:
    """Every domain's live map, held in memory. One writer (the map feed) and any number of
    readers: :meth:`apply` and :meth:`remove` hold a lock, and every change a reader can
    see is one dict assignment, which the interpreter makes atomic.

    ``canonicalizer`` is where the maps are installed; by default a new one, which keeps
    each map as its JSON document (see :meth:`~miqps.canonical.Canonicalizer.update`).
    Passing the API's own :class:`~miqps.canonical.Canonicalizer` makes the map feed keep
    it current, with maps kept as objects so that its ``explain`` stays fast.
    """

    def __init__(
        self,
        reverify_after: float,
        layers: StaticLayers | None = None,
        *,
        use_prior: bool = True,
        canonicalizer: Canonicalizer | None = None,
    ) -> None:
        self._compact = canonicalizer is None
        self.canonicalizer = canonicalizer or Canonicalizer(layers, use_prior=use_prior)
        self.reverify_after = reverify_after
        self._maps: dict[str, LiveMap] = {}
        self._filed: dict[int, set[str]] = {}
        self._lock = threading.Lock()
        # The core's decision without the per-parameter layers: a partial, since every URL
        # of the stream passes through it. Pass the input's text as ``original`` where it is
        # at hand: building it again from the parsed URL costs a fifth of the decision.
        self.decide: Decide = partial(self.canonicalizer.decide, with_layers=False)

    @property
    def layers(self) -> StaticLayers:
        return self.canonicalizer.layers

    def apply(self, domain_map: DomainMap, document: bytes | None = None) -> bool:
        """Install ``domain_map`` (whose JSON is ``document``, if at hand) unless a newer
        version, or the same map, is live already.

        Two probe workers can both publish version N+1 of a domain during a rebalance. The
        later record wins, as the topic's compaction keeps it: every worker reads the same
        order, so all of them end on the map the topic keeps."""
        with self._lock:
            current = self._maps.get(domain_map.domain)
            if current is not None and (
                current.version > domain_map.version
                or (
                    current.version == domain_map.version
                    and self.canonicalizer.map_for(domain_map.domain) == domain_map
                )
            ):
                return False
            if self._compact:
                document = document if document is not None else domain_map.dumps().encode()
                self.canonicalizer.update(domain_map, document)
            else:
                self.canonicalizer.update(domain_map)
            self._maps[domain_map.domain] = live_map(domain_map, self.reverify_after)
            return True

    def apply_document(self, document: Mapping[str, Any], raw: bytes) -> bool:
        """:meth:`apply` for a map document checked by :func:`~miqps.maps.check_map`
        (``raw`` its text), as the maps topic brings it."""
        return self.apply(DomainMap.from_json(document), raw)

    def remove(self, domain: str) -> None:
        with self._lock:
            self._maps.pop(domain, None)
            self.canonicalizer.forget(domain)

    def get(self, domain: str) -> LiveMap | None:
        return self._maps.get(domain)

    def file_under(self, partition: int, domain: str) -> None:
        """Note that ``domain``'s map came from ``partition`` of the maps topic, so that
        :meth:`forget_partition` removes it."""
        self._filed.setdefault(partition, set()).add(domain)

    def unfile(self, partition: int, domain: str) -> None:
        filed = self._filed.get(partition)
        if filed is not None:
            filed.discard(domain)

    def filed_under(self, partition: int) -> int:
        """How many domains are filed under ``partition``."""
        return len(self._filed.get(partition, ()))

    def forget_partition(self, partition: int) -> int:
        """Remove the map of every domain filed under ``partition``; return how many."""
        domains = self._filed.pop(partition, set())
        for domain in domains:
            self.remove(domain)
        return len(domains)

    def map_for(self, domain: str) -> DomainMap | None:
        return self.canonicalizer.map_for(domain)

    def __len__(self) -> int:
        return len(self._maps)

    def held(self) -> HeldMaps:
        """What this process holds in memory, as of now (safe from any thread)."""
        return HeldMaps(self.canonicalizer.maps_held, len(self._maps))

    def summary(self) -> MapsSummary:
        """The live maps' counts and oldest update, as of now (safe from any thread)."""
        maps = list(self._maps.values())
        updated = [live.updated_at for live in maps if live.updated_at > 0]
        return MapsSummary(
            len(maps), sum(len(live.decided) for live in maps), min(updated, default=None)
        )

    def close(self) -> None:
        """Release what the maps hold outside memory (nothing here)."""

    def needs_learning(self, domain: str, pattern: str, basis: str) -> bool:
        """Whether the live map still lacks what a sample of ``pattern`` asks for: a
        decision (``basis`` empty), or the re-verification of the decision made at
        ``basis``."""
        live = self.get(domain)
        rule = live.rule(pattern) if live is not None else None
        if rule is None:
            return True
        return bool(basis) and rule.decided_at == basis

    def due_for_reverification(self, decision: Decision, now: float) -> str | None:
        """The ``decided_at`` of a learned decision whose re-verification time has come
        (``now`` in seconds since the epoch), else None."""
        live = self.get(decision.domain)
        rule = live.rule(decision.pattern) if live is not None else None
        if rule is None or rule.reverify_at > now:
            return None
        return rule.decided_at


@dataclass(frozen=True, slots=True)
class _Record:
    """A domain's :class:`LiveMap` as the store keeps it beside the map's document."""

    version: int
    updated_at: float
    decided: dict[str, tuple[str, float]]
    """Per pattern, when it was decided: as written, and in seconds since the epoch."""

    @classmethod
    def of(cls, version: int, decided: Mapping[str, str], updated_at: str) -> _Record:
        """The record of a map of ``version``, its patterns ``decided`` at those times."""
        return cls(
            version,
            timestamp_seconds(updated_at),
            {key: (at, timestamp_seconds(at)) for key, at in decided.items()},
        )

    @classmethod
    def loads(cls, raw: bytes) -> _Record:
        version, updated_at, decided = orjson.loads(raw)
        return cls(
            version, updated_at, {key: (at, seconds) for key, (at, seconds) in decided.items()}
        )

    def dumps(self) -> bytes:
        return orjson.dumps([self.version, self.updated_at, self.decided])

    def live_map(self, reverify_after: float) -> LiveMap:
        return LiveMap(self.version, self.decided, reverify_after, self.updated_at)


_Method = TypeVar("_Method", bound=Callable[..., Any])


def _one_call_at_a_time(method: _Method) -> _Method:
    @wraps(method)
    def call(self: _SharedCanonicalizer, *args: Any, **kwargs: Any) -> Any:
        with self.turn:
            return method(self, *args, **kwargs)

    return cast("_Method", call)


class _SharedCanonicalizer(Canonicalizer):
    """A canonicalizer reading maps on demand that the map feed's thread (which makes it
    forget a domain whose map changed) shares with the threads that read it: one call at a
    time, so that the feed never changes the maps held in the middle of a call (making room
    walks over them, a load installs what it read)."""

    def __init__(
        self,
        layers: StaticLayers | None,
        *,
        use_prior: bool,
        maps: MapStore,
        cache_domains: int,
    ) -> None:
        self.turn = threading.RLock()
        super().__init__(layers, use_prior=use_prior, maps=maps, cache_domains=cache_domains)

    update = _one_call_at_a_time(Canonicalizer.update)
    forget = _one_call_at_a_time(Canonicalizer.forget)
    map_for = _one_call_at_a_time(Canonicalizer.map_for)
    dropping_decisions = _one_call_at_a_time(Canonicalizer.dropping_decisions)
    canonical_url = _one_call_at_a_time(Canonicalizer.canonical_url)
    canonical_text = _one_call_at_a_time(Canonicalizer.canonical_text)
    canonical_texts = _one_call_at_a_time(Canonicalizer.canonical_texts)
    canonical_block = _one_call_at_a_time(Canonicalizer.canonical_block)
    stream_records = _one_call_at_a_time(Canonicalizer.stream_records)
    decide = _one_call_at_a_time(Canonicalizer.decide)
    canonicalize = _one_call_at_a_time(Canonicalizer.canonicalize)
    explain = _one_call_at_a_time(Canonicalizer.explain)


class StoredLiveMaps(LiveMaps):
    """The live maps on disk: :meth:`apply` writes each map's document to ``store``, with
    its :class:`LiveMap` record beside it, and the process holds only what the domains it
    met last need: their maps compiled in a canonicalizer that reads them from the store on
    demand (:class:`~miqps.canonical.Canonicalizer` with ``maps``), and their
    :class:`LiveMap` records, ``cache_domains`` of each at most. The counts are kept as maps
    come and go, and the store files the maps by age, so nothing is held per domain.

    The same rules as :class:`LiveMaps`: a newer version wins, the same version and the same
    map change nothing; :meth:`remove` deletes the domain's map from the store. After each
    change the canonicalizer forgets the domain, so its next URL reads the new map.
    """

    def __init__(
        self,
        reverify_after: float,
        store: MapStore,
        cache_domains: int = DEFAULT_CACHE_DOMAINS,
        layers: StaticLayers | None = None,
        *,
        use_prior: bool = True,
    ) -> None:
        canonicalizer = _SharedCanonicalizer(
            layers, use_prior=use_prior, maps=store, cache_domains=cache_domains
        )
        super().__init__(reverify_after, canonicalizer=canonicalizer)
        self.store = store
        self.cache_domains = max(1, cache_domains)
        self._recent: OrderedDict[str, LiveMap] = OrderedDict()
        self._domains, self._patterns = self._count()

    def _count(self) -> tuple[int, int]:
        """The domains and patterns of the maps the store holds (a store kept from the
        process's last run holds some)."""
        domains = patterns = 0
        for _, raw in self.store.notes(_RECORD):
            domains += 1
            patterns += len(orjson.loads(raw)[2])
        return domains, patterns

    def apply(self, domain_map: DomainMap, document: bytes | None = None) -> bool:
        decided = {key: decision.decided_at for key, decision in domain_map.patterns.items()}
        return self._store_map(
            domain_map.domain,
            MapFacts.of_map(domain_map).record(),
            _Record.of(domain_map.version, decided, domain_map.updated_at),
            document if document is not None else domain_map.dumps().encode(),
            lambda: domain_map,
        )

    def apply_document(self, document: Mapping[str, Any], raw: bytes) -> bool:
        """:meth:`apply` without building the map's objects: its facts record is read from
        the document, which is most of what restoring a maps partition costs."""
        facts, decided = facts_record_of_document(document)
        return self._store_map(
            document["domain"],
            facts,
            _Record.of(int(document["version"]), decided, document.get("updated_at", "")),
            raw,
            lambda: DomainMap.from_json(document),
        )

    def _store_map(
        self,
        domain: str,
        facts: bytes,
        record: _Record,
        document: bytes,
        domain_map: Callable[[], DomainMap],
    ) -> bool:
        """Store ``domain``'s map (its ``document``, facts record and record) unless a newer
        version, or the same map (``domain_map`` builds it, for a document of the same
        version stored as another text), is stored already."""
        key = domain.encode()
        with self._lock:
            noted = self.store.note(_RECORD + key)
            previous = _Record.loads(noted) if noted is not None else None
            if previous is not None and (
                previous.version > record.version
                or (
                    previous.version == record.version
                    and self._stored_is(domain, document, domain_map)
                )
            ):
                return False
            self.store.put(domain, document, facts)
            self.store.put_note(_RECORD + key, record.dumps())
            self._file_by_age(key, previous, record)
            self._domains += previous is None
            self._patterns += len(record.decided) - (len(previous.decided) if previous else 0)
            self._recent.pop(domain, None)
            self.canonicalizer.forget(domain)
            return True

    def _stored_is(self, domain: str, document: bytes, domain_map: Callable[[], DomainMap]) -> bool:
        stored = self.store.document(domain)
        if stored is None:
            return False
        if stored == document:
            return True
        return DomainMap.from_json(orjson.loads(stored)) == domain_map()

    def _file_by_age(self, key: bytes, previous: _Record | None, record: _Record | None) -> None:
        """File the map of ``key`` by its ``updated_at`` (none without one), in place of
        where ``previous`` filed it."""
        if previous is not None and previous.updated_at > 0:
            self.store.delete_note(_BY_AGE + struct.pack(">d", previous.updated_at) + key)
        if record is not None and record.updated_at > 0:
            # Big-endian doubles above 0 sort as the numbers do.
            self.store.put_note(_BY_AGE + struct.pack(">d", record.updated_at) + key, b"")

    def remove(self, domain: str) -> None:
        key = domain.encode()
        with self._lock:
            noted = self.store.note(_RECORD + key)
            if noted is not None:
                previous = _Record.loads(noted)
                self.store.delete(domain)
                self.store.delete_note(_RECORD + key)
                self._file_by_age(key, previous, None)
                self._domains -= 1
                self._patterns -= len(previous.decided)
            self._recent.pop(domain, None)
            self.canonicalizer.forget(domain)

    def file_under(self, partition: int, domain: str) -> None:
        self.store.put_note(_partition_note(partition, domain), b"")

    def unfile(self, partition: int, domain: str) -> None:
        self.store.delete_note(_partition_note(partition, domain))

    def filed_under(self, partition: int) -> int:
        return sum(1 for _ in self.store.note_keys(_partition_note(partition, "")))

    def forget_partition(self, partition: int) -> int:
        """Remove the maps of the domains filed under ``partition``, and its stored
        offset; return how many. In this order, so that a crash half-way leaves the
        partition to be read from its beginning, or still filed (and removed at the next
        start, when not followed then)."""
        self.store.delete_note(_offset_note(partition))
        prefix = _partition_note(partition, "")
        keys = list(self.store.note_keys(prefix))
        for key in keys:
            self.remove(key[len(prefix) :].decode())
            self.store.delete_note(key)
        return len(keys)

    def origin(self) -> StoreOrigin | None:
        """The maps topic the store holds the maps of, if it says."""
        return StoreOrigin.loads(self.store.meta(_ORIGIN))

    def keep_if_of(self, origin: StoreOrigin) -> str | None:
        """Keep what the store holds if it is of the maps topic ``origin``; otherwise empty
        it. Either way the store is then of ``origin``. Returns why it was emptied (None
        when kept, or when it held nothing)."""
        with self._lock:
            why = why_emptied(self.origin(), origin)
            if why is None and self.store.meta(_FORMAT) != _STORE_FORMAT:
                why = "its maps are stored in another format (of another version of miqps)"
            if why is not None and self.store.first_note(b"") is None:
                why = None  # a new store
            if why is not None:
                if self.canonicalizer.maps_held:
                    for domain in self.store.domains():
                        self.canonicalizer.forget(domain)
                self.store.clear()
                self._recent.clear()
                self._domains = self._patterns = 0
            self.store.set_meta(_ORIGIN, origin.dumps())
            self.store.set_meta(_FORMAT, _STORE_FORMAT)
            return why

    def stored_offset(self, partition: int) -> StoredOffset | None:
        """Where the feed reads ``partition`` next, as noted (None: from its beginning)."""
        raw = self.store.note(_offset_note(partition))
        return StoredOffset.loads(raw) if raw is not None else None

    def note_offsets(self, offsets: Mapping[int, StoredOffset]) -> None:
        """Note where the feed reads each partition next: once every record before it is
        applied, never before (a crash between the two makes the next start apply some
        records again, which changes nothing: ``tests/streams/maps/test_kept.py``
        replays every suffix)."""
        for partition, offset in offsets.items():
            self.store.put_note(_offset_note(partition), offset.dumps())

    def stored_partitions(self, partitions: int) -> set[int]:
        """The partitions below ``partitions`` with a stored offset or a domain filed."""
        return {
            partition
            for partition in range(partitions)
            if self.store.note(_offset_note(partition)) is not None
            or self.store.first_note(_partition_note(partition, "")) is not None
        }

    def get(self, domain: str) -> LiveMap | None:
        with self._lock:
            recent = self._recent
            live = recent.get(domain)
            if live is not None:
                recent.move_to_end(domain)
                return live
            noted = self.store.note(_RECORD + domain.encode())
            if noted is None:
                return None
            live = recent[domain] = _Record.loads(noted).live_map(self.reverify_after)
            if len(recent) > self.cache_domains:
                recent.popitem(last=False)
            return live

    def map_for(self, domain: str) -> DomainMap | None:
        """The live map of ``domain``, read from the store (and not kept)."""
        document = self.store.document(domain)
        return DomainMap.from_json(orjson.loads(document)) if document is not None else None

    def __len__(self) -> int:
        return self._domains

    def held(self) -> HeldMaps:
        canonicalizer = self.canonicalizer
        return HeldMaps(canonicalizer.maps_held, len(self._recent), canonicalizer.maps_read)

    def summary(self) -> MapsSummary:
        oldest = self.store.first_note(_BY_AGE)
        return MapsSummary(
            self._domains,
            self._patterns,
            struct.unpack(">d", oldest[len(_BY_AGE) : len(_BY_AGE) + 8])[0] if oldest else None,
        )

    def close(self) -> None:
        self.store.close()


def _partition_note(partition: int, domain: str) -> bytes:
    return _BY_PARTITION + struct.pack(">I", partition) + domain.encode()


def _offset_note(partition: int) -> bytes:
    return _OFFSET + struct.pack(">I", partition)


def worker_live_maps(settings: Settings, process: str) -> LiveMaps:
    """The live maps of one process of a worker (``process``: ``front`` or ``worker``).

    With ``MIQPS_MAPS_CACHE_DOMAINS`` above 0, they are kept on disk in
    ``MIQPS_STATE_DIR/live-maps/<process>``, as the process's last run left them: its map
    feed checks that they are of the same maps topic, and resumes each partition where it
    stopped (:class:`~streams.maps.feed.MapFeed`). A store that does not open (its files
    corrupt or cut short, as a crash or a full disk can leave them) is removed, with one
    warning, and built again from the topic. With 0, every map is held in memory."""
    cache = settings.maps_cache_domains
    reverify_after = settings.policy.reverify_after
    if cache == 0:
        return LiveMaps(reverify_after)
    folder = settings.state_dir / LIVE_MAPS_FOLDER / process
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        live = _open_stored(folder, reverify_after, cache)
    except Exception as error:  # rocksdict raises Exception for every RocksDB error
        log.warning(
            "live maps: the store in %s does not open (%s); removed, to be built again from %s",
            folder,
            error,
            settings.topics.maps,
        )
        shutil.rmtree(folder, ignore_errors=True)
        live = _open_stored(folder, reverify_after, cache)
    log.info(
        "live maps: kept in %s (%d domain maps there), at most %d domains' held in memory",
        folder,
        len(live),
        cache,
    )
    return live


def _open_stored(folder: Path, reverify_after: float, cache: int) -> StoredLiveMaps:
    """The live maps of the store in ``folder``, counted; the store is closed again when
    that fails (RocksDB would not open it twice in one process)."""
    store = MapStore(folder)
    try:
        return StoredLiveMaps(reverify_after, store, cache)
    except BaseException:
        store.close()
        raise
