"""A learning run's checkpoints: what ``miqps learn`` keeps when it is stopped, and how the
same command resumes.

A domain is the unit of progress: its patterns are decided together (the learner pools
their evidence) and audited against its newest map. A checkpoint writes the maps file
whole, with the final map of every domain done so far and every other map as it was, and
beside it ``OUT.progress.json``, naming the run (a digest of its URLs and of the options that
change decisions) and the domains done. Both are written to a temporary file and renamed,
so whatever stops the process, each file on disk is whole: the previous checkpoint or the
new one.

Rerunning the same command finds both: the domains done are taken as they are, neither
fetched nor audited again, and the others are learned from the maps they had, as the
interrupted run would have. So the maps a resumed run ends with decide what an
uninterrupted run's decide. A finished run removes the progress file; a progress file of
another run (other URLs or options) is not resumed.

What a domain in progress had probed is not lost either: ``OUT.probes.jsonl`` journals the
outcome of every take of a URL (:meth:`miqps.prober.PageProber.snapshot` and its refetches,
the audits' own) as it completes, one JSON line each, appended and flushed, and synced with
each checkpoint. Its first line names the run, as the progress file does; each other line
names a take by its URL and how many takes of that URL the run started before it, and holds
what the learner reads of it: the snapshot (status, final URL, redirects, canonical hint,
and its blocks, in order: where on the page, and the hash of what is there; never the body),
or the failure and its kind; and how many requests it sent. A rerun of the same run
serves each take it journaled instead of probing it, at no cost to the host (no request, no
wait on its pace, no robots.txt); a take it lacks is probed and journaled. A line torn by a
kill, the last one, is left out; a journal of another run is started afresh.

The learner's choices depend on the order outcomes arrive in (which block it already knows
for noise, which comparison spares a refetch), so a journaled outcome is served in the
order the interrupted run received it, once every task has gone as far as it can without
it, as it had in that run, where a host's answers come a pace apart. A resumed run then
takes the steps the interrupted run took, asks for the takes it asked for, and decides as an
uninterrupted run decides. Should it ask for another take first, the outcome it passed over
is served whenever it is asked for.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sized
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson

from miqps.content import page_document, page_from_document
from miqps.maps import DomainMap, write_maps
from miqps.prober import TakeOutcome
from miqps.urls import InvalidURL, parse

PROGRESS_FORMAT = 1
JOURNAL_FORMAT = 1
SETTLE_TURNS = 64
"""Loop turns the tasks are given to go as far as they can before the next journaled
outcome is served, where the event loop does not show what is ready to run."""
SETTLE_TURNS_AT_MOST = 1000
"""The same where it does (CPython's): turns until nothing is ready, at most this many."""


def progress_path(out: Path) -> Path:
    """Where the progress of a run writing ``out`` is kept."""
    return out.with_name(out.name + ".progress.json")


def run_digest(urls: Iterable[str], options: Mapping[str, object]) -> str:
    """What makes two runs the same command: the URLs, in order, and the options that change
    decisions (not the pace, the proxy or the time allowed)."""
    digest = hashlib.sha256(json.dumps(dict(options), sort_keys=True).encode())
    for url in urls:
        digest.update(url.encode("utf-8", "surrogatepass") + b"\n")
    return digest.hexdigest()


def journal_path(out: Path) -> Path:
    """Where the probe outcomes of a run writing ``out`` are journaled."""
    return out.with_name(out.name + ".probes.jsonl")


class UnreadableProgress(ValueError):
    """A progress file that cannot be used (not JSON, another format)."""


@dataclass(frozen=True, slots=True)
class Progress:
    run: str
    done: frozenset[str]


def read_progress(out: Path) -> Progress | None:
    """The progress kept beside ``out``, None if there is none; raises
    :class:`UnreadableProgress` or :class:`OSError`."""
    path = progress_path(out)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        document = json.loads(text)
        if document.get("format") != PROGRESS_FORMAT:
            raise UnreadableProgress(f"{path}: an unknown format")
        run, done = document["run"], document["done"]
        if not isinstance(run, str) or not all(isinstance(d, str) for d in done):
            raise UnreadableProgress(f"{path}: not a progress file")
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        if isinstance(error, UnreadableProgress):
            raise
        raise UnreadableProgress(f"{path}: not a progress file") from None
    return Progress(run, frozenset(done))


def _write_whole(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    tmp.replace(path)


@dataclass(slots=True)
class Checkpoint:
    """The maps of a run as it goes: ``maps`` starts as the previous version and takes each
    domain's final map as it is done."""

    out: Path
    run: str
    maps: dict[str, DomainMap]
    done: set[str] = field(default_factory=set)
    resumed: frozenset[str] = frozenset()
    saved_done: int = 0
    """How many domains were done at the last save, or when the run started."""
    journal: ProbeJournal | None = None

    def finish(self, domain: str, final: DomainMap) -> None:
        self.maps[domain] = final
        self.done.add(domain)

    @property
    def unsaved(self) -> bool:
        return len(self.done) != self.saved_done

    def save(self) -> None:
        """Write the maps and the progress, each whole."""
        write_maps(self.out, self.maps.values())
        document = {"format": PROGRESS_FORMAT, "run": self.run, "done": sorted(self.done)}
        _write_whole(progress_path(self.out), json.dumps(document) + "\n")
        if self.journal is not None:
            self.journal.sync()
        self.saved_done = len(self.done)

    def complete(self) -> None:
        """Write the final maps; the run needs no resuming any more."""
        write_maps(self.out, self.maps.values())
        if self.journal is not None:
            self.journal.remove()
        progress_path(self.out).unlink(missing_ok=True)


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One take's outcome: take ``take`` of ``url`` (0 for its first)."""

    url: str
    take: int
    outcome: TakeOutcome

    def to_json(self) -> bytes:
        entry: dict[str, Any] = {"url": self.url, "take": self.take}
        outcome = self.outcome
        snapshot = outcome.snapshot
        if snapshot is None:
            entry["failure"], entry["kind"] = outcome.failure, outcome.kind
        else:
            entry["page"] = page_document(snapshot)
        entry["fetches"] = outcome.fetches
        return orjson.dumps(entry)

    @classmethod
    def from_json(cls, line: bytes) -> JournalEntry:
        """The entry on ``line``; raises ValueError, TypeError or KeyError if it is none."""
        entry = orjson.loads(line)
        url, take, fetches = entry["url"], entry["take"], entry["fetches"]
        if not (isinstance(url, str) and _count_of(take) and _count_of(fetches)):
            raise ValueError("not a journal entry")
        page = entry.get("page")
        if page is None:
            failure, kind = entry["failure"], entry["kind"]
            if not (isinstance(failure, str) and isinstance(kind, str)):
                raise ValueError("not a journal entry")
            return cls(url, take, TakeOutcome(None, failure, kind, fetches))
        return cls(url, take, TakeOutcome(page_from_document(page), fetches=fetches))


def _count_of(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def read_journal(path: Path, run: str) -> list[JournalEntry]:
    """The entries of the journal at ``path``, in the order they were written, if it is the
    journal of ``run``; none if it is missing or another run's. A line that is not a whole
    entry (the last one, torn by a kill) is left out. Raises :class:`OSError`."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    lines = data.split(b"\n")
    try:
        header = orjson.loads(lines[0])
    except orjson.JSONDecodeError:
        return []
    if header != {"format": JOURNAL_FORMAT, "run": run}:
        return []
    entries: list[JournalEntry] = []
    seen: set[tuple[str, int]] = set()
    for line in lines[1:]:
        try:
            entry = JournalEntry.from_json(line)
        except (ValueError, TypeError, KeyError):
            continue
        if (entry.url, entry.take) not in seen:
            seen.add((entry.url, entry.take))
            entries.append(entry)
    return entries


def _host(url: str) -> str:
    try:
        return parse(url).host
    except InvalidURL:
        return ""


class ProbeJournal:
    """The journal of a run's takes (:class:`miqps.prober.TakeJournal`): it serves the
    outcomes a previous attempt of the run journaled, in their order, and journals the others
    as they complete. Close it when the run ends."""

    def __init__(self, path: Path, run: str, entries: Iterable[JournalEntry] = ()) -> None:
        self.path = path
        self.run = run
        self._held: dict[tuple[str, int], TakeOutcome] = {}
        for entry in entries:
            self._held.setdefault((entry.url, entry.take), entry.outcome)
        self._order = list(self._held)
        self._next = 0
        self._passed_over: set[tuple[str, int]] = set()
        self._waiting: dict[tuple[str, int], asyncio.Future[None]] = {}
        self._driver: asyncio.Task[None] | None = None
        self._takes: Counter[str] = Counter()
        self._handle: IO[bytes] | None = None
        self.journaled: Counter[str] = Counter()
        """Page fetches journaled, per host: those served and those probed since."""
        for (url, _), outcome in self._held.items():
            self.journaled[_host(url)] += outcome.fetches
        self.held = sum(self.journaled.values())
        """Page fetches of the previous attempt the journal can serve."""
        self.replayed = 0
        """Page fetches served from the journal instead of being made."""
        self.error: str | None = None
        """Why journaling stopped, if it did: the run went on without it."""

    @classmethod
    def open(cls, out: Path, run: str, *, replay: bool, done: Collection[str] = ()) -> ProbeJournal:
        """The journal beside ``out``, holding what an earlier attempt of ``run`` journaled
        (with ``replay``) for the domains not ``done``, written anew, whole, and open to
        journal more. Raises :class:`OSError`."""
        path = journal_path(out)
        entries = read_journal(path, run) if replay else []
        kept = [entry for entry in entries if _host(entry.url) not in done]
        header = orjson.dumps({"format": JOURNAL_FORMAT, "run": run})
        _write_whole(path, b"".join(line + b"\n" for line in (header, *_lines(kept))).decode())
        journal = cls(path, run, kept)
        journal._handle = path.open("ab")
        return journal

    async def recall(self, url: str) -> tuple[int, TakeOutcome | None]:
        take = self._takes[url]
        self._takes[url] += 1
        key = (url, take)
        outcome = self._held.pop(key, None)
        if outcome is None:
            return take, None
        if key not in self._passed_over and self._next < len(self._order):
            turn = asyncio.get_running_loop().create_future()
            self._waiting[key] = turn
            if self._driver is None:
                self._driver = asyncio.ensure_future(self._serve_in_order())
            await turn
        self.replayed += outcome.fetches
        return take, outcome

    async def _serve_in_order(self) -> None:
        """Serve the held outcomes in the journal's order, each once every task has gone
        as far as it can without it; one no take asks for by then is passed over."""
        while self._next < len(self._order):
            await _settle()
            key = self._order[self._next]
            self._next += 1
            turn = self._waiting.pop(key, None)
            if turn is None:
                self._passed_over.add(key)
            elif not turn.done():
                turn.set_result(None)
        for turn in self._waiting.values():  # none is left but by a bug: never hang on one
            if not turn.done():
                turn.set_result(None)
        self._waiting.clear()

    def record(self, url: str, take: int, outcome: TakeOutcome) -> None:
        if self._handle is None:
            return
        try:
            line = JournalEntry(url, take, outcome).to_json()
        except TypeError:  # not JSON (a lone surrogate): probed again on a resume
            return
        try:
            self._handle.write(line + b"\n")
            self._handle.flush()
        except OSError as error:
            self.error = f"{self.path}: {error.strerror}"
            self.close()
            return
        self.journaled[_host(url)] += outcome.fetches

    def sync(self) -> None:
        """Make what is journaled durable, as a checkpoint is."""
        if self._handle is not None:
            try:
                os.fsync(self._handle.fileno())
            except OSError as error:
                self.error = f"{self.path}: {error.strerror}"
                self.close()

    def close(self) -> None:
        if self._driver is not None:
            self._driver.cancel()
            self._driver = None
        if self._handle is not None:
            handle, self._handle = self._handle, None
            try:
                handle.close()
            except OSError as error:
                self.error = self.error or f"{self.path}: {error.strerror}"

    def remove(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


def _lines(entries: Iterable[JournalEntry]) -> Iterable[bytes]:
    return (entry.to_json() for entry in entries)


async def _settle() -> None:
    """Let every other task run until it waits: on I/O, a timer, or a journaled outcome."""
    # CPython's event loop keeps the callbacks ready to run in ``_ready``: once it is empty
    # while this task runs, every other task waits.
    ready: Sized | None = getattr(asyncio.get_running_loop(), "_ready", None)
    for _ in range(SETTLE_TURNS if ready is None else SETTLE_TURNS_AT_MOST):
        await asyncio.sleep(0)
        if ready is not None and not ready:
            return
