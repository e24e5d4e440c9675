"""What the canonicalizer front forwards for learning, so that the per-URL path stays lean.

Only URLs of unlearned patterns (and of learned ones due for re-verification) are looked at.
A URL is forwarded at once when it brings a pattern, a parameter value or an item of a
parameter (:func:`miqps.learner.item_key`) this worker has not forwarded yet (up to
``values_per_name`` values and ``items_per_name`` items per parameter: the items the learner
wants of a choice-like one, the most it wants of any); other URLs are only counted,
and the counts go out in bulk with :meth:`LocalSampler.drain_counts`. Memory is bounded by
``max_entries`` patterns, oldest first out: an evicted pattern merely gets forwarded again.

A forwarded sample is not trusted to arrive (Faust's consumer can drop messages around a
rebalance, see :mod:`streams.agents.pattern_stats`): while its pattern still needs
learning, :meth:`LocalSampler.due_resends` gives its first URL again ``resend_after``
seconds after it was forwarded, then after twice as long, and so on, with a count of 0 so
that a copy that did arrive adds no URL to the pattern's count.

URLs of learned patterns that drop parameters are looked at by :class:`AuditForwarder`: an
item the core's :class:`~miqps.audit.AuditRule` chooses, and this worker has not forwarded
yet, goes to the probing worker as an ``audit`` request. What it needs of each decision is
read once per map version (the live maps hold a map as its JSON, which costs tens of
microseconds to decode) and kept for at most ``max_domains`` domains.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from miqps.audit import AuditRule, ItemMemory
from miqps.learner import LearnConfig, item_key
from miqps.maps import DecisionSummary
from miqps.urls import NormalizedURL, path_shape
from streams.messages import AUDIT, ProbeRequest, RequestedPattern

MAX_RESEND_DOUBLINGS = 7


class _Entry:
    __slots__ = ("basis", "domain", "items", "pattern", "pending", "resends", "url", "values")

    def __init__(self, domain: str, pattern: str, basis: str, url: str) -> None:
        self.domain = domain
        self.pattern = pattern
        self.basis = basis
        self.url = url
        self.values: dict[str, set[int]] = {}
        self.items: dict[str, set[int]] = {}
        self.pending = 0
        self.resends = 0


@dataclass(frozen=True, slots=True)
class Resend:
    """A sample forwarded again: its pattern still needs learning."""

    domain: str
    pattern: str
    url: str
    basis: str


@dataclass(frozen=True, slots=True)
class PendingCount:
    domain: str
    pattern: str
    basis: str
    count: int


class LocalSampler:
    def __init__(
        self,
        max_entries: int,
        values_per_name: int,
        items_per_name: int = LearnConfig().choice_items,
        resend_after: float = float("inf"),
    ) -> None:
        self.max_entries = max_entries
        self.values_per_name = values_per_name
        self.items_per_name = items_per_name
        self.resend_after = resend_after
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._dirty: dict[str, _Entry] = {}
        self._resends: list[tuple[float, int, str, _Entry]] = []
        self._pushed = itertools.count()

    def __len__(self) -> int:
        return len(self._entries)

    def offer(self, domain: str, pattern: str, url: NormalizedURL, basis: str) -> int:
        """How many URLs to report with this one if it must be forwarded now, else 0."""
        key = f"{domain} {pattern} {basis}"
        entry = self._entries.get(key)
        if entry is None:
            if len(self._entries) >= self.max_entries:
                self._evict_oldest()
            entry = self._entries[key] = _Entry(domain, pattern, basis, url.url)
            self._remember(entry, url)
            if self.resend_after != float("inf"):
                self._push_resend(time.monotonic() + self.resend_after, key, entry)
            return 1
        if self._remember(entry, url):
            count = entry.pending + 1
            entry.pending = 0
            self._dirty.pop(key, None)
            return count
        entry.pending += 1
        self._dirty[key] = entry
        return 0

    def _evict_oldest(self) -> None:
        """Forget the oldest pattern; its pending count still goes out with the next drain."""
        key, evicted = self._entries.popitem(last=False)
        if evicted.pending:
            self._dirty[key] = evicted

    def _remember(self, entry: _Entry, url: NormalizedURL) -> bool:
        novel = False
        limit, item_limit = self.values_per_name, self.items_per_name
        values, items = entry.values, entry.items
        for name in url.names:
            seen = values.get(name)
            if seen is None:
                seen = values[name] = set()
                items[name] = set()
            if len(seen) < limit:
                digest = hash(url.value_of(name))
                if digest not in seen:
                    seen.add(digest)
                    novel = True
            known = items[name]
            if len(known) < item_limit:
                digest = hash(item_key(url, name))
                if digest not in known:
                    known.add(digest)
                    novel = True
        return novel

    def due_resends(
        self, needs_learning: Callable[[str, str, str], bool], now: float | None = None
    ) -> list[Resend]:
        """The samples to forward again now: those whose pattern still needs learning
        (``needs_learning(domain, pattern, basis)``) when their time came; each is due
        again after twice the previous wait. Patterns evicted or learned are forgotten."""
        now = time.monotonic() if now is None else now
        due: list[Resend] = []
        heap = self._resends
        while heap and heap[0][0] <= now:
            _, _, key, entry = heapq.heappop(heap)
            if self._entries.get(key) is not entry:
                continue
            if not needs_learning(entry.domain, entry.pattern, entry.basis):
                continue
            due.append(Resend(entry.domain, entry.pattern, entry.url, entry.basis))
            entry.resends += 1
            wait = self.resend_after * 2 ** min(entry.resends, MAX_RESEND_DOUBLINGS)
            self._push_resend(now + wait, key, entry)
        return due

    def _push_resend(self, at: float, key: str, entry: _Entry) -> None:
        heap = self._resends
        heapq.heappush(heap, (at, next(self._pushed), key, entry))
        if len(heap) > 2 * self.max_entries:
            # Evicted patterns' times linger until due: keep only the remembered ones'.
            heap[:] = [item for item in heap if self._entries.get(item[2]) is item[3]]
            heapq.heapify(heap)

    def drain_counts(self) -> list[PendingCount]:
        counts = [
            PendingCount(entry.domain, entry.pattern, entry.basis, entry.pending)
            for entry in self._dirty.values()
            if entry.pending
        ]
        for entry in self._dirty.values():
            entry.pending = 0
        self._dirty.clear()
        return counts


class AuditForwarder:
    """Which URLs of learned patterns go to the probing worker to be audited."""

    def __init__(self, rule: AuditRule, max_items: int, max_domains: int = 20_000) -> None:
        self.rule = rule
        self.forwarded = ItemMemory(max_items)
        self.max_domains = max_domains
        self._targets: OrderedDict[str, tuple[int, Mapping[str, DecisionSummary]]] = OrderedDict()

    def offer(
        self,
        dropping: Callable[[str], tuple[int, Mapping[str, DecisionSummary]] | None],
        version: int,
        url: NormalizedURL,
        pattern: str,
        now: float,
    ) -> bytes | None:
        """The audit request for ``url`` (of ``pattern``, decided by version ``version``
        of its domain's map) if its item is to be audited and was not sent yet.
        ``dropping`` is :meth:`~miqps.canonical.Canonicalizer.dropping_decisions` of the
        live maps: it is read once per map version."""
        target = self._targets_of(url.host, version, dropping).get(pattern)
        if target is None:
            return None
        digest = self.rule.chooses(url, target)
        if digest is None or not self.forwarded.add(digest):
            return None
        request = ProbeRequest(
            url.host,
            path_shape(url.path),
            {pattern: RequestedPattern(AUDIT, target.decided_at, target.urls_seen, now)},
            (url.url,),
            now,
        )
        return request.to_bytes()

    def _targets_of(
        self,
        domain: str,
        version: int,
        dropping: Callable[[str], tuple[int, Mapping[str, DecisionSummary]] | None],
    ) -> Mapping[str, DecisionSummary]:
        known = self._targets.get(domain)
        if known is not None and known[0] == version:
            return known[1]
        self._targets[domain] = known = dropping(domain) or (version, {})
        self._targets.move_to_end(domain)
        if len(self._targets) > self.max_domains:
            self._targets.popitem(last=False)
        return known[1]
