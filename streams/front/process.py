"""The canonicalizer front runs in a child process of the worker.

In the Faust process its Python work competes for the interpreter lock with Faust's event
loop and consumer thread, and loses about 40% of its throughput; in a process of its own it
has a core to itself. The child follows the maps topic with its own feed (with
``MIQPS_INPUT_KEYED_BY_DOMAIN``, only the partitions of its input partitions). It stops when the
worker stops it (SIGTERM: it finishes its batch, so its offsets are committed), and exits
at once if the worker dies, since its at-least-once offsets make that safe. The worker
treats an unexpected exit of the child as fatal, so a supervisor restarts both.

A child can also freeze whole: a Kafka client call that blocks in C while it holds the GIL
stops every thread of it, its own watchdog included. So the child's main thread writes a
heartbeat (a monotonic time in shared memory) twice a second, and the worker, from its own
process, replaces a child whose heartbeat is older than ``MIQPS_FRONT_HEARTBEAT_TIMEOUT``:
it asks the child to dump every thread's stack (``faulthandler``, which needs no GIL),
kills it and starts a new one. Every front of one worker, across its restarts too, uses
the same transactional id, so under exactly once the new front fences the old one and
aborts its open transaction at once.

With ``MIQPS_REPARTITION_INPUT``, the repartition hop (:mod:`streams.front.repartition`)
runs in a second thread of the same child, with a transactional id of its own: it shares
the child's heartbeat, its stuck check and its replacement.
"""

from __future__ import annotations

import faulthandler
import gc
import logging
import multiprocessing
import os
import signal
import threading
import time
from ctypes import c_double
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from types import FrameType

from streams.front.loop import CanonicalizerFront
from streams.front.metrics import front_exporter
from streams.front.repartition import DomainRepartitioner
from streams.front.stage import Stage
from streams.kafka.lograte import rate_limit_handlers
from streams.kafka.transactions import worker_transactional_id
from streams.maps.feed import MapFeed
from streams.maps.live import FRONT_PROCESS, worker_live_maps
from streams.settings import Settings
from streams.worker.lifecycle import DISK_FULL_EXIT_CODE, StopDeadline, is_disk_full

log = logging.getLogger(__name__)

STUCK_EXIT_CODE = 75
"""The front's exit code when its Kafka clients were stuck for good: the worker starts a
new front instead of stopping."""
LOG_FORMAT = "[%(asctime)s] [%(process)d] [%(levelname)s] %(name)s: %(message)s"
HEARTBEAT_SECONDS = 0.5
STACK_DUMP_SECONDS = 1.0
"""How long a frozen child is given to write its stacks before it is killed."""
FRONT_GC_THRESHOLDS = (100_000, 50, 20)
"""The front process's thresholds of the cyclic garbage collector (``gc.set_threshold``)."""
REPLACED_STUCK = "stuck"
REPLACED_FROZEN = "frozen"


def run_front(
    settings: Settings,
    parent_pid: int,
    loglevel: int,
    stop_timeout: float,
    metrics: Connection | None = None,
    heartbeat: c_double | None = None,
) -> None:
    """The child process: map feed + front until SIGTERM or the parent is gone; once
    asked to stop, it exits within ``stop_timeout`` seconds. With ``metrics``, it sends
    its metrics there (:mod:`streams.front.metrics`); with ``heartbeat``, it writes
    ``time.monotonic()`` there every :data:`HEARTBEAT_SECONDS`, and SIGUSR1 dumps the
    stack of every thread to stderr."""
    logging.basicConfig(level=loglevel, format=LOG_FORMAT)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    faulthandler.enable(all_threads=True)
    rate_limit_handlers()
    # Python's default runs the cyclic collector every 700 new containers, each run walking
    # the maps held: about 40% of a front's time when it meets more domains than it holds
    # (python -m bench.live_maps). Every 100,000 leaves the garbage of a few batches.
    gc.set_threshold(*FRONT_GC_THRESHOLDS)
    stopping = threading.Event()
    failed: list[BaseException] = []

    def on_fatal(error: BaseException) -> None:
        failed.append(error)
        deadline.arm()
        stopping.set()

    live_maps = worker_live_maps(settings, FRONT_PROCESS)
    feed = MapFeed(settings, live_maps, on_fatal, partitioned=settings.domain_keyed_input)
    front = CanonicalizerFront(
        settings, live_maps, feed, on_fatal, worker_transactional_id(settings, "canonicalizer")
    )
    hop = (
        DomainRepartitioner(settings, on_fatal, worker_transactional_id(settings, "repartition"))
        if settings.repartition_input
        else None
    )
    stages: list[Stage] = [front] if hop is None else [hop, front]

    def describe_uncommitted() -> str:
        return " ".join(f"{stage.name}: {stage.describe_uncommitted()}" for stage in stages)

    deadline = StopDeadline(stop_timeout, "canonicalizer", describe_uncommitted)
    exporter = front_exporter(front, metrics, hop) if metrics is not None else None

    def on_signal(signum: int, frame: FrameType | None) -> None:
        deadline.arm()
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    feed.start()
    for stage in stages:
        stage.start()
    if exporter is not None:
        exporter.start()
    while not stopping.wait(HEARTBEAT_SECONDS):
        if heartbeat is not None:
            heartbeat.value = time.monotonic()
        if os.getppid() != parent_pid:
            log.error("canonicalizer: the worker process is gone; exiting")
            os._exit(3)
        for stage in stages:
            stage.report_stall()
            if stage.stuck():
                log.error(
                    "%s: stuck in a Kafka client call for %gs; exiting, so that the worker "
                    "starts a new front from the last commit",
                    stage.name,
                    stage.stuck_seconds,
                )
                os._exit(STUCK_EXIT_CODE)
    stop_by = time.monotonic() + stop_timeout
    for stage in stages:
        stage.request_stop()
    for stage in stages:
        stage.stop(max(0.0, stop_by - time.monotonic()))
    feed.stop()
    if exporter is not None:
        exporter.stop()
    live_maps.close()
    if failed:
        os._exit(DISK_FULL_EXIT_CODE if any(is_disk_full(error) for error in failed) else 1)


class FrontProcess:
    def __init__(self, settings: Settings, stop_timeout: float) -> None:
        self.settings = settings
        self.stop_timeout = stop_timeout
        self._process: BaseProcess | None = None
        self._stopping = False
        self.metrics: Connection | None = None
        """Where the child's metrics arrive, with ``MIQPS_METRICS_PORT`` set."""
        self._child_metrics: Connection | None = None
        self._heartbeat: c_double | None = None
        self.replacements = {REPLACED_STUCK: 0, REPLACED_FROZEN: 0}
        """Fronts replaced, by why: ``stuck`` (it exited with :data:`STUCK_EXIT_CODE`) or
        ``frozen`` (its heartbeat stopped, :meth:`silent_for`)."""

    def start(self) -> None:
        """Start the child, or a new one after :data:`STUCK_EXIT_CODE` (it writes its
        metrics to the same pipe)."""
        context = multiprocessing.get_context("spawn")
        loglevel = logging.getLogger().getEffectiveLevel()
        if self.settings.metrics_port is not None and self._child_metrics is None:
            self.metrics, self._child_metrics = context.Pipe(duplex=False)
        heartbeat = self._heartbeat = context.RawValue(c_double, time.monotonic())
        self._process = context.Process(
            target=run_front,
            args=(
                self.settings,
                os.getpid(),
                loglevel,
                self.stop_timeout,
                self._child_metrics,
                heartbeat,
            ),
            name="miqps-canonicalizer",
            daemon=False,
        )
        self._process.start()
        log.info("canonicalizer front started in process %s", self._process.pid)

    def silent_for(self) -> float:
        """Seconds since the running child last wrote its heartbeat (0 when no child runs
        or it is being stopped)."""
        process, heartbeat = self._process, self._heartbeat
        if process is None or heartbeat is None or self._stopping or not process.is_alive():
            return 0.0
        return max(0.0, time.monotonic() - heartbeat.value)

    def replace(self, reason: str) -> None:
        """Start a new child in place of this one: a ``frozen`` one first dumps the stack of
        every thread to stderr, then is killed."""
        process = self._process
        if process is not None and process.pid is not None and process.is_alive():
            if reason == REPLACED_FROZEN:
                os.kill(process.pid, signal.SIGUSR1)
                process.join(STACK_DUMP_SECONDS)
            process.kill()
            process.join(5)
        self.replacements[reason] += 1
        self.start()

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
