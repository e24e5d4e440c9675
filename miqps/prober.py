"""Comparing a URL with and without some parameters, on evidence from real fetches.

Each URL is fetched at most twice per learning run: once for its snapshot and, only when a
comparison shows a difference that is not yet known to be noise, once more to learn which
parts of the page change by themselves. Timeouts, failures, non-2xx originals and pages
that are mostly noise are *inconclusive*, never "unchanged".
"""

from __future__ import annotations

import asyncio
from enum import Enum

from miqps.content import (
    Snapshot,
    VolatilityModel,
    differing_paths,
    snapshot_bytes,
    snapshot_html,
)
from miqps.fetch import Fetcher, FetchFailed


class Outcome(Enum):
    CHANGED = "changed"
    UNCHANGED = "unchanged"
    INCONCLUSIVE = "inconclusive"


class PageProber:
    def __init__(self, fetcher: Fetcher, volatility: VolatilityModel | None = None) -> None:
        self.fetcher = fetcher
        self.volatility = volatility or VolatilityModel()
        self._first: dict[str, asyncio.Task[Snapshot | None]] = {}
        self._second: dict[str, asyncio.Task[Snapshot | None]] = {}
        self.failures: dict[str, str] = {}

    def has_snapshot(self, url: str) -> bool:
        return url in self._first

    def fetched(self, url: str) -> Snapshot | None:
        """The snapshot of ``url`` if it was fetched successfully already; never fetches."""
        task = self._first.get(url)
        if task is None or not task.done() or task.cancelled():
            return None
        return task.result()

    async def snapshot(self, url: str) -> Snapshot | None:
        task = self._first.get(url)
        if task is None:
            task = self._first[url] = asyncio.ensure_future(self._take(url))
        return await task

    async def _second_snapshot(self, url: str) -> Snapshot | None:
        task = self._second.get(url)
        if task is None:
            task = self._second[url] = asyncio.ensure_future(self._take(url))
        return await task

    async def _take(self, url: str) -> Snapshot | None:
        try:
            result = await self.fetcher.fetch(url)
        except FetchFailed as error:
            self.failures[url] = error.reason
            return None
        if "html" in result.content_type or not result.content_type:
            try:
                return snapshot_html(result.status, result.final_url, result.body,
                                     result.redirects)
            except Exception as error:  # a broken page is missing evidence, not a crash
                self.failures[url] = f"unparsable page: {type(error).__name__}"
                return None
        return snapshot_bytes(result.status, result.final_url, result.body, result.redirects)

    async def compare(self, template: str, original: str, reduced: str) -> Outcome:
        """Does ``reduced`` (``original`` minus some parameters) show another page?"""
        if original == reduced:
            return Outcome.UNCHANGED
        first, other = await asyncio.gather(self.snapshot(original), self.snapshot(reduced))
        if first is None or other is None or not 200 <= first.status < 300:
            return Outcome.INCONCLUSIVE
        if first.status != other.status:
            return Outcome.CHANGED
        noise = self.volatility.paths(template)
        difference = differing_paths(first, other) - noise
        if not difference:
            return self._unless_noisy(template, first, Outcome.UNCHANGED)
        if self.volatility.known_stable(template, difference):
            return self._unless_noisy(template, first, Outcome.CHANGED)
        second = await self._second_snapshot(original)
        if second is None or second.status != first.status:
            return Outcome.INCONCLUSIVE
        self.volatility.learn(template, first, second)
        remaining = differing_paths(first, other) - self.volatility.paths(template)
        return self._unless_noisy(
            template, first, Outcome.CHANGED if remaining else Outcome.UNCHANGED
        )

    def _unless_noisy(self, template: str, page: Snapshot, outcome: Outcome) -> Outcome:
        return Outcome.INCONCLUSIVE if self.volatility.too_noisy(template, page) else outcome
