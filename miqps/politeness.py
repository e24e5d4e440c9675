"""What a probed site asks of us, per host: robots.txt rules, a pace, pauses, and opt-outs.

- :class:`RobotsRules`: one host's robots.txt (RFC 9309), parsed by Protego, with its
  status: rules read, none published (a 4xx: everything allowed), or unreachable (a 5xx or
  no answer: nothing allowed until it answers again).
- :class:`HostPace`: the start of one request to a host at a time, spaced by the host's
  delay. The delay starts from the configured rate, never goes below the host's
  ``Crawl-delay`` or ``Request-rate``, and follows the server's latency and errors the way
  Scrapy's AutoThrottle does: it moves half-way toward ``latency / target concurrency``,
  at once if that is longer, and doubles on a server error (up to :data:`ERROR_SLOWDOWN`
  times the floor). A ``Retry-After`` pauses the host for every task.
- :func:`read_never_probe` and :func:`opted_out`: domains an operator never lets us fetch,
  subdomains included.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from protego import Protego

ROBOTS_MAX_BYTES = 500 * 1024
"""RFC 9309: a crawler must parse at least the first 500 KiB; we read no more."""
ROBOTS_CACHE_SECONDS = 24 * 3600.0
"""RFC 9309: a cached robots.txt should not be used for more than 24 hours."""
ROBOTS_RETRY_SECONDS = 600.0
"""How long an unreachable robots.txt keeps its host closed before it is asked again."""
ERROR_SLOWDOWN = 8.0
"""Errors alone stretch a host's delay to at most this many times its floor."""


class NotProbedKind(StrEnum):
    """Why a URL was not fetched at all: the site or the operator does not let us."""

    DISALLOWED = "disallowed by robots.txt"
    ROBOTS_UNREACHABLE = "robots.txt unreachable"
    OPTED_OUT = "opted out"
    CRAWL_DELAY_OVER_CAP = "Crawl-delay over the cap"
    HOST_DEFERRED = "host deferred"


class RobotsStatus(StrEnum):
    RULES = "rules"
    NONE = "none"
    UNREACHABLE = "unreachable"


@dataclass(frozen=True, slots=True)
class RobotsRules:
    """One host's robots.txt as fetched at ``fetched_at`` (monotonic seconds)."""

    status: RobotsStatus
    fetched_at: float
    parser: Protego | None = None
    reason: str = ""
    """Why it is unreachable: the failure of its fetch, or its HTTP status."""
    refusal_kind: str = ""
    """When the address guard refused it, the refusal's kind: the host is refused too."""

    @classmethod
    def parse(cls, text: str, fetched_at: float) -> RobotsRules:
        return cls(RobotsStatus.RULES, fetched_at, Protego.parse(text))

    def allows(self, url: str, product_token: str) -> bool:
        if self.status is RobotsStatus.UNREACHABLE:
            return False
        if self.parser is None:
            return True
        return bool(self.parser.can_fetch(url, product_token))

    def delay(self, product_token: str) -> float:
        """The seconds between requests the host asks for (``Crawl-delay`` or
        ``Request-rate``, the longer of the two), 0 if it asks for none."""
        if self.parser is None:
            return 0.0
        asked = float(self.parser.crawl_delay(product_token) or 0.0)
        rate = self.parser.request_rate(product_token)
        if rate is not None and rate.requests > 0:
            asked = max(asked, rate.seconds / rate.requests)
        return asked

    def expired(self, now: float) -> bool:
        lifetime = (
            ROBOTS_RETRY_SECONDS
            if self.status is RobotsStatus.UNREACHABLE
            else ROBOTS_CACHE_SECONDS
        )
        return now - self.fetched_at >= lifetime


def product_token(user_agent: str) -> str:
    """The product token robots.txt groups are matched on: ``miqps`` of ``miqps/0.4 (…)``."""
    return user_agent.split("/", 1)[0].split(None, 1)[0] if user_agent.strip() else "*"


class HostPace:
    """When the next request to one host may start, shared by every task of the process."""

    def __init__(
        self, start_delay: float, max_delay: float, target_concurrency: float, adaptive: bool
    ) -> None:
        self.floor = start_delay
        self.delay = start_delay
        self.max_delay = max(max_delay, start_delay)
        self.target_concurrency = max(target_concurrency, 1e-3)
        self.adaptive = adaptive
        self.paused_until = 0.0
        self.asked = 0.0
        """The seconds the host itself asks for between requests (0: none)."""
        self._next_start = 0.0
        self._turns = asyncio.Lock()
        self._one_at_a_time = asyncio.Lock()

    def ask_at_least(self, seconds: float, answered_at: float | None = None) -> None:
        """The host asks for at least ``seconds`` between requests (its Crawl-delay), in
        the robots.txt it answered at ``answered_at`` (monotonic): robots.txt is a request
        to the host too, so the next one starts that long after its answer."""
        self.asked = max(self.asked, seconds)
        self.floor = max(self.floor, seconds)
        self.max_delay = max(self.max_delay, self.floor)
        self.delay = max(self.delay, self.floor)
        if answered_at is not None:
            self._next_start = max(self._next_start, answered_at + self.asked)

    async def turn(self) -> None:
        """Wait until this host may be sent the next request, and take that turn."""
        async with self._turns:
            while True:
                now = time.monotonic()
                start = max(self._next_start, self.paused_until)
                if start <= now:
                    break
                await asyncio.sleep(start - now)
            self._next_start = now + self.delay

    @asynccontextmanager
    async def request(self) -> AsyncIterator[None]:
        """Take this host's next turn (:meth:`turn`) for one request, made inside.

        A host that asks for a delay gets one request at a time, each starting that delay
        after the previous one's answer: it sees at least that much between receiving two
        requests however long one takes to reach it (a start-to-start spacing alone lets a
        request held up on its way arrive closer to the next one)."""
        if not self.asked:
            await self.turn()
            yield
            return
        async with self._one_at_a_time:
            await self.turn()
            try:
                yield
            finally:
                self._next_start = max(self._next_start, time.monotonic() + self.asked)

    def pause(self, seconds: float) -> float:
        """No request to the host for ``seconds`` from now; returns the seconds the pause
        adds to the one already in force."""
        now = time.monotonic()
        until = now + seconds
        added = max(0.0, until - max(self.paused_until, now))
        self.paused_until = max(self.paused_until, until)
        return added

    def answered(self, latency: float, ok: bool) -> None:
        """An answer came after ``latency`` seconds; ``ok`` when it was a 2xx."""
        if not self.adaptive:
            return
        target = latency / self.target_concurrency
        new_delay = max(target, (self.delay + target) / 2.0)
        new_delay = min(max(self.floor, new_delay), self.max_delay)
        # Error pages are small and quick: they must not speed the pace up.
        if ok or new_delay > self.delay:
            self.delay = new_delay

    def struggled(self) -> None:
        """A server error, a timeout or a broken connection: slow down, by doubling the
        delay up to :data:`ERROR_SLOWDOWN` times the host's own floor (its latency may
        take it further, up to the maximum delay)."""
        if self.adaptive:
            limit = min(self.floor * ERROR_SLOWDOWN, self.max_delay)
            self.delay = max(self.delay, min(self.delay * 2.0, limit))


def read_never_probe(path: Path) -> frozenset[str]:
    """The domains listed in ``path``, one per line; blank lines and ``#`` comments are
    skipped. Raises OSError if it cannot be read, ValueError naming a line that is no
    domain."""
    domains: set[str] = set()
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            text = line.split("#", 1)[0].strip().lower().rstrip(".")
            if not text:
                continue
            if any(char in text for char in "/:?@ \t") or text.startswith("."):
                raise ValueError(f"{path}:{number}: not a domain: {line.strip()[:80]!r}")
            domains.add(text)
    return frozenset(domains)


def opted_out(host: str, domains: Iterable[str]) -> str | None:
    """The listed domain that covers ``host`` (itself or a parent domain), if any."""
    host = host.lower().rstrip(".")
    listed = frozenset(domains)
    labels = host.split(".")
    for start in range(len(labels)):
        candidate = ".".join(labels[start:])
        if candidate in listed:
            return candidate
    return None
