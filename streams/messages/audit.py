"""The audit wording of ``miqps.map-updates``: the ``reason`` a record gives for a pattern an
update left undecided, the cause each such reason stands for, and :func:`audit_records`, which
turns an update into one :class:`MapUpdateRecord` per pattern."""

from __future__ import annotations

from collections.abc import Mapping

from miqps.update import MapUpdate, Undecided, Why
from streams.messages.records import MapUpdateRecord, RequestedPattern

NO_SAMPLES = "no sample URL of this pattern could be probed"


def undecided_reason(cause: Undecided) -> str:
    """The ``reason`` of the audit record of a pattern left undecided for ``cause``."""
    return f"{cause.message}; nothing learned"


UNREACHABLE = undecided_reason(Undecided.FAILED)
ONE_PAGE = undecided_reason(Undecided.ONE_PAGE)
FROZEN = "the map is frozen by an operator; nothing learned until it is unfrozen"
UNDECIDED_CAUSES = {undecided_reason(cause): str(cause) for cause in Undecided} | {
    NO_SAMPLES: "without-samples",
    FROZEN: "frozen",
}
"""The cause of an undecided pattern, by its audit record's ``reason``."""


def audit_records(
    update: MapUpdate, requests: Mapping[str, RequestedPattern]
) -> list[MapUpdateRecord]:
    """One record per pattern of ``update``: decided (accepted or rejected by the gate),
    unreachable, walled, or without samples. A pooled or stale-default decision answers no
    request: its ``request_reason`` is why the core took it."""
    records: list[MapUpdateRecord] = []
    if update.candidate is not None and update.verdict is not None:
        for pattern, entry in update.decided.items():
            request = requests.get(pattern)
            reason = (
                request.reason
                if entry.why is Why.REQUESTED and request is not None
                else str(entry.why)
            )
            records.append(
                MapUpdateRecord.decided(
                    pattern,
                    reason,
                    update.before,
                    update.candidate,
                    update.verdict,
                    update.fetches,
                    update.observed,
                )
            )
    named = [
        (undecided_reason(cause), [pattern]) for pattern, cause in sorted(update.undecided.items())
    ]
    for reason, patterns in (
        *named,
        (NO_SAMPLES, update.without_samples),
        (FROZEN, update.frozen),
    ):
        records.extend(
            MapUpdateRecord.undecided(
                update.domain,
                pattern,
                requests[pattern].reason,
                requests[pattern].urls_seen,
                reason,
                update.before,
                update.fetches,
                update.observed,
            )
            for pattern in patterns
        )
    return records
