"""Pages a crawler already fetched, sent as evidence: what a probe of their URLs would
have given, so that learning fetches only what they leave undecided.

An observation is one JSON object (the stream reads them from ``miqps.observations``):

- ``url``: the URL the crawler asked for;
- ``status``: the HTTP status of the answer it ended on;
- ``final_url``: where redirects led (default: ``url``); ``redirects``: how many
  (default: 0 when ``final_url`` is ``url``, else 1);
- the page, in one of two forms:

  - ``body``: the answer's text, with ``content_type`` (HTML when missing); it is reduced
    to the page's content blocks here, as a probe's answer is
    (:func:`miqps.content.snapshot_of`), under the fetcher's body cap;
  - ``page``: the page already reduced by :mod:`miqps.content`, as
    :func:`observation_record` writes it: a crawler in Python sends a few hundred bytes
    instead of the body.

The same rules as for a probe's answer and a crawl archive's (:mod:`miqps.warc`): 429
and 5xx answers, interstitials, client-side shells, unparsable pages and bodies over the
cap are no evidence; they are counted and their URLs fetched as without observations. An
observed page, fetched hours or days before, answers a comparison only when it shows no
difference (:mod:`miqps.prober`): a page that changed over time is fetched afresh.

:class:`ObservedPages` holds the latest page of each URL, filed under the part of the stream
it came from; :class:`RestoredPages` is what a restore of one part read again, merged into
them without undoing what was observed since. :class:`RecalledPages` holds, for a while,
the pages a probing worker fetched itself, which its next learning runs of a domain take by
the same rule as observed ones.
"""

from __future__ import annotations

import itertools
import sys
import time
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from miqps.content import (
    Snapshot,
    packed_blocks,
    page_document,
    page_from_document,
    snapshot_of,
    unpacked_blocks,
)
from miqps.prober import TakeOutcome
from miqps.urls import InvalidURL, NormalizedURL, parse


class InvalidObservation(ValueError):
    """A record that is not an observation; ``reason`` says why, in one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Observation:
    """One observed page: ``url`` normalized (:func:`miqps.urls.parse`), and what a probe
    of it would have given, or why it is no evidence (``unjudgeable``)."""

    url: str
    host: str
    pattern: str
    snapshot: Snapshot | None
    fetches: int
    unjudgeable: str | None = None


def observation_record(
    url: str,
    status: int,
    body: bytes,
    *,
    final_url: str | None = None,
    redirects: int | None = None,
    content_type: str = "",
) -> bytes:
    """The observation of a page a crawler fetched, its page reduced here: what a crawler
    in Python sends (the Scrapy add-on does). Raises :class:`InvalidObservation` for a
    ``url`` or ``final_url`` that is not a URL."""
    final = final_url or url
    hops = redirects if redirects is not None else int(final != url)
    _url(url, "url")
    _url(final, "final_url")
    snapshot = snapshot_of(status, final, body, content_type, hops, url)
    record: dict[str, Any] = {"url": url, "status": status, "final_url": final}
    record["redirects"] = hops
    record["page"] = page_document(snapshot)
    if snapshot.unjudgeable is not None:
        record["unjudgeable"] = snapshot.unjudgeable
    return orjson.dumps(record)


def read_observation(value: bytes | None, *, max_bytes: int) -> Observation:
    """The observation of one record; raises :class:`InvalidObservation` when it is none.
    A body longer than ``max_bytes`` (the fetcher's cap) is read as no evidence."""
    if not value:
        raise InvalidObservation("an empty observation")
    try:
        record = orjson.loads(value)
    except orjson.JSONDecodeError as error:
        raise InvalidObservation(f"an observation that is not JSON: {error}") from None
    if not isinstance(record, dict):
        raise InvalidObservation("an observation is a JSON object")
    url = _url(record.get("url"), "url")
    status = record.get("status")
    if not (isinstance(status, int) and not isinstance(status, bool) and 100 <= status <= 599):
        raise InvalidObservation("an observation's status is an HTTP status, 100 to 599")
    final = _url(record.get("final_url", record["url"]), "final_url")
    redirects = record.get("redirects", int(final.url != url.url))
    if not (isinstance(redirects, int) and not isinstance(redirects, bool) and redirects >= 0):
        raise InvalidObservation("an observation's redirects is a count")
    fetches = redirects + 1
    if "page" in record:
        try:
            snapshot = page_from_document(record["page"])
        except (ValueError, TypeError, KeyError) as error:
            raise InvalidObservation(f"an observation's page is not a page: {error}") from None
        unjudgeable = record.get("unjudgeable")
        if unjudgeable is not None and not isinstance(unjudgeable, str):
            raise InvalidObservation("an observation's unjudgeable is a reason (a string)")
        if snapshot.status != status:
            raise InvalidObservation("an observation's page has another status than its own")
        snapshot = Snapshot(
            status, final.url, snapshot.blocks, snapshot.canonical_hint, redirects, unjudgeable
        )
    elif "body" in record:
        body, content_type = record["body"], record.get("content_type", "")
        if not isinstance(body, str) or not isinstance(content_type, str):
            raise InvalidObservation("an observation's body and content_type are strings")
        data = body.encode("utf-8", "surrogatepass")
        if len(data) > max_bytes:
            return Observation(
                url.url,
                url.host,
                url.pattern,
                None,
                fetches,
                f"body over the cap of {max_bytes} bytes",
            )
        try:
            snapshot = snapshot_of(status, final.url, data, content_type, redirects, url.url)
        except Exception as error:  # a page the parser chokes on is no evidence, as probed
            return Observation(
                url.url,
                url.host,
                url.pattern,
                None,
                fetches,
                f"unparsable page: {type(error).__name__}",
            )
    else:
        raise InvalidObservation("an observation holds its page: a body or a page")
    if status == 429 or status >= 500:
        return Observation(url.url, url.host, url.pattern, None, fetches, f"HTTP {status}")
    if snapshot.unjudgeable is not None:
        return Observation(url.url, url.host, url.pattern, None, fetches, snapshot.unjudgeable)
    return Observation(url.url, url.host, url.pattern, snapshot, fetches)


def _url(value: object, field: str) -> NormalizedURL:
    if not isinstance(value, str):
        raise InvalidObservation(f"an observation's {field} is a URL (a string)")
    try:
        return parse(value)
    except InvalidURL as error:
        raise InvalidObservation(f"an observation's {field} is not a URL: {error}") from None


@dataclass(frozen=True, slots=True)
class _Kept:
    """An observed page, compact: block keys and digests interleaved; ``source`` is the part
    of the stream it was read from (a partition of ``miqps.observations``), ``where`` the
    URL's host and pattern."""

    status: int
    final_url: str
    hint: str | None
    redirects: int
    blocks: array[int]
    source: int
    where: tuple[str, str]


def _kept(observation: Observation, snapshot: Snapshot, source: int) -> _Kept:
    return _Kept(
        snapshot.status,
        snapshot.final_url,
        snapshot.canonical_hint,
        snapshot.redirects,
        packed_blocks(snapshot.blocks),
        source,
        (sys.intern(observation.host), sys.intern(observation.pattern)),
    )


RESTORE_OUTCOMES = ("kept", "no evidence", "invalid")


class RestoredPages:
    """The observations of one ``source`` read again, oldest first: the latest of each URL
    (a later one that is no evidence drops it, as :meth:`ObservedPages.add` does), at most
    ``max_pages`` of them, the least recently observed going first; and what was read, by
    outcome (``invalid``: records that are not observations, counted only). Built apart, then
    merged by :meth:`ObservedPages.restored`."""

    def __init__(self, source: int, max_pages: int) -> None:
        self.source = source
        self.max_pages = max(1, max_pages)
        self.pages: OrderedDict[str, _Kept] = OrderedDict()
        self.by_outcome: dict[str, int] = dict.fromkeys(RESTORE_OUTCOMES, 0)

    def add(self, observation: Observation) -> bool:
        pages = self.pages
        pages.pop(observation.url, None)
        if observation.snapshot is None:
            self.by_outcome["no evidence"] += 1
            return False
        pages[observation.url] = _kept(observation, observation.snapshot, self.source)
        if len(pages) > self.max_pages:
            pages.popitem(last=False)
        self.by_outcome["kept"] += 1
        return True

    def invalid(self) -> None:
        self.by_outcome["invalid"] += 1

    @property
    def records(self) -> int:
        return sum(self.by_outcome.values())

    def __len__(self) -> int:
        return len(self.pages)


class ObservedPages:
    """The latest observation of each URL, for :class:`miqps.prober.PageProber`
    (:class:`miqps.prober.Observations`): at most ``max_pages`` of them, the least
    recently observed or used going first; and, for a learning run's sample pool, the URLs
    of a pattern held (:meth:`urls_of`).

    Each page is filed under the ``source`` it was read from, so that the pages of a
    source can be dropped (:meth:`give_up`) and a source's older observations read again
    and merged (:meth:`restoring`, then :meth:`restored`) while newer ones keep coming."""

    def __init__(self, max_pages: int) -> None:
        self.max_pages = max(1, max_pages)
        self._pages: OrderedDict[str, _Kept] = OrderedDict()
        self._by_pattern: dict[tuple[str, str], dict[str, None]] = {}
        self._noting: dict[int, set[str]] = {}

    def add(self, observation: Observation, source: int = 0) -> bool:
        """Keep ``observation`` in place of its URL's older one; False when it is no
        evidence (the older one is dropped too: it is no longer what the URL gives)."""
        noting = self._noting.get(source)
        if noting is not None:
            noting.add(observation.url)
        self._drop(observation.url)
        snapshot = observation.snapshot
        if snapshot is None:
            return False
        self._keep(observation.url, _kept(observation, snapshot, source))
        return True

    def _keep(self, url: str, kept: _Kept) -> None:
        """File ``kept`` as the newest page, and drop the oldest one over the bound."""
        self._pages[url] = kept
        self._by_pattern.setdefault(kept.where, {})[url] = None
        if len(self._pages) > self.max_pages:
            self._drop(next(iter(self._pages)))

    def _drop(self, url: str) -> None:
        kept = self._pages.pop(url, None)
        if kept is None:
            return
        urls = self._by_pattern[kept.where]
        del urls[url]
        if not urls:
            del self._by_pattern[kept.where]

    def restoring(self, source: int) -> None:
        """A restore of ``source`` begins: from now on, note the URLs :meth:`add` sets or
        drops from it, newer than anything the restore reads."""
        self._noting[source] = set()

    def restored(self, restored: RestoredPages) -> int:
        """Merge the pages of a restore begun by :meth:`restoring`, but for the URLs
        observed since (their newer observation stands), in the order they were observed,
        under the bound; returns how many were merged. Nothing is merged when the source
        was given up meanwhile."""
        noted = self._noting.pop(restored.source, None)
        if noted is None:
            return 0
        merged = 0
        for url, kept in restored.pages.items():
            if url in noted:
                continue
            self._drop(url)
            self._keep(url, kept)
            merged += 1
        return merged

    def abandon(self, source: int) -> None:
        """A restore of ``source`` ends without pages (it failed): stop noting."""
        self._noting.pop(source, None)

    def give_up(self, source: int) -> int:
        """Drop the pages of ``source`` (and any restore of it under way); returns how
        many were dropped."""
        self._noting.pop(source, None)
        doomed = [url for url, kept in self._pages.items() if kept.source == source]
        for url in doomed:
            self._drop(url)
        return len(doomed)

    def held(self, source: int) -> int:
        """Pages of ``source`` held."""
        return sum(1 for kept in self._pages.values() if kept.source == source)

    def urls_of(self, host: str, pattern: str, limit: int) -> list[str]:
        """Up to ``limit`` URLs of ``pattern`` on ``host`` whose pages are held, the most
        recently observed first."""
        urls = self._by_pattern.get((host, pattern))
        if not urls:
            return []
        return list(itertools.islice(reversed(urls), limit))

    def holds(self, url: str) -> bool:
        return url in self._pages

    def observed(self, url: str) -> TakeOutcome | None:
        kept = self._pages.get(url)
        if kept is None:
            return None
        self._pages.move_to_end(url)
        snapshot = Snapshot(
            kept.status, kept.final_url, unpacked_blocks(kept.blocks), kept.hint, kept.redirects
        )
        return TakeOutcome(snapshot, fetches=kept.redirects + 1)

    def __len__(self) -> int:
        return len(self._pages)


@dataclass(frozen=True, slots=True)
class _Recalled:
    """A page fetched by the worker, compact, and when it was kept."""

    kept_at: float
    status: int
    final_url: str
    hint: str | None
    redirects: int
    blocks: array[int]


class RecalledPages:
    """Pages the probing worker fetched in its learning runs, kept ``max_age`` seconds from
    the end of the run that fetched them (at most ``max_pages``, the oldest going first), for
    the next learning runs of their domain (:class:`miqps.prober.Observations`).

    A learning run in the stream starts as its domain's pool of sample URLs grows, so it
    shares most of its samples with the runs before it. A recalled page answers a
    comparison only with "unchanged", as an observed one does; any other answer is fetched
    afresh. A run that reverifies a pattern does not take them: it exists to see what the
    site gives now (``max_age`` bounds the rest), and neither do audits."""

    def __init__(
        self, max_pages: int, max_age: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_pages = max(1, max_pages)
        self.max_age = max_age
        self.clock = clock
        self._pages: OrderedDict[str, _Recalled] = OrderedDict()
        self.served = 0
        """First takes served, over the worker's life."""

    def keep(self, pages: Iterable[tuple[str, Snapshot]]) -> None:
        """Keep ``pages`` (URL, fetched snapshot), fetched by a run that just ended."""
        now = self.clock()
        held = self._pages
        for url, snapshot in pages:
            held.pop(url, None)
            held[url] = _Recalled(
                now,
                snapshot.status,
                snapshot.final_url,
                snapshot.canonical_hint,
                snapshot.redirects,
                packed_blocks(snapshot.blocks),
            )
        while len(held) > self.max_pages:
            held.popitem(last=False)
        self._forget_older_than(now - self.max_age)

    def _forget_older_than(self, moment: float) -> None:
        held = self._pages
        while held and next(iter(held.values())).kept_at < moment:
            held.popitem(last=False)

    def _page(self, url: str) -> _Recalled | None:
        page = self._pages.get(url)
        if page is None or page.kept_at < self.clock() - self.max_age:
            return None
        return page

    def holds(self, url: str) -> bool:
        return self._page(url) is not None

    def observed(self, url: str) -> TakeOutcome | None:
        page = self._page(url)
        if page is None:
            return None
        self.served += 1
        snapshot = Snapshot(
            page.status, page.final_url, unpacked_blocks(page.blocks), page.hint, page.redirects
        )
        return TakeOutcome(snapshot, fetches=page.redirects + 1)

    def __len__(self) -> int:
        self._forget_older_than(self.clock() - self.max_age)
        return len(self._pages)
