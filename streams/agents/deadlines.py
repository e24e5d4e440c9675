"""The in-memory timer of the pattern-stats agent: which (domain, shape) needs a ``due``
tick, and when. One entry per shape, the earliest deadline wins."""

from __future__ import annotations

import heapq

MAX_TRACKED_DEADLINES = 100_000

Shape = tuple[str, str]


class DeadlineTracker:
    """Shapes waiting for a time, earliest deadline first; at most ``max_entries``."""

    def __init__(self, max_entries: int = MAX_TRACKED_DEADLINES) -> None:
        self.max_entries = max_entries
        self._heap: list[tuple[float, str, str]] = []
        self._scheduled: dict[Shape, float] = {}

    def __len__(self) -> int:
        return len(self._scheduled)

    def add(self, deadline: float, domain: str, shape: str) -> None:
        """Tick ``(domain, shape)`` at ``deadline``, unless it ticks earlier already."""
        key = (domain, shape)
        scheduled = self._scheduled.get(key)
        if scheduled is not None and scheduled <= deadline:
            return
        if scheduled is None and len(self._scheduled) >= self.max_entries:
            return
        self._scheduled[key] = deadline
        heapq.heappush(self._heap, (deadline, domain, shape))

    def discard(self, domain: str, shape: str) -> None:
        """Tick ``(domain, shape)`` no more: its record has nothing waiting for a time."""
        self._scheduled.pop((domain, shape), None)

    def pop_due(self, now: float) -> list[Shape]:
        due: list[Shape] = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            deadline, domain, shape = heapq.heappop(heap)
            key = (domain, shape)
            if self._scheduled.get(key) == deadline:  # else superseded by an earlier one
                del self._scheduled[key]
                due.append(key)
        return due
