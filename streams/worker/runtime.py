"""What one worker process shares between its agents and threads."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import mode

from streams.front.process import (
    REPLACED_FROZEN,
    REPLACED_STUCK,
    STUCK_EXIT_CODE,
    FrontProcess,
)
from streams.maps.feed import MapFeed
from streams.maps.live import WORKER_PROCESS, worker_live_maps
from streams.ops.metrics import WorkerMetrics
from streams.settings import Settings
from streams.worker.errorpolicy import BugPolicy, OnBug
from streams.worker.lifecycle import DEFAULT_STOP_TIMEOUT, DISK_FULL_EXIT_CODE, disk_full_error
from streams.worker.ownedmaps import OwnedMaps

log = logging.getLogger(__name__)

CANONICALIZE = "canonicalize"
PROBE = "probe"
ROLES = (CANONICALIZE, PROBE)
# The front process must be done this long before the worker's own stop deadline.
FRONT_STOP_MARGIN = 3.0


class Runtime:
    def __init__(
        self,
        settings: Settings,
        roles: frozenset[str],
        partitions: dict[str, int],
        stop_timeout: float = DEFAULT_STOP_TIMEOUT,
    ) -> None:
        unknown = roles - set(ROLES)
        if unknown or not roles:
            raise ValueError(f"roles must be among {', '.join(ROLES)}; got {sorted(roles)}")
        self.settings = settings
        self.roles = roles
        self.partitions = partitions
        self.stop_timeout = stop_timeout
        self.on_bug = OnBug(settings.on_bug)
        self.live_maps = worker_live_maps(settings, WORKER_PROCESS)
        # Only the maps of the domains the agents own (streams/worker/ownedmaps.py).
        self.feed = MapFeed(settings, self.live_maps, self.fatal, partitioned=True)
        topics = settings.topics
        self.maps = OwnedMaps(
            self.feed, (topics.samples, topics.probe_requests), partitions[topics.maps]
        )
        self.metrics = WorkerMetrics(settings, self.live_maps)
        self.metrics.follow_maps(self.maps, self.feed.totals)
        self.front: FrontProcess | None = None
        if CANONICALIZE in roles:
            self.front = FrontProcess(settings, max(1.0, stop_timeout - FRONT_STOP_MARGIN))
            self.metrics.follow_front(self.front.replacements)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._on_fatal: Callable[[BaseException], None] | None = None
        self.on_stop: list[Callable[[], None]] = []
        """What else stops with the worker's threads (from a thread of its own)."""

    def bind(
        self, loop: asyncio.AbstractEventLoop, on_fatal: Callable[[BaseException], None]
    ) -> None:
        self._loop = loop
        self._on_fatal = on_fatal

    def fatal(self, error: BaseException) -> None:
        """Called from a worker thread: stop the whole worker, so it restarts from Kafka."""
        if self._loop is None or self._on_fatal is None:
            raise error
        self._loop.call_soon_threadsafe(self._on_fatal, error)

    def bug_policy(self) -> BugPolicy:
        """What an agent does on a bug of ours: stop this worker, or back off and retry."""
        return BugPolicy(self.on_bug, self.fatal)

    def request_stop(self) -> None:
        """Ask the front process to stop now, while Faust stops its own services."""
        if self.front is not None:
            self.front.request_stop()

    async def maps_ready(self) -> None:
        while not self.feed.ready.is_set():
            await asyncio.sleep(0.05)


class ThreadsService(mode.Service):
    """Starts and stops the map feed and the canonicalizer front process with the worker."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        super().__init__()

    async def on_start(self) -> None:
        self.runtime.feed.start()
        if self.runtime.front is not None:
            self.runtime.front.start()
            self.add_future(self._watch_front(self.runtime.front))
        front = self.runtime.front
        self.runtime.metrics.start(
            asyncio.get_running_loop(), front.metrics if front is not None else None
        )

    async def _watch_front(self, front: FrontProcess) -> None:
        frozen_after = self.runtime.settings.front_heartbeat_timeout
        while not self.should_stop:
            await asyncio.sleep(1.0)
            code = front.exited_unexpectedly()
            if code == STUCK_EXIT_CODE:
                log.warning(
                    "canonicalizer front was stuck in a Kafka client call and exited; "
                    "starting a new one, from the last commit"
                )
                await asyncio.to_thread(front.replace, REPLACED_STUCK)
            elif code == DISK_FULL_EXIT_CODE:
                self.runtime.fatal(disk_full_error("the canonicalizer front's stores"))
                return
            elif code is not None:
                self.runtime.fatal(RuntimeError(f"canonicalizer front exited with code {code}"))
                return
            elif (silent := front.silent_for()) > frozen_after:
                log.error(
                    "canonicalizer front froze: no heartbeat for %.0fs (its stacks follow on "
                    "stderr); killing it and starting a new one, from the last commit",
                    silent,
                )
                await asyncio.to_thread(front.replace, REPLACED_FROZEN)

    async def on_stop(self) -> None:
        self.runtime.metrics.stop()
        for stop in self.runtime.on_stop:
            await asyncio.to_thread(stop)
        if self.runtime.front is not None:
            await asyncio.to_thread(self.runtime.front.stop)
        await asyncio.to_thread(self.runtime.feed.stop)
        # The live maps' store stays open: agents may still read it until the process
        # exits. What the feed wrote is in RocksDB's write-ahead log, which the next start
        # replays: the store is kept (streams/maps/kept.py).
