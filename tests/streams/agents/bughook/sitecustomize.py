"""Python imports this module at startup in a worker started with this directory first on
``PYTHONPATH`` (tests/streams/agents/test_agent_faults.py). It plants a bug in the real
worker: the pattern-stats processor raises AttributeError on its first ``MIQPS_TEST_BUGS``
calls (every call with ``always``), as a bug in our code would."""

from __future__ import annotations

import os
from typing import Any

from streams import pattern_processor

_planted = os.environ.get("MIQPS_TEST_BUGS", "")
_calls = [0]
_apply = pattern_processor.PatternStatsProcessor.apply


def _buggy_apply(self: pattern_processor.PatternStatsProcessor, *args: Any,
                 **kwargs: Any) -> pattern_processor.Step:
    _calls[0] += 1
    if _planted == "always" or _calls[0] <= int(_planted or 0):
        raise AttributeError("'NoneType' object has no attribute 'patterns' (planted bug)")
    return _apply(self, *args, **kwargs)


pattern_processor.PatternStatsProcessor.apply = _buggy_apply  # type: ignore[method-assign]
