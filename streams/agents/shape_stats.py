"""Per-domain pattern statistics and samples, and when to ask for a probe.

One record per (domain, path shape), because the learner pools evidence per shape: tracking
parameters appear in every combination, so patterns multiply while each holds few URLs.
The record keeps, per pattern, when it was first seen, how many URLs it had and when it was
last requested, and the shape's :class:`~miqps.sampling.SamplePool`: the sample URLs and
the distinct values and items they brought, kept by the core's sampling rule.

A pattern is requested once it is *ready* (:meth:`~miqps.sampling.SamplePool.ready`: enough
evidence for the learner), or once it is older than ``rare_after``. A request is sent once;
another only if the map still does not have the pattern after ``retry_after``, then after
twice as long, and so on (up to ``2 ** MAX_RETRY_DOUBLINGS`` times ``retry_after``), so a
request lost on its way is sent again soon while a site that cannot be learned is not asked
over and over.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

import orjson

from miqps.sampling import SamplePool, urls_per_name
from miqps.urls import NormalizedURL
from streams.messages import ProbeRequest, RequestedPattern, RequestReason
from streams.settings import LearningPolicy

ENOUGH_SAMPLES: Final = "enough-samples"
TIME_LIMIT: Final = "time-limit"
REVERIFY: Final = "reverify"
RETRY: Final = "retry"


def stats_key(domain: str, shape: str) -> bytes:
    return f"{domain}\t{shape}".encode()


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
    pool: SamplePool = field(default_factory=SamplePool)

    def dumps(self) -> bytes:
        record = {
            "d": self.domain,
            "s": self.shape,
            "p": {
                key: [st.first_seen, st.urls, st.requested_at, st.basis, st.requests]
                for key, st in self.patterns.items()
            },
            "v": self.pool.values,
            "u": self.pool.samples,
        }
        if self.pool.items:
            record["i"] = self.pool.items
        return orjson.dumps(record)

    @classmethod
    def loads(cls, data: bytes) -> ShapeStats:
        doc = orjson.loads(data)
        return cls(
            domain=doc["d"],
            shape=doc["s"],
            # Records written before the request count was kept have four fields.
            patterns={key: PatternState(*fields) for key, fields in doc["p"].items()},
            # Records written before the pool kept items have none.
            pool=SamplePool(
                doc["v"], [(pattern, url) for pattern, url in doc["u"]], doc.get("i", {})
            ),
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
        sampled = self.pool.patterns()
        seen: dict[str, int] | None = None
        for pattern, state in self.patterns.items():
            if pattern not in sampled or not needs_learning(pattern, state.basis):
                continue
            time_limit = state.first_seen + policy.rare_after
            if not state.requested_at:
                deadlines.append(time_limit)
                continue
            retry_at = state.requested_at + state.retry_delay(policy)
            if retry_at < time_limit:
                if seen is None:
                    seen = self.urls_per_name()
                if not self.pool.ready(pattern, seen, policy.sampling, allowlist):
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
            self.pool.consider(pattern, url, policy.sampling, allowlist)
        return started

    def urls_per_name(self) -> dict[str, int]:
        """URLs seen per parameter name, over the patterns of this shape."""
        return urls_per_name((pattern, state.urls) for pattern, state in self.patterns.items())

    def _reason(
        self, pattern: str, ready: bool, now: float, policy: LearningPolicy
    ) -> RequestReason | None:
        state = self.patterns[pattern]
        reason: RequestReason
        if ready:
            reason = ENOUGH_SAMPLES
        elif now - state.first_seen >= policy.rare_after and self.pool.samples_of(pattern):
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

        if trigger is not None and (trigger not in self.patterns or not eligible(trigger)):
            return {}
        rule, seen = policy.sampling, self.urls_per_name()

        def reason(pattern: str) -> RequestReason | None:
            ready = self.pool.ready(pattern, seen, rule, allowlist)
            return self._reason(pattern, ready, now, policy)

        if trigger is not None and reason(trigger) is None:
            return {}
        due: dict[str, RequestReason] = {}
        for pattern in self.patterns:
            if not eligible(pattern):
                continue
            found = reason(pattern)
            if found is not None:
                due[pattern] = found
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
        return ProbeRequest(self.domain, self.shape, patterns, self.pool.urls(), now)
