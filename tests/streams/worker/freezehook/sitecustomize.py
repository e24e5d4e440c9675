"""Python imports this module at startup in a worker started with this directory first on
``PYTHONPATH`` (tests/streams/worker/test_front_watchdog.py). With
``MIQPS_TEST_FREEZE_FRONT=PATH``, the first canonicalizer front to take a batch creates
PATH and freezes its whole process: a native call that never returns while it holds the
GIL, as ``rd_kafka_assign`` does when it blocks inside confluent-kafka's rebalance
callback. No Python thread of that process runs again. Fronts started later find PATH and
work normally.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

from streams.front import loop

_marker = os.environ.get("MIQPS_TEST_FREEZE_FRONT", "")
_process = loop.CanonicalizerFront._process


def freeze_holding_the_gil() -> None:
    libc = ctypes.PyDLL(None)  # a PyDLL call keeps the GIL, unlike a CDLL one
    mutex = ctypes.create_string_buffer(64)  # zeroed: PTHREAD_MUTEX_INITIALIZER
    libc.pthread_mutex_lock(mutex)
    libc.pthread_mutex_lock(mutex)  # a default mutex locked again by its owner: for ever


def _freezing_process(self: loop.CanonicalizerFront, messages: list[Any], *args: Any) -> Any:
    if _marker and messages:
        try:
            os.close(os.open(_marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            pass
        else:
            freeze_holding_the_gil()
    return _process(self, messages, *args)


loop.CanonicalizerFront._process = _freezing_process  # type: ignore[method-assign,assignment]
