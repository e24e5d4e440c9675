"""Maps on disk: each domain's map document in RocksDB (rocksdict), read when a URL of the
domain first needs it.

A :class:`Canonicalizer <miqps.canonical.Canonicalizer>` given a :class:`MapSource` holds
only the maps of the domains it met last (a bounded number), so its memory does not grow
with the number of maps. Two sources use :class:`MapStore`:

- a maps file too large to hold (``miqps canonicalize --maps``, ``Canonicalizer.from_file``)
  is indexed once (:func:`index_maps_file`): every line is checked as :func:`read_maps
  <miqps.maps.read_maps>` checks it, and the documents go to a store that later runs open
  at once, until the file changes;
- the stream's canonicalizer keeps the maps of the partitions it owns in a store of its own.

A store holds documents that were checked when they were written: reading one back only
decodes it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import orjson

from miqps.canonical import facts_record_of_document
from miqps.maps import InvalidMap, check_map, refuse, repeated_domain

INDEX_FORMAT = 2
IN_MEMORY_MAX_BYTES = 64 << 20
"""Maps files up to this size are read whole into memory; larger ones are indexed."""

_DOMAIN = b"d:"
_FACTS = b"f:"
_LINE = b"l:"
_META = b"m:"
_NOTE = b"n:"
_BATCH_BYTES = 16 << 20


class MapSource(Protocol):
    """Where a canonicalizer finds a domain's map when a URL of it comes. A source may
    also keep each map's facts record (:meth:`MapStore.facts`), which the canonicalizer
    then reads instead of the document: a few hundred bytes against kilobytes."""

    def document(self, domain: str) -> bytes | None:
        """The map document of ``domain`` (JSON, checked), None without one."""


def _options(block_cache_bytes: int, write_buffer_bytes: int) -> Any:
    from rocksdict import (
        BlockBasedIndexType,
        BlockBasedOptions,
        Cache,
        DBCompressionType,
        Options,
    )

    options = Options(raw_mode=True)
    options.create_if_missing(True)
    options.set_compression_type(DBCompressionType.lz4())
    table = BlockBasedOptions()
    table.set_block_cache(Cache(block_cache_bytes))
    table.set_bloom_filter(10, False)
    # Index and filters in partitions, in the block cache, their top levels pinned: with one
    # index block per file in the cache, maps' data blocks kept evicting it, and every read
    # of a store of 20,000 maps parsed it again (90-170 µs a read, against 14 here).
    table.set_cache_index_and_filter_blocks(True)
    table.set_index_type(BlockBasedIndexType.two_level_index_search())
    table.set_partition_filters(True)
    table.set_pin_top_level_index_and_filter(True)
    table.set_pin_l0_filter_and_index_blocks_in_cache(True)
    options.set_block_based_table_factory(table)
    options.set_max_open_files(256)
    options.set_write_buffer_size(write_buffer_bytes)
    return options


WRITE_BUFFER_BYTES = 32 << 20
"""The memory a store writes into before flushing it to a file (RocksDB's write buffer;
two at most). Restoring a maps partition writes about 15 KB a map: with 32 MiB, compacting
the files flushed costs less, and a map restored takes about 0.6× the CPU it takes with 4
MiB (``python -m bench.live_maps --in-process-only``)."""


class MapStore:
    """Map documents by domain in a RocksDB folder (``path``), plus a few named values of
    the store's owner (:meth:`meta`) and any number of its notes (:meth:`note`), kept in
    byte order apart from the maps.

    ``read_only`` opens a store another process may be reading too (an index); otherwise
    the folder is created when missing and only this process may open it.
    ``block_cache_bytes`` bounds RocksDB's cache of the store's blocks, and
    ``write_buffer_bytes`` its buffer of writes (:data:`WRITE_BUFFER_BYTES`).
    """

    def __init__(
        self,
        path: Path,
        *,
        read_only: bool = False,
        block_cache_bytes: int = 16 << 20,
        write_buffer_bytes: int = WRITE_BUFFER_BYTES,
    ) -> None:
        from rocksdict import AccessType, Rdict

        self.path = path
        access = AccessType.read_only() if read_only else AccessType.read_write()
        options = _options(block_cache_bytes, write_buffer_bytes)
        self._db = Rdict(str(path), options, access_type=access)

    def document(self, domain: str) -> bytes | None:
        value: bytes | None = self._db.get(_DOMAIN + domain.encode())
        return value

    def facts(self, domain: str) -> bytes | None:
        """The facts record of ``domain``'s map (:meth:`MapFacts.record
        <miqps.canonical.MapFacts.record>`), None without a map."""
        value: bytes | None = self._db.get(_FACTS + domain.encode())
        return value

    def put(self, domain: str, document: bytes, facts: bytes | None = None) -> None:
        """Keep ``document`` (checked) as ``domain``'s map, with its facts record
        (``facts``, made from the document when not given), in one write."""
        from rocksdict import WriteBatch

        key = domain.encode()
        batch = WriteBatch(raw_mode=True)
        batch.put(_DOMAIN + key, document)
        batch.put(_FACTS + key, facts if facts is not None else facts_record(document))
        self._db.write(batch)

    def delete(self, domain: str) -> None:
        key = domain.encode()
        self._db.delete(_DOMAIN + key)
        self._db.delete(_FACTS + key)

    def domains(self) -> Iterator[str]:
        """Every domain with a map, in byte order."""
        for key in self._db.keys(from_key=_DOMAIN):
            assert isinstance(key, bytes)  # a store in raw mode
            if not key.startswith(_DOMAIN):
                break
            yield key[len(_DOMAIN) :].decode()

    def meta(self, name: str) -> bytes | None:
        value: bytes | None = self._db.get(_META + name.encode())
        return value

    def set_meta(self, name: str, value: bytes) -> None:
        self._db.put(_META + name.encode(), value)

    def note(self, key: bytes) -> bytes | None:
        """The owner's note under ``key`` (:meth:`put_note`), None without one."""
        value: bytes | None = self._db.get(_NOTE + key)
        return value

    def put_note(self, key: bytes, value: bytes) -> None:
        self._db.put(_NOTE + key, value)

    def delete_note(self, key: bytes) -> None:
        self._db.delete(_NOTE + key)

    def first_note(self, prefix: bytes) -> bytes | None:
        """The smallest key of a note that starts with ``prefix``, None without one."""
        for key in self._db.keys(from_key=_NOTE + prefix):
            assert isinstance(key, bytes)  # a store in raw mode
            if key.startswith(_NOTE + prefix):
                return key[len(_NOTE) :]
            break
        return None

    def note_keys(self, prefix: bytes) -> Iterator[bytes]:
        """The keys of every note that starts with ``prefix``, in byte order."""
        for key in self._db.keys(from_key=_NOTE + prefix):
            assert isinstance(key, bytes)  # a store in raw mode
            if not key.startswith(_NOTE + prefix):
                break
            yield key[len(_NOTE) :]

    def notes(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """The key and value of every note that starts with ``prefix``, in byte order."""
        for key, value in self._db.items(from_key=_NOTE + prefix):
            assert isinstance(key, bytes) and isinstance(value, bytes)  # a store in raw mode
            if not key.startswith(_NOTE + prefix):
                break
            yield key[len(_NOTE) :], value

    def clear(self) -> None:
        """Delete everything the store holds: maps, meta and notes (one range deletion;
        RocksDB reclaims the space as it compacts)."""
        self._db.delete_range(b"", b"\xff")

    def flush(self) -> None:
        self._db.flush()

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> MapStore:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def facts_record(document: bytes) -> bytes:
    """The facts record of a checked map ``document``."""
    return facts_record_of_document(orjson.loads(document))[0]


def default_index_path(path: Path) -> Path:
    """Where the index of the maps file ``path`` is kept unless told otherwise: in the
    user's cache folder (``$XDG_CACHE_HOME``, else ``~/.cache``), one per file."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:20]
    return cache / "miqps" / "maps-index" / f"{path.name}-{digest}"


def _fingerprint(path: Path) -> bytes:
    """What says an index is of ``path`` as it is now: a maps file is rewritten whole, by
    a rename, so its inode, size or time changes with every version."""
    stat = path.stat()
    identity = {
        "format": INDEX_FORMAT,
        "file": str(path.resolve()),
        "inode": stat.st_ino,
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
    }
    return json.dumps(identity, sort_keys=True).encode()


def index_maps_file(
    path: Path,
    index: Path | None = None,
    on_invalid: Callable[[InvalidMap], None] | None = None,
    *,
    on_build: Callable[[Path], None] | None = None,
) -> MapStore:
    """The store of the maps of the file ``path``, opened read-only: the index at
    ``index`` (default :func:`default_index_path`) when it is of the file as it is now,
    otherwise a new one, built there first (``on_build`` is told where).

    Building checks every line as :func:`~miqps.maps.read_maps` does and refuses the
    same lines the same way: the first invalid line raises :class:`InvalidMap` naming
    ``file:line`` (no index is left), or with ``on_invalid`` goes there and is skipped, and
    a domain on more than one line is left out. Raises :class:`OSError` when the file cannot
    be read or the index cannot be written.
    """
    index = index if index is not None else default_index_path(path)
    fingerprint = _fingerprint(path)
    if (index / "CURRENT").exists():
        try:
            store = MapStore(index, read_only=True)
        except Exception:  # a broken index is rebuilt: it holds nothing of its own
            store = None
        if store is not None:
            if store.meta("source") == fingerprint:
                return store
            store.close()
    if on_build is not None:
        on_build(index)
    building = index.with_name(f"{index.name}.building-{os.getpid()}")
    shutil.rmtree(building, ignore_errors=True)
    building.parent.mkdir(parents=True, exist_ok=True)
    try:
        _build(path, building, fingerprint, on_invalid)
        shutil.rmtree(index, ignore_errors=True)
        building.rename(index)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    return MapStore(index, read_only=True)


def _build(
    path: Path,
    folder: Path,
    fingerprint: bytes,
    on_invalid: Callable[[InvalidMap], None] | None,
) -> None:
    from rocksdict import Rdict, WriteBatch, WriteOptions

    db = Rdict(str(folder), _options(8 << 20, 64 << 20))
    unlogged = WriteOptions()
    # A build that stops is thrown away: nothing to recover. (rocksdict's stub types this
    # property as a method.)
    unlogged.disable_wal = True  # type: ignore[method-assign,assignment]
    ambiguous: set[bytes] = set()
    try:
        batch = WriteBatch(raw_mode=True)
        pending = 0
        lines: dict[bytes, int] = {}  # the first line of each domain in the batch
        with path.open("rb") as handle:
            for number, line in enumerate(handle, 1):
                raw = line.strip()
                if not raw:
                    continue
                where = f"{path}:{number}"
                try:
                    document = check_map(line)
                except InvalidMap as error:
                    refuse(error.at(where), on_invalid)
                    continue
                domain: str = document["domain"]
                key = domain.encode()
                seen = lines.get(key)
                if seen is None and (stored := db.get(_LINE + key)) is not None:
                    seen = struct.unpack("<Q", stored)[0]
                if seen is not None:
                    ambiguous.add(key)
                    refuse(repeated_domain(domain, seen, where), on_invalid)
                    continue
                lines[key] = number
                batch.put(_LINE + key, struct.pack("<Q", number))
                batch.put(_DOMAIN + key, raw)
                batch.put(_FACTS + key, facts_record_of_document(document)[0])
                pending += len(raw)
                if pending >= _BATCH_BYTES:
                    db.write(batch, unlogged)
                    batch = WriteBatch(raw_mode=True)
                    pending = 0
                    lines.clear()
        for key in ambiguous:
            batch.delete(_DOMAIN + key)
            batch.delete(_FACTS + key)
        batch.put(_META + b"source", fingerprint)
        db.write(batch, unlogged)
        db.flush()
    finally:
        db.close()
