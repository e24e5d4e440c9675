"""Start-up and shutdown of a worker process around broker outages.

- Start-up waits for the broker as long as it takes, with exponential backoff, and says so
  once per attempt (so at most once per :data:`MAX_BACKOFF` seconds once it has waited a
  while). A stop request ends the wait.
- A stop is bounded: once asked to stop, a process that is not done within its time limit
  (:data:`DEFAULT_STOP_TIMEOUT`) exits anyway. Every consumer here commits only what it
  has finished (at least once), so whatever it had not committed is delivered again to
  whichever worker takes over its partitions; the log says so.
"""

from __future__ import annotations

import errno
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import NoReturn, TypeVar

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_when_event_set,
    wait_exponential,
)

from streams.kafka.admin import admin_config
from streams.settings import Settings

log = logging.getLogger(__name__)

DEFAULT_STOP_TIMEOUT = 30.0
# A process's own deadline fires this long before its documented bound, to leave time for
# the exit itself.
EXIT_MARGIN = 1.0
MIN_BACKOFF = 1.0
MAX_BACKOFF = 30.0
STOP_TIMEOUT_EXIT_CODE = 0

T = TypeVar("T")

_OUTAGE_CODES = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._TIMED_OUT,
        KafkaError._MSG_TIMED_OUT,
        KafkaError._WAIT_COORD,
        KafkaError.BROKER_NOT_AVAILABLE,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NETWORK_EXCEPTION,
    }
)


def is_broker_outage(error: BaseException) -> bool:
    """Does ``error`` (or an error it was raised from) say the broker cannot be reached,
    rather than that something is wrong with the request or the data? A timeout counts:
    a broker that does not answer in time is, to a worker, one that is not there."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if (
            isinstance(current, KafkaException)
            and current.args
            and isinstance(current.args[0], KafkaError)
        ):
            kafka_error = current.args[0]
            if kafka_error.code() in _OUTAGE_CODES or kafka_error.retriable():
                return True
        elif (
            isinstance(current, ConnectionError | TimeoutError)
            or _is_retriable_aiokafka_error(current)
            or _is_faust_without_broker(current)
        ):
            return True
        current = current.__cause__ or current.__context__
    return False


DISK_FULL_EXIT_CODE = 74
"""The exit code of a worker stopped by a full disk (``EX_IOERR`` of sysexits.h)."""
NO_SPACE = "No space left on device"


def is_disk_full(error: BaseException) -> bool:
    """Does ``error`` (or an error it was raised from) say the disk is full? RocksDB says
    so in its message only (``IO error: No space left on device``)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno == errno.ENOSPC:
            return True
        if NO_SPACE in str(current):
            return True
        current = current.__cause__ or current.__context__
    return False


def disk_full_error(where: str) -> OSError:
    """The error that stops a worker whose ``where`` found the disk full."""
    return OSError(errno.ENOSPC, f"{NO_SPACE} ({where})")


def report_disk_full(error: BaseException, state_dir: object) -> None:
    """The one line that says why a worker stops on a full disk, and what to do."""
    log.error(
        "worker: the disk is full (%s); stopping. Nothing is lost: inputs whose offsets were "
        "not committed are delivered again. Free space on the disk of MIQPS_STATE_DIR (%s), "
        "or move it, then start the worker again",
        error,
        state_dir,
    )


def _is_retriable_aiokafka_error(error: BaseException) -> bool:
    aiokafka_errors = sys.modules.get("aiokafka.errors")
    if aiokafka_errors is None:  # never imported, so it cannot have raised this
        return False
    if isinstance(error, aiokafka_errors.KafkaTimeoutError):  # flagged not retriable
        return True
    return isinstance(error, aiokafka_errors.KafkaError) and bool(error.retriable)


_FAUST_DRIVER = os.path.join("faust", "transport", "drivers", "aiokafka.py")
_FAUST_TOPIC_CREATION = frozenset({"_get_controller_node", "_really_create_topic"})


def _is_faust_without_broker(error: BaseException) -> bool:
    """Is ``error`` what Faust raises when it has no broker to talk to: its "not ready"
    error, or the bare errors of its topic creation when it finds no controller?"""
    faust_errors = sys.modules.get("faust.exceptions")
    if faust_errors is not None and isinstance(error, faust_errors.NotReady):
        return True
    if type(error) not in (Exception, RuntimeError):
        return False
    frame = error.__traceback__
    while frame is not None and frame.tb_next is not None:
        frame = frame.tb_next
    return (
        frame is not None
        and frame.tb_frame.f_code.co_filename.endswith(_FAUST_DRIVER)
        and frame.tb_frame.f_code.co_name in _FAUST_TOPIC_CREATION
    )


def wait_for_broker(
    bootstrap_servers: str, attempt: Callable[[], T], stopping: threading.Event
) -> T | None:
    """``attempt()`` until it succeeds or ``stopping`` is set (then None). Only broker
    outages are retried; any other error is raised."""
    started = time.monotonic()

    def say_waiting(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        delay = state.next_action.sleep if state.next_action is not None else 0.0
        log.warning(
            "waiting for Kafka at %s (%.0fs so far, attempt %d): %s; next try in %.0fs",
            bootstrap_servers,
            time.monotonic() - started,
            state.attempt_number,
            error,
            delay,
        )

    def pause(seconds: float) -> None:
        stopping.wait(seconds)

    retrying = Retrying(
        retry=retry_if_exception(is_broker_outage),
        wait=wait_exponential(min=MIN_BACKOFF, max=MAX_BACKOFF),
        stop=stop_when_event_set(stopping),
        sleep=pause,
        before_sleep=say_waiting,
        reraise=True,
    )
    try:
        result = retrying(attempt)
    except Exception:
        if stopping.is_set():
            return None
        raise
    if retrying.statistics.get("attempt_number", 1) > 1:
        log.info("Kafka at %s answered after %.0fs", bootstrap_servers, time.monotonic() - started)
    return result


class StopDeadline:
    """Ends the process ``seconds`` after :meth:`arm` unless it has exited by then: with
    ``exit_code``, or, if ``restart_after`` names the broker outage that made it stop, by
    starting it again (:func:`start_again`).

    ``abandoned`` describes, for the log, the work that was not committed and so will be
    delivered again.
    """

    def __init__(
        self,
        seconds: float,
        what: str,
        abandoned: Callable[[], str],
        exit_code: int = STOP_TIMEOUT_EXIT_CODE,
    ) -> None:
        self.seconds = seconds
        self.what = what
        self.abandoned = abandoned
        self.exit_code = exit_code
        self.restart_after: BaseException | None = None
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()

    def arm(self) -> None:
        with self._lock:
            if self._timer is not None:
                return
            self._timer = threading.Timer(self.seconds, self._expire)
            self._timer.name = f"{self.what}-stop-deadline"
            self._timer.daemon = True
            self._timer.start()

    def _expire(self) -> None:
        try:
            detail = self.abandoned()
        except Exception as error:  # the exit must happen whatever the description does
            detail = f"(cannot tell what: {type(error).__name__}: {error})"
        log.warning(
            "%s: not stopped %gs after the stop request; exiting now. %s",
            self.what,
            self.seconds,
            detail,
        )
        if self.restart_after is not None:
            start_again(self.restart_after)
        _flush_logs()
        os._exit(self.exit_code)


def broker_answers(settings: Settings, timeout: float) -> bool:
    """Does the broker answer a metadata request within ``timeout`` seconds? An error
    other than an outage counts as an answer."""
    try:
        AdminClient(admin_config(settings)).list_topics(timeout=timeout)
    except KafkaException as error:
        return not is_broker_outage(error)
    return True


def start_again(reason: BaseException) -> NoReturn:
    """Replace this process with a fresh one, run the same way, which waits for the broker
    at start-up: a worker that lost its broker while starting (or later, past what its
    clients retry) recovers by itself. Nothing is lost: every input without a committed
    offset is delivered again."""
    log.warning(
        "Kafka became unreachable (%s: %s); starting the worker again once it answers",
        type(reason).__name__,
        reason,
    )
    _flush_logs()
    os.execv(sys.executable, sys.orig_argv)


def _flush_logs() -> None:
    for handler in logging.getLogger().handlers:
        handler.flush()
