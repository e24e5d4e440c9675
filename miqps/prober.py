"""Comparing a URL with and without some parameters, on evidence from real fetches.

Each URL is fetched once for its snapshot. When a comparison shows a difference that is not
yet known to be noise, the original is fetched again to learn which blocks change by
themselves; when what is left is confined to blocks hardly ever seen stable, once more, so
that a block rotating among a few variants, which repeats by chance on one refetch, is not
taken for content. When what is left sits only where the other page's layout puts it (a
print view, an A/B layout), it is that page that is fetched again. Timeouts, failures,
non-2xx originals, pages that are mostly noise, interstitials (retried with backoff) and
client-side shells are *inconclusive*, never "unchanged".

HTML is parsed off the event loop, in a small thread pool, under a time cap. What a take of
a URL gave (:class:`TakeOutcome`) can be journaled, and served again instead of fetched
when an interrupted run resumes (:class:`TakeJournal`).

The first take of a URL can come from pages someone else fetched (:class:`Observations`: a
crawl archive, :mod:`miqps.warc`), days before. Such a page answers a comparison only when
it shows no difference: two different items do not become one by ageing, so "unchanged"
stands whenever the pages were fetched. Any other answer (a difference, a status, a page
that cannot be judged on the other side) may be the work of time, so the observed side is
fetched afresh and the comparison made again on fresh pages, as without observations; and
noise is only ever learned between fresh fetches of one URL, so a page that changed over
days is never taken for a page whose blocks rotate.

Pages the same learner fetched in its earlier runs (``recalled``,
:class:`miqps.observations.RecalledPages`) serve first takes by the same rule, and are
counted apart from the observed ones (:attr:`PageProber.recalled_takes`).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from miqps.content import (
    Snapshot,
    VolatilityModel,
    block_key,
    differing_paths,
    snapshot_of,
)
from miqps.fetch import Fetcher, FetchFailed, FetchResult

# The key that stands for "the HTTP status differs": never volatile.
STATUS_KEY = block_key("@status")
PARSE_TIMEOUT = 10.0
_parser_pool: ThreadPoolExecutor | None = None


def _parsers() -> ThreadPoolExecutor:
    global _parser_pool
    if _parser_pool is None:
        _parser_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="miqps-parse")
    return _parser_pool


class Outcome(Enum):
    CHANGED = "changed"
    UNCHANGED = "unchanged"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True, slots=True)
class Comparison:
    """An outcome and, when the page changed, the blocks that made the difference."""

    outcome: Outcome
    differences: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class TakeOutcome:
    """What one take of a URL gives the learner: a judgeable snapshot, or why there is none
    (``failure``, and its ``kind`` for :mod:`miqps.update`); ``fetches`` is how many
    requests it sent to the host (:attr:`miqps.fetch.FetchResult.requests`), for each
    interstitial retried too."""

    snapshot: Snapshot | None
    failure: str | None = None
    kind: str | None = None
    fetches: int = 0


class TakeJournal(Protocol):
    """Where the outcomes of a run's takes are kept, to be served again instead of probed
    when the run is resumed (:class:`miqps.checkpoint.ProbeJournal`). A take is named by
    its URL and how many takes of that URL the run started before it."""

    async def recall(self, url: str) -> tuple[int, TakeOutcome | None]:
        """Number this take of ``url``; its journaled outcome, or None to probe it."""
        ...

    def record(self, url: str, take: int, outcome: TakeOutcome) -> None:
        """Keep the outcome of take ``take`` of ``url``, just probed."""
        ...


class Observations(Protocol):
    """Pages fetched by someone else (:class:`miqps.warc.Archive`): a URL's first take is
    served from them when they hold it."""

    def holds(self, url: str) -> bool:
        """Whether a first take of ``url`` would be served."""
        ...

    def observed(self, url: str) -> TakeOutcome | None:
        """What a probe of ``url`` would have given, or None to probe it."""
        ...


_INCONCLUSIVE = Comparison(Outcome.INCONCLUSIVE)
_UNCHANGED = Comparison(Outcome.UNCHANGED)


class PageProber:
    def __init__(
        self,
        fetcher: Fetcher,
        volatility: VolatilityModel | None = None,
        *,
        interstitial_retries: int = 2,
        max_refetches: int = 2,
        confirm_after: int = 2,
        audit_every: int = 4,
        journal: TakeJournal | None = None,
        observations: Observations | None = None,
        recalled: Observations | None = None,
    ) -> None:
        self.fetcher = fetcher
        self.journal = journal
        self.observations = observations
        self.recalled = recalled
        """Pages this prober's owner fetched in earlier runs: first takes like observed
        ones, when the observations do not hold the URL."""
        self._observed: dict[str, tuple[Snapshot, int]] = {}
        self._recalled: set[str] = set()
        self._journaled: set[str] = set()
        self._fresh: dict[str, asyncio.Task[Snapshot | None]] = {}
        self.probed_takes = 0
        """Takes probed: neither journaled nor observed."""
        self.volatility = volatility or VolatilityModel()
        self.interstitial_retries = interstitial_retries
        self.max_refetches = max_refetches
        self.confirm_after = confirm_after
        self.audit_every = audit_every
        self._shortcuts: Counter[str] = Counter()
        self._first: dict[str, asyncio.Task[Snapshot | None]] = {}
        self._again: dict[tuple[str, int], asyncio.Task[Snapshot | None]] = {}
        self._learned: set[tuple[str, int]] = set()
        self.failures: dict[str, str] = {}
        self.failure_kinds: dict[str, str] = {}
        """Per URL, the failure's kind (:attr:`FetchFailed.kind`) or why its page is
        unjudgeable: what :mod:`miqps.update` names an undecided pattern by."""

    def has_snapshot(self, url: str) -> bool:
        return url in self._first

    @property
    def takes_pages_at_hand(self) -> bool:
        """Whether some first takes may cost no fetch: observed or recalled pages."""
        return self.observations is not None or self.recalled is not None

    def at_hand(self, url: str) -> bool:
        """Whether the first take of ``url`` costs no fetch: taken already, observed or
        recalled."""
        if url in self._first:
            return True
        return any(pages is not None and pages.holds(url) for pages in self._page_sources())

    def _page_sources(self) -> tuple[Observations | None, Observations | None]:
        return self.observations, self.recalled

    @property
    def observed_takes(self) -> int:
        """First takes served from the observations."""
        return len(self._observed) - len(self._recalled)

    @property
    def recalled_takes(self) -> int:
        """First takes served from the recalled pages."""
        return len(self._recalled)

    def probed_pages(self) -> Iterator[tuple[str, Snapshot]]:
        """The judgeable first takes of this prober's URLs that it fetched itself: neither
        observed nor recalled (unless fetched afresh), nor served by the journal."""
        for url, task in self._first.items():
            if url in self._observed and url not in self._fresh:
                continue
            if url in self._journaled or not task.done() or task.cancelled():
                continue
            if task.exception() is None and (snapshot := task.result()) is not None:
                yield url, snapshot

    @property
    def observed_refetched(self) -> int:
        """Observed first takes fetched afresh to judge a difference."""
        return sum(url in self._fresh for url in self._observed if url not in self._recalled)

    @property
    def fetches_saved(self) -> int:
        """Fetches the observed takes spared: those of the takes never fetched afresh."""
        return sum(
            n
            for url, (_, n) in self._observed.items()
            if url not in self._fresh and url not in self._recalled
        )

    def fetched(self, url: str) -> Snapshot | None:
        """The snapshot of ``url`` if it was fetched successfully already; never fetches."""
        task = self._first.get(url)
        if task is None or not task.done() or task.cancelled():
            return None
        return task.result()

    async def snapshot(self, url: str) -> Snapshot | None:
        task = self._first.get(url)
        if task is None:
            task = self._first[url] = asyncio.ensure_future(self._take(url, first=True))
        return await task

    async def _afresh(self, url: str) -> Snapshot | None:
        """A fresh take of observed ``url``, which stands as its first take from now on."""
        task = self._fresh.get(url)
        if task is None:
            task = self._fresh[url] = self._first[url] = asyncio.ensure_future(self._take(url))
        return await task

    def _is_observed(self, url: str, snapshot: Snapshot | None) -> bool:
        held = self._observed.get(url)
        return held is not None and held[0] is snapshot

    async def _refetch(self, url: str, attempt: int) -> Snapshot | None:
        task = self._again.get((url, attempt))
        if task is None:
            task = self._again[url, attempt] = asyncio.ensure_future(self._take(url))
        return await task

    async def _take(self, url: str, *, first: bool = False) -> Snapshot | None:
        """A judgeable snapshot of ``url``, or None with the reason in :attr:`failures`:
        from the journal when it holds this take of ``url``, else for a ``first`` take from
        the observations when they hold it, else probed (and journaled)."""
        journal = self.journal
        take, outcome = await journal.recall(url) if journal is not None else (0, None)
        if outcome is not None and first:
            self._journaled.add(url)
        if outcome is None and first:
            outcome = self._at_hand_take(url)
        if outcome is None:
            self.probed_takes += 1
            outcome = await self._probe(url)
            if journal is not None:
                journal.record(url, take, outcome)
        if outcome.snapshot is not None:
            self.failures.pop(url, None)  # an earlier take's, or an interstitial's
            self.failure_kinds.pop(url, None)
        else:
            self.failures[url] = outcome.failure or "no page"
            self.failure_kinds[url] = outcome.kind or self.failures[url]
        return outcome.snapshot

    def _at_hand_take(self, url: str) -> TakeOutcome | None:
        """The first take of ``url`` from the observations, else from the recalled pages;
        None when neither holds a judgeable page of it."""
        for pages in self._page_sources():
            outcome = pages.observed(url) if pages is not None else None
            if outcome is not None and outcome.snapshot is not None:
                self._observed[url] = (outcome.snapshot, outcome.fetches)
                if pages is self.recalled:
                    self._recalled.add(url)
                return outcome
        return None

    async def _probe(self, url: str) -> TakeOutcome:
        """Fetch ``url`` for a judgeable snapshot. An interstitial is fetched again after a
        backoff; every try is a fetch."""
        sent = 0
        outcome = TakeOutcome(None, "no attempt made", "no attempt made")
        for attempt in range(self.interstitial_retries + 1):
            if attempt:
                await asyncio.sleep(self.fetcher.config.backoff_base * 2 ** (attempt - 1))
            try:
                result = await self.fetcher.fetch(url)
            except FetchFailed as error:
                return TakeOutcome(None, error.reason, error.kind, sent + error.requests)
            sent += result.requests
            try:
                snapshot = await self._parse(result)
            except FetchFailed as error:
                self.fetcher.stats.unjudgeable += 1
                return TakeOutcome(None, error.reason, error.reason, sent)
            if snapshot.unjudgeable is None:
                return TakeOutcome(snapshot, fetches=sent)
            self.fetcher.stats.unjudgeable += 1
            outcome = TakeOutcome(None, snapshot.unjudgeable, snapshot.unjudgeable, sent)
            if not snapshot.unjudgeable.startswith("interstitial"):
                return outcome
        return outcome

    async def _parse(self, result: FetchResult) -> Snapshot:
        loop = asyncio.get_running_loop()
        work = loop.run_in_executor(
            _parsers(),
            snapshot_of,
            result.status,
            result.final_url,
            result.body,
            result.content_type,
            result.redirects,
            result.url,
        )
        try:
            return await asyncio.wait_for(work, PARSE_TIMEOUT)
        except TimeoutError:
            raise FetchFailed(f"page took over {PARSE_TIMEOUT:g}s to parse") from None
        except Exception as error:  # a page the parser chokes on is missing evidence
            raise FetchFailed(f"unparsable page: {type(error).__name__}") from None

    async def compare(self, template: str, original: str, reduced: str) -> Outcome:
        """Does ``reduced`` (``original`` minus some parameters) show another page?"""
        return (await self.compare_detail(template, original, reduced)).outcome

    async def compare_detail(self, template: str, original: str, reduced: str) -> Comparison:
        """:meth:`compare`, with the blocks that made a difference."""
        if original == reduced:
            return _UNCHANGED
        first, other = await asyncio.gather(self.snapshot(original), self.snapshot(reduced))
        if self._observed and (
            self._is_observed(original, first) or self._is_observed(reduced, other)
        ):
            if self._unchanged_as_seen(template, first, other):
                return _UNCHANGED
            await asyncio.gather(
                *(
                    self._afresh(url)
                    for url, seen in ((original, first), (reduced, other))
                    if self._is_observed(url, seen)
                )
            )
            return await self.compare_detail(template, original, reduced)
        if first is None or other is None or not 200 <= first.status < 300:
            return _INCONCLUSIVE
        if first.status != other.status:
            return Comparison(Outcome.CHANGED, frozenset((STATUS_KEY,)))
        volatility = self.volatility
        difference: set[int] | None = differing_paths(first, other) - volatility.paths(template)
        if difference and not self._trusted_stable(template, difference):
            difference = await self._learn_noise(template, original, first, difference)
            if difference is not None and difference.isdisjoint(first.blocks):
                # what is left sits only where the other page's layout puts it (a print
                # view, an A/B layout): only refetches of that page can show it moving
                difference = await self._learn_noise(template, reduced, other, difference)
        if difference is None:
            return _INCONCLUSIVE
        if volatility.too_noisy(template, first):
            return _INCONCLUSIVE
        if not difference:
            return _UNCHANGED
        return Comparison(Outcome.CHANGED, frozenset(difference))

    def _unchanged_as_seen(
        self, template: str, first: Snapshot | None, other: Snapshot | None
    ) -> bool:
        """Whether the two pages show no difference but known noise, without a fetch."""
        if first is None or other is None or not 200 <= first.status < 300:
            return False
        if first.status != other.status or self.volatility.too_noisy(template, first):
            return False
        return not differing_paths(first, other) - self.volatility.paths(template)

    async def _learn_noise(
        self, template: str, url: str, snapshot: Snapshot, difference: set[int]
    ) -> set[int] | None:
        """``difference`` less what refetches of ``url`` show changing by itself; None when
        a refetch fails or shows another status."""
        volatility = self.volatility
        for attempt in range(self.max_refetches):
            if not difference or difference.isdisjoint(snapshot.blocks):
                break
            again = await self._refetch(url, attempt)
            if again is None or again.status != snapshot.status:
                return None
            if (url, attempt) not in self._learned:
                # one refetch is one observation, however many comparisons share it
                self._learned.add((url, attempt))
                volatility.learn(template, snapshot, again)
            difference = difference - volatility.paths(template)
            if not self._needs_confirmation(template, difference):
                break
        return difference

    def _trusted_stable(self, template: str, difference: set[int]) -> bool:
        """Known-stable blocks spare a refetch, except every ``audit_every``-th time: a
        block rotating among two variants can look stable after a few lucky refetches, and
        only a refetch can show it moving again."""
        if not self.volatility.known_stable(template, difference):
            return False
        self._shortcuts[template] += 1
        return self._shortcuts[template] % self.audit_every != 0

    def _needs_confirmation(self, template: str, difference: set[int]) -> bool:
        """A difference confined to blocks seen stable fewer than ``confirm_after`` times
        may be a rotating block that repeated by chance: look once more."""
        count = self.volatility.stable_count
        return all(count(template, path) < self.confirm_after for path in difference)

    def still_changed(self, template: str, comparison: Comparison) -> bool:
        """Whether a CHANGED comparison still stands now that more noise may be known."""
        return bool(comparison.differences - self.volatility.paths(template))
