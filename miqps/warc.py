"""Crawl archives (WARC files) as evidence: the pages a crawler already fetched, served to
the prober instead of fetching them again.

Each response record becomes what a probe of its URL would have given
(:class:`~miqps.prober.TakeOutcome`), through the same code: its HTTP payload is decoded
under the fetcher's body cap (:class:`~miqps.fetch.BoundedDecoder`: at most one content
encoding, ``--max-bytes``), HTML becomes a snapshot by :func:`~miqps.content.snapshot_html`
and anything else by :func:`~miqps.content.snapshot_bytes`, and a redirect is followed
through the archive's own records (at most ``max_redirects`` hops, as a probe follows them):
the outcome of a URL that redirects is the page it lands on, with its final URL and hop
count. A revisit record is the page of the response it points at (by target URI, or by
payload digest), when that response was read. When an archive holds several captures of a
URL, the latest one (``WARC-Date``) stands.

A record a probe would find inconclusive is no evidence and is not served: 429 and 5xx
answers, interstitials, client-side shells, pages over the parsing caps, a body over the
cap, a redirect whose target the archives lack. Its URL is fetched as without an archive.

Bad input never stops the run: a file that is not a WARC, a record cut short or corrupt, a
gzip member that does not inflate, a record over the body cap, an archive none of whose
pages is on a domain being learned. Each is one line in :attr:`Archive.problems`, counted
by kind in :attr:`Archive.bad`; every record read before a broken one is kept.

The reader is warcio (``python -m bench.warc_learn --readers`` compares it with FastWARC:
both read far faster than pages are fingerprinted, and warcio reports a broken gzip member
or a cut record, where FastWARC ends the file silently).
"""

from __future__ import annotations

import gzip
import zlib
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from warcio.archiveiterator import ArchiveIterator  # type: ignore[import-untyped]
from warcio.bufferedreaders import ChunkedDataReader  # type: ignore[import-untyped]
from warcio.exceptions import ArchiveLoadFailed  # type: ignore[import-untyped]

from miqps.content import Snapshot, packed_blocks, snapshot_of, unpacked_blocks
from miqps.fetch import REDIRECT_STATUSES, BoundedDecoder, FetchFailed
from miqps.prober import TakeOutcome
from miqps.urls import InvalidURL, parse

SUFFIXES = (".warc", ".warc.gz")
READ_PIECE = 64 * 1024


class BadInput:
    """The kinds of bad input an archive can hold, as the summary counts them."""

    NOT_WARC = "not a WARC file"
    CORRUPT = "truncated or corrupt record"
    GZIP = "gzip member that does not inflate"
    TOO_LARGE = "record larger than the body cap"
    OTHER_WEB = "archive of another web"
    UNREADABLE = "file that cannot be read"


@dataclass(frozen=True, slots=True)
class _Held:
    """A page read from an archive, compact: block keys and digests interleaved."""

    status: int
    final_url: str
    hint: str | None
    blocks: array[int]
    date: str
    redirect_to: str | None = None

    def snapshot(self, final_url: str, redirects: int) -> Snapshot:
        return Snapshot(
            self.status,
            final_url,
            unpacked_blocks(self.blocks),
            self.hint,
            redirects,
        )


@dataclass(slots=True)
class Archive:
    """The pages of one or more WARC files, by normalized URL
    (:class:`miqps.prober.Observations`)."""

    max_redirects: int = 5
    pages: dict[str, _Held] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    """URLs of the HTML pages and redirects read, in the order first read: the corpus when
    no URL list is given."""
    problems: list[str] = field(default_factory=list)
    bad: Counter[str] = field(default_factory=Counter)
    records: int = 0
    """Response and revisit records read."""
    unjudgeable: int = 0
    """Records read that a probe would find inconclusive, not served."""
    files: int = 0
    hosts: dict[Path, set[str]] = field(default_factory=dict)
    """Per file read, the hosts of its records."""
    _pending: list[tuple[str, str, str | None, str | None, int]] = field(default_factory=list)
    _by_digest: dict[str, str] = field(default_factory=dict)

    def holds(self, url: str) -> bool:
        return self._landing(url) is not None

    def observed(self, url: str) -> TakeOutcome | None:
        """What a probe of ``url`` would have given, from the archive; None when it lacks
        the URL, or any page of its redirects."""
        landing = self._landing(url)
        if landing is None:
            return None
        held, final_url, hops = landing
        return TakeOutcome(held.snapshot(final_url, hops), fetches=hops + 1)

    def _landing(self, url: str) -> tuple[_Held, str, int] | None:
        held = self.pages.get(url)
        final_url = url
        for hop in range(self.max_redirects + 1):
            if held is None:
                return None
            if held.redirect_to is None:
                return held, held.final_url, hop
            final_url = held.redirect_to
            held = self.pages.get(final_url)
        return None

    def check_web(self, domains: set[str]) -> None:
        """Say which archives hold no page of ``domains`` (a crawl of another web): no URL
        being learned asks for their pages."""
        for path, hosts in self.hosts.items():
            if hosts and not hosts & domains:
                self._problem(
                    BadInput.OTHER_WEB,
                    f"{path}: none of its pages is on a domain of the URL list "
                    f"({_few(sorted(hosts))}): an archive of another crawl, not used",
                )

    def _problem(self, kind: str, line: str) -> None:
        self.bad[kind] += 1
        self.problems.append(line)

    def _keep(self, url: str, held: _Held, *, page: bool) -> None:
        known = self.pages.get(url)
        if known is None:
            if page:
                self.order.append(url)
        elif known.date > held.date:
            return
        self.pages[url] = held


def archive_files(path: Path) -> list[Path]:
    """The WARC files of ``path``: itself, or those of a folder (not recursing), sorted.
    Raises OSError when it cannot be read."""
    if path.is_dir():
        return sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(SUFFIXES))
    path.stat()
    return [path]


def read_archives(paths: Iterable[Path], *, max_bytes: int, max_redirects: int = 5) -> Archive:
    """Read every record of the WARC files at ``paths`` (files or folders)."""
    archive = Archive(max_redirects=max_redirects)
    for given in paths:
        try:
            files = archive_files(given)
        except OSError as error:
            archive._problem(BadInput.UNREADABLE, f"{given}: cannot read: {error.strerror}")
            continue
        if not files:
            archive._problem(BadInput.NOT_WARC, f"{given}: a folder with no .warc or .warc.gz")
        for file in files:
            archive.files += 1
            archive.hosts[file] = _read_file(archive, file, max_bytes)
    _resolve_revisits(archive)
    return archive


def _read_file(archive: Archive, path: Path, max_bytes: int) -> set[str]:
    """Read one file into ``archive``; the hosts of its pages."""
    hosts: set[str] = set()
    read = 0
    try:
        with path.open("rb") as handle:
            start = _start(handle)
            if not start.startswith(b"WARC/"):
                shown = start[:24].decode("ascii", "replace")
                archive._problem(
                    BadInput.NOT_WARC,
                    f"{path}: not a WARC file (it starts with {shown!r}, not 'WARC/')",
                )
                return hosts
            handle.seek(0)
            for record in _records(handle):
                read += 1
                _take_record(archive, path, record, max_bytes, hosts)
    except OSError as error:
        archive._problem(BadInput.UNREADABLE, f"{path}: cannot read: {error.strerror}")
    except ArchiveLoadFailed as error:
        message = str(error.msg if hasattr(error, "msg") else error).splitlines()[0][:120]
        if read == 0 and "Unknown archive format" in message:
            archive._problem(BadInput.NOT_WARC, f"{path}: not a WARC file ({message})")
        elif "\x1f\x8b" in message or "\\x1f\\x8b" in message:
            # a gzip member that did not inflate is read as raw bytes: its magic shows
            archive._problem(
                BadInput.GZIP,
                f"{path}: record {read + 1} is a gzip member that does not inflate; "
                f"the {read} records before it are used, those after it are not",
            )
        else:
            archive._problem(
                BadInput.CORRUPT,
                f"{path}: record {read + 1} is cut short or corrupt "
                f"({message}); the {read} records before it are used",
            )
    except (zlib.error, EOFError) as error:
        kind = BadInput.GZIP if isinstance(error, zlib.error) else BadInput.CORRUPT
        what = "a gzip member that does not inflate" if kind == BadInput.GZIP else "cut short"
        archive._problem(
            kind,
            f"{path}: record {read + 1} is {what} ({str(error)[:80]}); "
            f"the {read} records before it are used",
        )
    except (ValueError, IndexError, KeyError, UnicodeDecodeError) as error:
        archive._problem(
            BadInput.CORRUPT,
            f"{path}: record {read + 1} is corrupt "
            f"({type(error).__name__}); the {read} records before it are used",
        )
    return hosts


def _start(handle: IO[bytes]) -> bytes:
    """The first bytes of the file, inflated if it is gzipped."""
    head = handle.read(64)
    if head.startswith(b"\x1f\x8b"):
        handle.seek(0)
        try:
            return gzip.GzipFile(fileobj=handle).read(64)
        except (OSError, EOFError, zlib.error):
            return head
    return head


def _records(handle: IO[bytes]) -> Iterator[Any]:
    # check_digests would read every payload twice; a wrong digest is a crawler's problem
    yield from ArchiveIterator(handle, arc2warc=False, check_digests=False)


def _take_record(
    archive: Archive, path: Path, record: Any, max_bytes: int, hosts: set[str]
) -> None:
    kind = record.rec_type
    if kind not in ("response", "revisit"):
        return
    target = record.rec_headers.get_header("WARC-Target-URI")
    if not target:
        return
    try:
        url = parse(target.strip("<>")).url
    except InvalidURL:
        return
    archive.records += 1
    hosts.add(parse(url).host)
    date = record.rec_headers.get_header("WARC-Date") or ""
    http = record.http_headers
    if http is None:
        return
    status = _status(http)
    if kind == "revisit":
        archive._pending.append(
            (
                url,
                date,
                record.rec_headers.get_header("WARC-Refers-To-Target-URI"),
                record.rec_headers.get_header("WARC-Payload-Digest"),
                status,
            )
        )
        return
    digest = record.rec_headers.get_header("WARC-Payload-Digest")
    if digest:
        archive._by_digest.setdefault(digest, url)
    location = http.get_header("Location")
    if status in REDIRECT_STATUSES and location:
        try:
            to = parse(_join(target, location)).url
        except InvalidURL:
            return
        archive._keep(url, _Held(status, url, None, array("Q"), date, to), page=True)
        return
    if status == 429 or status >= 500:
        archive.unjudgeable += 1
        return
    content_type = (http.get_header("Content-Type") or "").lower()
    try:
        body = _body(record, http, max_bytes)
    except FetchFailed as error:
        if error.kind == "body too large":
            archive._problem(
                BadInput.TOO_LARGE,
                f"{path}: {url}: {error.reason} (--max-bytes): not used, fetched if needed",
            )
        else:
            archive._problem(BadInput.CORRUPT, f"{path}: {url}: {error.reason}: not used")
        return
    html = not content_type or "html" in content_type
    snapshot = snapshot_of(status, url, body, content_type, 0, url)
    if snapshot.unjudgeable is not None:
        archive.unjudgeable += 1
        return
    held = _Held(
        snapshot.status, url, snapshot.canonical_hint, packed_blocks(snapshot.blocks), date
    )
    archive._keep(url, held, page=html)


def _status(http: Any) -> int:
    try:
        return int(http.get_statuscode())
    except (TypeError, ValueError):
        raise ValueError("no HTTP status") from None


def _join(base: str, location: str) -> str:
    from urllib.parse import urljoin

    return urljoin(base, location.strip())


def _body(record: Any, http: Any, max_bytes: int) -> bytes:
    """The payload as a probe reads it: de-chunked, at most one content encoding undone,
    capped at ``max_bytes``; raises :class:`FetchFailed` like the fetcher."""
    stream = record.raw_stream
    if "chunked" in (http.get_header("Transfer-Encoding") or "").lower():
        stream = ChunkedDataReader(stream)
    decoder = BoundedDecoder(http.get_header("Content-Encoding") or "", max_bytes)
    pieces = []
    while True:
        piece = stream.read(READ_PIECE)
        if not piece:
            break
        pieces.append(decoder.feed(piece))
    if getattr(record.raw_stream, "limit", 0) > 0:  # the file ended inside the record
        raise ArchiveLoadFailed("the file ends inside the record")
    pieces.append(decoder.finish())
    return b"".join(pieces)


def _resolve_revisits(archive: Archive) -> None:
    """A revisit is the page of the response it points at, when that one was read."""
    for url, date, refers_to, digest, status in archive._pending:
        original = None
        if refers_to:
            try:
                original = archive.pages.get(parse(refers_to.strip("<>")).url)
            except InvalidURL:
                original = None
        if original is None and digest:
            source = archive._by_digest.get(digest)
            original = archive.pages.get(source) if source else None
        if original is None or original.redirect_to is not None:
            continue
        held = _Held(
            status if 200 <= status < 300 else original.status,
            url,
            original.hint,
            original.blocks,
            date,
        )
        archive._keep(url, held, page=True)
    archive._pending.clear()


def _few(names: Sequence[str], shown: int = 3) -> str:
    head = ", ".join(names[:shown])
    return head + (f" and {len(names) - shown} more" if len(names) > shown else "")
