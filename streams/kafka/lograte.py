"""Rate-limited logging: while the broker is gone, each Kafka client repeats the same error
many times a second (aiokafka on every retry, librdkafka on every reconnect). A repeated
warning or error is written at most once per interval; the next one written after a quiet
spell says how many were left out.

"The same" means the same logger, level and message once digits are masked, so
``Connect to ...:9092 failed (after 0ms)`` and ``(after 3ms)`` count as one message.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

DEFAULT_INTERVAL = 10.0
MAX_TRACKED = 1000
KEY_CHARS = 300
LIBRDKAFKA_LOGGER = "librdkafka"

_DIGITS = re.compile(r"\d+")


@dataclass(slots=True)
class _Seen:
    written_at: float
    suppressed: int = 0


class RateLimitFilter(logging.Filter):
    """Passes the first of each repeated warning or error per ``interval`` seconds."""

    def __init__(
        self,
        interval: float = DEFAULT_INTERVAL,
        min_level: int = logging.WARNING,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.interval = interval
        self.min_level = min_level
        self.clock = clock
        self._seen: dict[tuple[str, int, str], _Seen] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < self.min_level:
            return True
        message = record.getMessage()
        key = (record.name, record.levelno, _DIGITS.sub("#", message[:KEY_CHARS]))
        now = self.clock()
        seen = self._seen.get(key)
        if seen is not None and now - seen.written_at < self.interval:
            seen.suppressed += 1
            return False
        if seen is not None and seen.suppressed:
            record.msg = (
                f"{message} [{seen.suppressed} more like this in the last "
                f"{now - seen.written_at:.0f}s]"
            )
            record.args = ()
        if seen is None and len(self._seen) >= MAX_TRACKED:
            self._seen.clear()
        self._seen[key] = _Seen(now)
        return True


def rate_limit_handlers(
    logger: logging.Logger | None = None, interval: float = DEFAULT_INTERVAL
) -> None:
    """Give every handler of ``logger`` (the root by default) a rate limit, once."""
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(existing, RateLimitFilter) for existing in handler.filters):
            handler.addFilter(RateLimitFilter(interval))


def librdkafka_logger() -> logging.Logger:
    """The logger that confluent-kafka clients write librdkafka's log to (instead of raw
    stderr lines), so that it gets the same format and rate limit as everything else."""
    return logging.getLogger(LIBRDKAFKA_LOGGER)
