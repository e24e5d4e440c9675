"""What an agent does when its own code fails: the error policy.

Input that cannot be decoded or validated is the sender's fault and goes to the dead-letter
topic; the agents catch those errors themselves (``BadInput``, ``InvalidURL``). Any other
exception is a bug of ours. The message it happened on is then not acknowledged (so its
offset is never committed), the traceback is logged, and the worker either stops (the
default: a restarted worker starts again from the last committed offset) or backs off and
tries the same work again, as ``MIQPS_ON_BUG`` says.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable

from streams.settings import variable_at
from streams.worker.lifecycle import is_disk_full

log = logging.getLogger(__name__)

ON_BUG_VARIABLE = variable_at("on_bug").name

FIRST_BACKOFF = 1.0
MAX_BACKOFF = 60.0


class OnBug(enum.StrEnum):
    """What a worker does on a bug: the values of ``Settings.on_bug``."""

    STOP = "stop"
    RETRY = "retry"


class BugBackoff:
    """The one decision on a bug of ours, for the agents (through :class:`BugPolicy`) and the
    canonicalizer front (a thread of its own): stop the worker, or wait and run the same work
    again, the wait doubling from ``first`` up to ``most`` and starting over once the work
    succeeds."""

    def __init__(
        self, on_bug: OnBug, first: float = FIRST_BACKOFF, most: float = MAX_BACKOFF
    ) -> None:
        self.on_bug = on_bug
        self.first = first
        self.most = most
        self._next = first

    def after_bug(self) -> float | None:
        """None: stop the worker; else the seconds to wait before the work runs again."""
        if self.on_bug is OnBug.STOP:
            return None
        pause, self._next = self._next, min(self._next * 2, self.most)
        return pause

    def succeeded(self) -> None:
        self._next = self.first


class BugPolicy:
    """Runs an agent's work for one message under the error policy."""

    def __init__(
        self,
        on_bug: OnBug,
        stop_worker: Callable[[BaseException], None],
        first_backoff: float = FIRST_BACKOFF,
        max_backoff: float = MAX_BACKOFF,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.on_bug = on_bug
        self.stop_worker = stop_worker
        self.first_backoff = first_backoff
        self.max_backoff = max_backoff
        self.sleep = sleep
        self.bugs = 0

    async def run(self, work: Callable[[], Awaitable[None]], what: str) -> None:
        """Await ``work()`` until it succeeds. On a bug: log it, then stop the worker and
        wait to be cancelled (``stop``), or wait and run ``work()`` again (``retry``, as
        :class:`BugBackoff` says). Returns only when ``work()`` succeeded, so the caller
        acknowledges only what was done."""
        backoff = BugBackoff(self.on_bug, self.first_backoff, self.max_backoff)
        while True:
            try:
                await work()
                return
            except Exception as error:
                if is_disk_full(error):
                    # Not a bug, and retrying cannot help: the worker stops and says why.
                    log.error("%s: the disk is full; the message is not acknowledged", what)
                    self.stop_worker(error)
                    await asyncio.Event().wait()  # until the stopping worker cancels us
                    return
                self.bugs += 1
                pause = backoff.after_bug()
                if pause is None:
                    log.exception(
                        "%s failed on a bug; the message is not acknowledged and "
                        "the worker stops (%s=retry backs off and retries)",
                        what,
                        ON_BUG_VARIABLE,
                    )
                    self.stop_worker(error)
                    await asyncio.Event().wait()  # until the stopping worker cancels us
                    return
                log.exception(
                    "%s failed on a bug; the message is not acknowledged, retrying in %gs",
                    what,
                    pause,
                )
                await self.sleep(pause)
