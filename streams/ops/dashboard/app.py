"""``run_dashboard``: the readers, the state and the HTTP server of ``miqps dashboard`` run
together until a stop is asked."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable

from streams.ops.dashboard.readers import StreamReaders, follow_worker_metrics
from streams.ops.dashboard.server import DashboardServer
from streams.ops.dashboard.state import DashboardState
from streams.settings import Settings


def run_dashboard(
    settings: Settings,
    host: str,
    port: int,
    ready: Callable[[str], None] | None = None,
    stopping: threading.Event | None = None,
    worker_metrics: str | None = None,
) -> int:
    """Serve until ``stopping`` is set, or Ctrl-C or SIGTERM; ``ready`` gets the page's URL."""
    state = DashboardState()
    stopping = stopping or threading.Event()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda signum, frame: stopping.set())
    try:
        server = DashboardServer(state, host, port)
    except OSError as error:
        print(f"miqps dashboard: cannot listen on {host}:{port}: {error}", file=sys.stderr)
        return 1
    readers = StreamReaders(settings, state).start()
    if worker_metrics:
        threading.Thread(
            target=follow_worker_metrics,
            args=(state, worker_metrics, stopping),
            name="miqps-dashboard-worker-metrics",
            daemon=True,
        ).start()
    server.start()
    (ready or _announce)(server.url)
    try:
        stopping.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        readers.stop()
    return 0


def _announce(url: str) -> None:
    print(f"miqps dashboard: {url}", flush=True)
