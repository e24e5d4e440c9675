"""With ``MIQPS_INPUT_KEYED_BY_DOMAIN``, the front checks that each input is keyed by its
URL's domain and sits in that domain's partition (:mod:`streams.kafka.copartition`).

A mismatch is not bad input: the URL is canonicalized as any other. It only means that
the input's domain is met in a partition other than its own, so a second front holds its
map too. The front counts mismatches by reason (``miqps_input_key_mismatches``) and logs
at most one warning per :data:`~streams.kafka.lograte.DEFAULT_INTERVAL` seconds, with an
example and how many were left out.

The check costs a bytes comparison and a dict look-up per input: the domain is read from
the output record, where the compiled path wrote it, and each domain's partition is
computed once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import orjson

from streams.kafka.lograte import DEFAULT_INTERVAL
from streams.kafka.partitioning import key_partition

log = logging.getLogger(__name__)

DOMAIN_FIELD = b',"domain":"'
"""Where the domain starts in a ``urls.canonical`` record: its third field, after two
strings, so the first match is the field itself (a quote inside a string is escaped)."""
MAX_REMEMBERED = 100_000
KEY = "key"
"""The input's key is not its URL's domain (or it has none)."""
PARTITION = "partition"
"""The key is the domain, but the input is not in the partition murmur2 gives it: its
producer's partitioner is another."""


def record_domain(record: bytes) -> bytes | None:
    """The ``domain`` of a ``urls.canonical`` record, as its UTF-8 bytes."""
    start = record.find(DOMAIN_FIELD)
    if start < 0:
        return None
    start += len(DOMAIN_FIELD)
    end = record.find(b'"', start)
    if end < 0:
        return None
    if record[end - 1] == 0x5C:  # an escaped quote: read the record properly
        domain = orjson.loads(record).get("domain")
        return domain.encode() if isinstance(domain, str) else None
    return record[start:end]


class DomainKeyCheck:
    """Counts the inputs of ``topic`` (``partitions`` partitions) that are not keyed by
    their domain or not in its partition."""

    def __init__(
        self,
        topic: str,
        partitions: int,
        interval: float = DEFAULT_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.topic = topic
        self.partitions = partitions
        self.interval = interval
        self.clock = clock
        self.mismatches = {KEY: 0, PARTITION: 0}
        self._partition_of: dict[bytes, int] = {}
        self._warned_at: float | None = None
        self._unreported = 0

    def set_partitions(self, partitions: int) -> None:
        """The input topic's partition count, as the front's clients found it."""
        if partitions != self.partitions:
            self.partitions = partitions
            self._partition_of.clear()

    def record(self, key: bytes | None, record: bytes, partition: int, offset: int) -> None:
        """Check the input whose ``urls.canonical`` record is ``record``."""
        # The common case inline (once per input): the key is the domain, whose partition
        # is known.
        at = record.find(DOMAIN_FIELD)
        if at >= 0 and key is not None:
            start = at + len(DOMAIN_FIELD)
            end = start + len(key)
            if (
                record.startswith(key, start)
                and record[end : end + 1] == b'"'
                and self._partition_of.get(key) == partition
            ):
                return
        domain = record_domain(record)
        if domain is not None:
            self.check(key, domain, partition, offset)

    def check(self, key: bytes | None, domain: bytes, partition: int, offset: int) -> None:
        """Check an input of ``domain`` keyed ``key``, read at ``partition``/``offset``."""
        if key != domain:
            self._mismatch(KEY, key, domain, partition, offset)
            return
        expected = self._partition_of.get(domain)
        if expected is None:
            if len(self._partition_of) >= MAX_REMEMBERED:
                self._partition_of.clear()
            expected = self._partition_of[domain] = key_partition(domain, self.partitions)
        if expected != partition:
            self._mismatch(PARTITION, key, domain, partition, offset)

    def _mismatch(
        self, reason: str, key: bytes | None, domain: bytes, partition: int, offset: int
    ) -> None:
        self.mismatches[reason] += 1
        now = self.clock()
        if self._warned_at is not None and now - self._warned_at < self.interval:
            self._unreported += 1
            return
        where = f"{self.topic}[{partition}]@{offset}"
        host = domain.decode(errors="replace")
        if reason == KEY:
            what = f"{where} is keyed {key!r}, not by its domain {host!r}"
        else:
            what = (
                f"{where} is keyed by its domain {host!r} but murmur2 puts that key in "
                f"partition {key_partition(domain, self.partitions)}: its producer's "
                "partitioner is not Java's (librdkafka: partitioner=murmur2_random)"
            )
        left_out = (
            f" ({self._unreported} more in the last {now - self._warned_at:.0f}s)"
            if self._warned_at is not None and self._unreported
            else ""
        )
        log.warning(
            "canonicalizer: input not co-partitioned with its domain although "
            "MIQPS_INPUT_KEYED_BY_DOMAIN is set: %s; canonicalized all the same%s",
            what,
            left_out,
        )
        self._warned_at = now
        self._unreported = 0
