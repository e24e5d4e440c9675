"""What the pattern-stats agent decides, without any I/O: the next state of a (domain, path
shape) record, the probe request to send, and when the shape needs a timer tick.

The agent reads the stored record, calls :meth:`PatternStatsProcessor.apply` and writes,
sends and schedules what the returned :class:`Step` says; this module never touches Kafka.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from streams.agents.shape_stats import ShapeStats
from streams.messages import Observation, ProbeRequest, RequestReason
from streams.settings import LearningPolicy

# A shape that should tick in the past (a pattern due but not asked for) ticks this soon.
MIN_TICK_DELAY = 1.0

NeedsLearning = Callable[[str, str, str], bool]
"""(domain, pattern, basis) -> whether the live map still lacks what the pattern needs."""


@dataclass(frozen=True, slots=True)
class Step:
    """The outcome of one :meth:`PatternStatsProcessor.apply`."""

    record: bytes | None
    """The shape's new record, or None when the stored one stays as it is."""
    request: ProbeRequest | None
    """The probe request to send, if any."""
    deadline: float | None
    """When the shape needs a ``due`` tick, or None when nothing waits for a time."""


@dataclass(frozen=True, slots=True)
class ShapeDeadline:
    domain: str
    shape: str
    deadline: float


class PatternStatsProcessor:
    def __init__(
        self, policy: LearningPolicy, allowlist: frozenset[str], needs_learning: NeedsLearning
    ) -> None:
        self.policy = policy
        self.allowlist = allowlist
        self.needs_learning = needs_learning

    def apply(self, stored: bytes | None, observations: Sequence[Observation], now: float) -> Step:
        """Apply the observations of one (domain, shape), read from a pack of samples.

        An observation without a pattern is a ``due`` tick: it asks for every pattern whose
        time has come. A pattern that is seen asks only if it is due itself; the other due
        patterns of its shape then join its request.
        """
        domain, shape = observations[0].domain, observations[0].shape
        stats = ShapeStats.loads(stored) if stored else ShapeStats(domain, shape)
        triggers: list[str | None] = []
        for observation in observations:
            if observation.pattern:
                stats.observe(
                    observation.pattern,
                    observation.url,
                    observation.count,
                    observation.basis,
                    now,
                    self.policy,
                    self.allowlist,
                )
            triggers.append(observation.pattern or None)

        needs = self._needs(domain)
        due: dict[str, RequestReason] = {}
        for trigger in dict.fromkeys(triggers):
            due = stats.due(now, self.policy, self.allowlist, needs, trigger)
            if due:
                break
        request = stats.request(due, now) if due else None
        changed = request is not None or any(triggers)  # a bare tick that asks nothing
        return Step(stats.dumps() if changed else None, request, self._next_tick(stats, now))

    def deadline_of(self, stored: bytes, now: float) -> ShapeDeadline | None:
        """When the shape stored as ``stored`` needs its next tick (after a recovery).
        Raises KeyError, TypeError or ValueError for a record that cannot be read."""
        stats = ShapeStats.loads(stored)
        deadline = self._next_tick(stats, now)
        return None if deadline is None else ShapeDeadline(stats.domain, stats.shape, deadline)

    def _needs(self, domain: str) -> Callable[[str, str], bool]:
        def needs(pattern: str, basis: str) -> bool:
            return self.needs_learning(domain, pattern, basis)

        return needs

    def _next_tick(self, stats: ShapeStats, now: float) -> float | None:
        deadline = stats.next_deadline(self.policy, self.allowlist, self._needs(stats.domain))
        return None if deadline is None else max(deadline, now + MIN_TICK_DELAY)
