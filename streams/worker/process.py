"""The Faust worker of ``miqps worker``, with a bounded stop and rate-limited logs."""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Any

import faust

from streams.kafka.lograte import rate_limit_handlers
from streams.worker.lifecycle import (
    DISK_FULL_EXIT_CODE,
    EXIT_MARGIN,
    StopDeadline,
    broker_answers,
    is_broker_outage,
    is_disk_full,
    report_disk_full,
    start_again,
)
from streams.worker.runtime import Runtime

CRASH_EXIT_CODE = 1
BROKER_CHECK_SECONDS = 5.0
"""How long a crashed worker waits for the broker to answer before it takes the crash
for an outage."""

log = logging.getLogger(__name__)


class StreamWorker(faust.Worker):
    def __init__(self, app: faust.App, *services: Any, runtime: Runtime, **kwargs: Any) -> None:
        super().__init__(app, *services, **kwargs)
        self.runtime = runtime
        self.stop_requested = False
        self.deadline = StopDeadline(
            max(1.0, runtime.stop_timeout - EXIT_MARGIN),
            "worker",
            lambda: (
                "Offsets not committed yet are delivered again (at least once) when "
                "the consumer group resumes."
            ),
        )
        self._failing: list[asyncio.Future[None]] = []
        self._reported_disk_full = False

    def on_setup_root_logger(self, logger: logging.Logger, level: int) -> None:
        super().on_setup_root_logger(logger, level)
        rate_limit_handlers(logger)

    def _schedule_shutdown(self, signal: signal.Signals) -> None:
        self.stop_requested = True
        self._begin_stop()
        super()._schedule_shutdown(signal)

    def fail(self, error: BaseException) -> None:
        """Stop the worker because of ``error`` (from a thread of the runtime)."""
        if self._stop_because(error):
            self._failing.append(asyncio.ensure_future(self._stop_on_signal(signal.SIGTERM)))

    def _stop_because(self, error: BaseException) -> bool:
        """Record ``error`` as why the worker stops, with a bounded stop that starts the
        worker again if it is an outage (:meth:`_is_outage`); False if it is stopping
        already."""
        if self.crash_reason is not None or self.stop_requested:
            return False
        self.crash_reason = error
        self.deadline.exit_code = CRASH_EXIT_CODE
        if is_disk_full(error):
            self._report_disk_full(error)
            self.deadline.exit_code = DISK_FULL_EXIT_CODE
        elif self._is_outage(error):
            self.deadline.restart_after = error
        self._begin_stop()
        return True

    def _is_outage(self, error: BaseException) -> bool:
        """Is ``error`` a broker outage, or any other error while the broker does not
        answer (Kafka clients fail in more ways than they classify when it goes)?"""
        if is_broker_outage(error):
            return True
        if broker_answers(self.runtime.settings, BROKER_CHECK_SECONDS):
            return False
        log.warning(
            "worker: stopped by %s: %s, and Kafka does not answer now",
            type(error).__name__,
            error,
        )
        return True

    def _report_disk_full(self, error: BaseException) -> None:
        if not self._reported_disk_full:
            self._reported_disk_full = True
            report_disk_full(error, self.runtime.settings.state_dir)

    def _begin_stop(self) -> None:
        self.deadline.arm()
        self.runtime.request_stop()

    async def start(self) -> None:
        try:
            await super().start()
        except Exception as error:
            # A service that fails while starting (a topic created as the broker goes
            # away) raises here rather than crashing the worker: keep it as the reason.
            self._stop_because(error)
            raise

    def run(self) -> int:
        """Run until stopped and return the exit code. A worker stopped by a broker outage,
        while starting or later, is started again
        (:func:`~streams.worker.lifecycle.start_again`); so is one stopped by any other
        error if the broker does not answer once it has stopped."""
        code = 0
        try:
            self.execute_from_commandline()
        except SystemExit as exit_:
            code = int(exit_.code or 0)
        reason = self.crash_reason
        if reason is not None and is_disk_full(reason):
            # Faust's own crash (a table store that cannot be opened) comes here unreported.
            self._report_disk_full(reason)
            return DISK_FULL_EXIT_CODE
        if reason is None or self.stop_requested:
            return code
        if self.deadline.restart_after is reason or self._is_outage(reason):
            start_again(reason)
        log.critical(
            "worker: stopped by %s: %s; exiting with code %d",
            type(reason).__name__,
            reason,
            code or CRASH_EXIT_CODE,
        )
        return code or CRASH_EXIT_CODE
