"""``miqps dashboard``: a live view of a running stream processor in the browser.

A process of its own that only reads Kafka, never a part of the worker: the workers'
two hot loops keep every core they are given, one dashboard sees what every worker
published (a worker sees only its partitions), it runs, restarts and gets upgraded without
touching the stream, and it works with no worker running at all.

- :mod:`.readers` follows the topics (and the probing worker's metrics, when given);
- :mod:`.state` holds what the page shows, as the readers feed it;
- :mod:`.server` serves the page and its JSON API;
- :mod:`.app` runs the three together: :func:`run_dashboard`.

Its command line is the CLI's.
"""

from __future__ import annotations

from streams.ops.dashboard.app import run_dashboard
from streams.ops.dashboard.readers import WORKER_METRICS_SECONDS
from streams.ops.dashboard.server import DEFAULT_PORT

__all__ = ["DEFAULT_PORT", "WORKER_METRICS_SECONDS", "run_dashboard"]
