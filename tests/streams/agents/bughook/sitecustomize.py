"""Python imports this module at startup in a worker started with this directory first on
``PYTHONPATH`` (tests/streams/agents/test_agent_faults.py). It plants faults in the real
worker:

- ``MIQPS_TEST_BUGS=N`` (or ``always``): the pattern-stats processor raises AttributeError
  on its first N calls (on every call), as a bug in our code would;
- ``MIQPS_TEST_LOST_REQUESTS=N``: the first N batches of probe requests the worker takes
  are dropped unanswered, as a request lost on its way would be;
- ``MIQPS_TEST_LOST_SAMPLES=N``: the pattern-stats agent loses the first N packs that
  bring a URL sample, and the first N that bring a due tick, as Faust's consumer can
  around a rebalance (acknowledged, never handled).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from streams.agents import pattern_stats, pattern_stats_processor, probe_processor
from streams.messages import ProbeRequest

_bugs = os.environ.get("MIQPS_TEST_BUGS", "")
_lost = int(os.environ.get("MIQPS_TEST_LOST_REQUESTS") or 0)
_lost_samples = int(os.environ.get("MIQPS_TEST_LOST_SAMPLES") or 0)
_calls = {"apply": 0, "handle": 0, "url": 0, "due": 0}
_read_sample_items = pattern_stats.read_sample_items  # type: ignore[attr-defined]
_apply = pattern_stats_processor.PatternStatsProcessor.apply
_handle = probe_processor.Probing.handle


def _buggy_apply(
    self: pattern_stats_processor.PatternStatsProcessor, *args: Any, **kwargs: Any
) -> pattern_stats_processor.Step:
    _calls["apply"] += 1
    if _bugs == "always" or _calls["apply"] <= int(_bugs or 0):
        raise AttributeError("'NoneType' object has no attribute 'patterns' (planted bug)")
    return _apply(self, *args, **kwargs)


async def _losing_handle(
    self: probe_processor.Probing, requests: Iterable[ProbeRequest], *args: Any, **kwargs: Any
) -> list[probe_processor.ProbeOutcome]:
    _calls["handle"] += 1
    if _calls["handle"] <= _lost:
        print(f"planted loss: probe requests dropped: {[r.shape for r in requests]}", flush=True)
        return []
    return await _handle(self, requests, *args, **kwargs)


def _losing_read_sample_items(value: bytes | None) -> list[Any]:
    items: list[Any] = _read_sample_items(value)
    for kind in ("url", "due"):
        if any(isinstance(item, dict) and item.get("kind") == kind for item in items):
            _calls[kind] += 1
            if _calls[kind] <= _lost_samples:
                print(f"planted loss: a pack of {kind} samples dropped", flush=True)
                return []
    return items


pattern_stats.read_sample_items = _losing_read_sample_items  # type: ignore[attr-defined]
pattern_stats_processor.PatternStatsProcessor.apply = _buggy_apply  # type: ignore[method-assign]
probe_processor.Probing.handle = _losing_handle  # type: ignore[method-assign]
