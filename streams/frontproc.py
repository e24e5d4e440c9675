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
from multiprocessing.process import BaseProcess
from types import FrameType

from streams.front import CanonicalizerFront
from streams.livemaps import LiveMaps
from streams.mapfeed import MapFeed
from streams.settings import Settings

log = logging.getLogger(__name__)

LOG_FORMAT = "[%(asctime)s] [%(process)d] [%(levelname)s] %(name)s: %(message)s"


def run_front(settings: Settings, parent_pid: int, loglevel: int) -> None:
    """The child process: map feed + front until SIGTERM or the parent is gone."""
    logging.basicConfig(level=loglevel, format=LOG_FORMAT)
    stopping = threading.Event()
    failed: list[BaseException] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    def on_fatal(error: BaseException) -> None:
        failed.append(error)
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    live_maps = LiveMaps(settings.policy.reverify_after)
    feed = MapFeed(settings, live_maps, on_fatal)
    front = CanonicalizerFront(settings, live_maps, feed, on_fatal)
    feed.start()
    front.start()
    while not stopping.wait(0.5):
        if os.getppid() != parent_pid:
            log.error("canonicalizer: the worker process is gone; exiting")
            os._exit(3)
    front.stop()
    feed.stop()
    if failed:
        os._exit(1)


class FrontProcess:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._process: BaseProcess | None = None
        self._stopping = False

    def start(self) -> None:
        context = multiprocessing.get_context("spawn")
        loglevel = logging.getLogger().getEffectiveLevel()
        self._process = context.Process(
            target=run_front, args=(self.settings, os.getpid(), loglevel),
            name="miqps-canonicalizer", daemon=False,
        )
        self._process.start()
        log.info("canonicalizer front started in process %s", self._process.pid)

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def exited_unexpectedly(self) -> int | None:
        """The child's exit code if it ended without being asked to, else None."""
        if self._process is None or self._stopping or self._process.is_alive():
            return None
        return self._process.exitcode

    def stop(self, timeout: float = 40.0) -> None:
        self._stopping = True
        process = self._process
        if process is None or not process.is_alive():
            return
        if process.pid is not None:
            os.kill(process.pid, signal.SIGTERM)
        process.join(timeout)
        if process.is_alive():
            process.kill()
            process.join(5)
