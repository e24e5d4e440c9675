"""The canonicalizer front runs in a child process of the worker.

In the Faust process its Python work competes for the interpreter lock with Faust's event
loop and consumer thread, and loses about 40% of its throughput; in a process of its own it
has a core to itself. The child follows the maps topic with its own feed. It stops when the
worker stops it (SIGTERM: it finishes its batch, so its offsets are committed), and exits
at once if the worker dies, since its at-least-once offsets make that safe. The worker
treats an unexpected exit of the child as fatal, so a supervisor restarts both.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from types import FrameType

from streams.front.loop import CanonicalizerFront
from streams.front.metrics import front_exporter
from streams.kafka.lograte import rate_limit_handlers
from streams.maps.feed import MapFeed
from streams.maps.live import LiveMaps
from streams.settings import Settings
from streams.worker.lifecycle import StopDeadline

log = logging.getLogger(__name__)

STUCK_EXIT_CODE = 75
"""The front's exit code when its Kafka clients were stuck for good: the worker starts a
new front instead of stopping."""
LOG_FORMAT = "[%(asctime)s] [%(process)d] [%(levelname)s] %(name)s: %(message)s"


def run_front(
    settings: Settings,
    parent_pid: int,
    loglevel: int,
    stop_timeout: float,
    metrics: Connection | None = None,
) -> None:
    """The child process: map feed + front until SIGTERM or the parent is gone; once
    asked to stop, it exits within ``stop_timeout`` seconds. With ``metrics``, it sends
    its metrics there (:mod:`streams.front.metrics`)."""
    logging.basicConfig(level=loglevel, format=LOG_FORMAT)
    rate_limit_handlers()
    stopping = threading.Event()
    failed: list[BaseException] = []

    def on_fatal(error: BaseException) -> None:
        failed.append(error)
        deadline.arm()
        stopping.set()

    live_maps = LiveMaps(settings.policy.reverify_after)
    feed = MapFeed(settings, live_maps, on_fatal)
    front = CanonicalizerFront(settings, live_maps, feed, on_fatal)
    deadline = StopDeadline(stop_timeout, "canonicalizer", front.describe_uncommitted)
    exporter = front_exporter(front, metrics) if metrics is not None else None

    def on_signal(signum: int, frame: FrameType | None) -> None:
        deadline.arm()
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    feed.start()
    front.start()
    if exporter is not None:
        exporter.start()
    while not stopping.wait(0.5):
        if os.getppid() != parent_pid:
            log.error("canonicalizer: the worker process is gone; exiting")
            os._exit(3)
        front.report_stall()
        if front.stuck():
            log.error(
                "canonicalizer: stuck in a Kafka client call for %gs; exiting, so that the "
                "worker starts a new front from the last commit",
                front.stuck_seconds,
            )
            os._exit(STUCK_EXIT_CODE)
    front.stop(stop_timeout)
    feed.stop()
    if exporter is not None:
        exporter.stop()
    if failed:
        os._exit(1)


class FrontProcess:
    def __init__(self, settings: Settings, stop_timeout: float) -> None:
        self.settings = settings
        self.stop_timeout = stop_timeout
        self._process: BaseProcess | None = None
        self._stopping = False
        self.metrics: Connection | None = None
        """Where the child's metrics arrive, with ``MIQPS_METRICS_PORT`` set."""
        self._child_metrics: Connection | None = None

    def start(self) -> None:
        """Start the child, or a new one after :data:`STUCK_EXIT_CODE` (it writes its
        metrics to the same pipe)."""
        context = multiprocessing.get_context("spawn")
        loglevel = logging.getLogger().getEffectiveLevel()
        if self.settings.metrics_port is not None and self._child_metrics is None:
            self.metrics, self._child_metrics = context.Pipe(duplex=False)
        self._process = context.Process(
            target=run_front,
            args=(self.settings, os.getpid(), loglevel, self.stop_timeout, self._child_metrics),
            name="miqps-canonicalizer",
            daemon=False,
        )
        self._process.start()
        log.info("canonicalizer front started in process %s", self._process.pid)

    def exited_unexpectedly(self) -> int | None:
        """The child's exit code if it ended without being asked to, else None."""
        if self._process is None or self._stopping or self._process.is_alive():
            return None
        return self._process.exitcode

    def request_stop(self) -> None:
        """SIGTERM to the child, once; it then exits within its ``stop_timeout``."""
        process = self._process
        if self._stopping or process is None or process.pid is None or not process.is_alive():
            self._stopping = True
            return
        self._stopping = True
        os.kill(process.pid, signal.SIGTERM)

    def stop(self) -> None:
        self.request_stop()
        process = self._process
        if process is None:
            return
        process.join(self.stop_timeout + 1.0)
        if process.is_alive():
            log.warning(
                "canonicalizer front (process %s) outlived its stop deadline: killed", process.pid
            )
            process.kill()
            process.join(5)
