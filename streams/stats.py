"""Per-domain pattern statistics and samples, and when to ask for a probe.

One record per (domain, path shape), because the learner pools evidence per shape: tracking
parameters appear in every combination, so patterns multiply while each holds few URLs.
The record keeps, per pattern, when it was first seen, how many URLs it had and when it was
last requested; per parameter, the digests of up to ``min_distinct_values`` distinct
values; and a bounded pool of sample URLs that bring those values.

A pattern is requested once it is *ready* (every parameter that is not allowlisted has
enough distinct values, or has been seen often enough to show it has no more), or once it
is older than ``rare_after``. A request is sent once; another only if the map still does
not have the pattern after ``retry_after``, then after twice as long, and so on (up to
``2 ** MAX_RETRY_DOUBLINGS`` times ``retry_after``), so a request lost on its way is sent
again soon while a site that cannot be learned is not asked over and over.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

import orjson
import xxhash

from miqps.urls import NormalizedURL, split_pattern
from streams.messages import ProbeRequest, RequestedPattern, RequestReason
from streams.messages import shape_of as shape_of
from streams.settings import LearningPolicy

ENOUGH_SAMPLES: Final = "enough-samples"
TIME_LIMIT: Final = "time-limit"
REVERIFY: Final = "reverify"
RETRY: Final = "retry"


def stats_key(domain: str, shape: str) -> bytes:
    return f"{domain}\t{shape}".encode()


def value_digest(value: str) -> int:
    return xxhash.xxh3_64_intdigest(value.encode("utf-8", "surrogatepass"))


MAX_RETRY_DOUBLINGS = 7


@dataclass(slots=True)
class PatternState:
    first_seen: float
    urls: int = 0
    requested_at: float = 0.0
    basis: str = ""
    requests: int = 0

    def retry_delay(self, policy: LearningPolicy) -> float:
        """How long after its last request the pattern is asked for again."""
        return float(policy.retry_after * 2 ** min(max(self.requests - 1, 0), MAX_RETRY_DOUBLINGS))

    def waiting(self, now: float, policy: LearningPolicy) -> bool:
        return self.requested_at == 0.0 or now - self.requested_at >= self.retry_delay(policy)


@dataclass(slots=True)
class ShapeStats:
    domain: str
    shape: str
    patterns: dict[str, PatternState] = field(default_factory=dict)
    values: dict[str, list[int]] = field(default_factory=dict)
    pool: list[tuple[str, str]] = field(default_factory=list)

    def dumps(self) -> bytes:
        return orjson.dumps(
            {
                "d": self.domain,
                "s": self.shape,
                "p": {
                    key: [st.first_seen, st.urls, st.requested_at, st.basis, st.requests]
                    for key, st in self.patterns.items()
                },
                "v": self.values,
                "u": self.pool,
            }
        )

    @classmethod
    def loads(cls, data: bytes) -> ShapeStats:
        doc = orjson.loads(data)
        return cls(
            domain=doc["d"],
            shape=doc["s"],
            # Records written before the request count was kept have four fields.
            patterns={key: PatternState(*fields) for key, fields in doc["p"].items()},
            values=doc["v"],
            pool=[(pattern, url) for pattern, url in doc["u"]],
        )

    def next_deadline(
        self,
        policy: LearningPolicy,
        allowlist: frozenset[str],
        needs_learning: Callable[[str, str], bool],
    ) -> float | None:
        """When a pattern that still needs learning comes due without another sighting: a
        never-requested one at its time limit, a requested one once its retry delay is over
        (its request may have been lost). None when no pattern waits for a time."""
        deadlines: list[float] = []
        sampled = {pattern for pattern, _ in self.pool}
        occurrences: dict[str, int] | None = None
        for pattern, state in self.patterns.items():
            if pattern not in sampled or not needs_learning(pattern, state.basis):
                continue
            time_limit = state.first_seen + policy.rare_after
            if not state.requested_at:
                deadlines.append(time_limit)
                continue
            retry_at = state.requested_at + state.retry_delay(policy)
            if retry_at < time_limit:
                if occurrences is None:
                    occurrences = self.occurrences()
                if not self.ready(pattern, policy, allowlist, occurrences):
                    retry_at = time_limit
            deadlines.append(retry_at)
        return min(deadlines) if deadlines else None

    def observe(
        self,
        pattern: str,
        url: NormalizedURL | None,
        count: int,
        basis: str,
        now: float,
        policy: LearningPolicy,
        allowlist: frozenset[str],
    ) -> bool:
        """Count ``count`` URLs of ``pattern`` and consider ``url`` for the sample pool.

        Returns True when this starts a new round for the pattern (first sighting, or a
        re-verification of another decision), False otherwise.
        """
        state = self.patterns.get(pattern)
        started = False
        if state is None or state.basis != basis:
            if state is None and len(self.patterns) >= policy.max_patterns_per_shape:
                return False
            state = self.patterns[pattern] = PatternState(first_seen=now, basis=basis)
            started = True
        state.urls += max(count, 0)
        if url is not None:
            self._consider(pattern, url, policy, allowlist)
        return started

    def _consider(
        self, pattern: str, url: NormalizedURL, policy: LearningPolicy, allowlist: frozenset[str]
    ) -> None:
        text = url.url
        if any(sample == text for _, sample in self.pool):
            return
        own = sum(1 for key, _ in self.pool if key == pattern)
        fresh: list[tuple[str, int]] = []
        for name in url.names:
            value = url.value_of(name)
            if name in allowlist:
                continue
            seen = self.values.get(name, ())
            digest = value_digest(value)
            if len(seen) < policy.min_distinct_values and digest not in seen:
                fresh.append((name, digest))
        if own >= policy.urls_per_pattern and not fresh:
            return
        if len(self.pool) >= policy.max_pool_urls:
            if own:
                return
            self._make_room()
        self.pool.append((pattern, text))
        for name, digest in fresh:
            seen_list = self.values.setdefault(name, [])
            if digest not in seen_list:
                seen_list.append(digest)

    def _make_room(self) -> None:
        """Drop one sample of the pattern with the most samples, keeping its first."""
        counts: dict[str, int] = {}
        for key, _ in self.pool:
            counts[key] = counts.get(key, 0) + 1
        richest = max(counts, key=lambda key: counts[key])
        for index in range(len(self.pool) - 1, -1, -1):
            if self.pool[index][0] == richest:
                del self.pool[index]
                return

    def samples_of(self, pattern: str) -> int:
        return sum(1 for key, _ in self.pool if key == pattern)

    def ready(
        self,
        pattern: str,
        policy: LearningPolicy,
        allowlist: frozenset[str],
        occurrences: dict[str, int] | None = None,
    ) -> bool:
        """Enough distinct values of every parameter, or seen so often there are no more."""
        if not self.samples_of(pattern):
            return False
        for name in split_pattern(pattern)[1]:
            if name in allowlist:
                continue
            if len(self.values.get(name, ())) >= policy.min_distinct_values:
                continue
            if occurrences is None:
                occurrences = self.occurrences()
            if occurrences.get(name, 0) >= policy.saturation_urls:
                continue
            return False
        return True

    def occurrences(self) -> dict[str, int]:
        """URLs seen per parameter name, over the patterns of this shape."""
        counts: dict[str, int] = {}
        for key, state in self.patterns.items():
            for name in split_pattern(key)[1]:
                counts[name] = counts.get(name, 0) + state.urls
        return counts

    def _reason(
        self,
        pattern: str,
        now: float,
        policy: LearningPolicy,
        allowlist: frozenset[str],
        occurrences: dict[str, int] | None,
    ) -> RequestReason | None:
        state = self.patterns[pattern]
        reason: RequestReason
        if self.ready(pattern, policy, allowlist, occurrences):
            reason = ENOUGH_SAMPLES
        elif now - state.first_seen >= policy.rare_after and self.samples_of(pattern):
            reason = TIME_LIMIT
        else:
            return None
        if state.basis:
            return REVERIFY
        if state.requested_at:
            return RETRY
        return reason

    def due(
        self,
        now: float,
        policy: LearningPolicy,
        allowlist: frozenset[str],
        needs_learning: Callable[[str, str], bool],
        trigger: str | None = None,
    ) -> dict[str, RequestReason]:
        """Pattern -> reason, for every pattern that should be probed now.

        With a ``trigger`` pattern, nothing is due unless the trigger is: the other
        patterns of the shape only join a request that the trigger starts.
        """

        def eligible(pattern: str) -> bool:
            state = self.patterns[pattern]
            return state.waiting(now, policy) and needs_learning(pattern, state.basis)

        occurrences: dict[str, int] | None = None
        if trigger is not None:
            if trigger not in self.patterns or not eligible(trigger):
                return {}
            occurrences = self.occurrences()
            if self._reason(trigger, now, policy, allowlist, occurrences) is None:
                return {}
        due: dict[str, RequestReason] = {}
        for pattern in self.patterns:
            if not eligible(pattern):
                continue
            reason = self._reason(pattern, now, policy, allowlist, occurrences)
            if reason is not None:
                due[pattern] = reason
        return due

    def request(self, due: dict[str, RequestReason], now: float | None = None) -> ProbeRequest:
        """The probe request for ``due``, marked as requested."""
        now = time.time() if now is None else now
        patterns: dict[str, RequestedPattern] = {}
        for pattern, reason in sorted(due.items()):
            state = self.patterns[pattern]
            patterns[pattern] = RequestedPattern(reason, state.basis, state.urls, state.first_seen)
            state.requested_at = now
            state.requests += 1
        return ProbeRequest(
            self.domain, self.shape, patterns, tuple(url for _, url in self.pool), now
        )
