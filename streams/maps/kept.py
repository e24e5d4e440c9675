"""What a worker process keeps of its live maps across a restart, and when it may resume.

A process's live-map store (:class:`~streams.maps.live.StoredLiveMaps`) records the maps
topic it holds the maps of (:class:`StoreOrigin`) and, per maps partition, where its feed
reads next (:class:`StoredOffset`). At the next start the feed keeps the store only if it
is of the same topic (:func:`why_emptied`), and resumes each partition at its stored
offset only where that offset is still good (:func:`resume_from`); otherwise the
partition's maps are removed and it is read from its beginning, as before the store was
kept.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import orjson


@dataclass(frozen=True, slots=True)
class StoreOrigin:
    """The maps topic a store holds the maps of: its name, cluster and incarnation.

    ``topic_id`` is the id Kafka gives a topic when it creates it (``describe_topics``),
    so a topic deleted and created again under the same name has another one. A broker that
    gives none (None here) is compared on the rest only: a topic created again is then
    seen only where a stored offset is beyond the new partition's end
    (:func:`resume_from`)."""

    cluster: str
    topic: str
    topic_id: str | None
    partitions: int

    def dumps(self) -> bytes:
        return orjson.dumps(
            {
                "cluster": self.cluster,
                "topic": self.topic,
                "topic_id": self.topic_id,
                "partitions": self.partitions,
            }
        )

    @classmethod
    def loads(cls, raw: bytes | None) -> StoreOrigin | None:
        """The origin ``raw`` records; None for none, or one this code cannot read."""
        if raw is None:
            return None
        try:
            data = orjson.loads(raw)
            return cls(
                str(data["cluster"]),
                str(data["topic"]),
                None if data["topic_id"] is None else str(data["topic_id"]),
                int(data["partitions"]),
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return None


def why_emptied(stored: StoreOrigin | None, current: StoreOrigin) -> str | None:
    """Why a store whose recorded origin is ``stored`` cannot be kept for the maps topic
    ``current``; None when it can."""
    if stored is None:
        return "it records no maps topic"
    if stored.cluster != current.cluster:
        return f"it is of another cluster ({stored.cluster}; now {current.cluster})"
    if stored.topic != current.topic:
        return f"it is of another maps topic ({stored.topic})"
    if None not in (stored.topic_id, current.topic_id) and stored.topic_id != current.topic_id:
        return (
            f"{current.topic} was created again (topic id {stored.topic_id}; "
            f"now {current.topic_id})"
        )
    if stored.partitions != current.partitions:
        return (
            f"{current.topic} has {current.partitions} partitions, not {stored.partitions}: "
            f"its domains are in other partitions"
        )
    return None


_OFFSET = struct.Struct(">qd")


@dataclass(frozen=True, slots=True)
class StoredOffset:
    """Where a maps partition's feed reads next, as the store notes it."""

    offset: int
    """Every record of the partition before this offset is applied to the store."""
    as_of: float
    """Wall-clock seconds at which the feed had read the partition up to its end, or began
    to read it from its beginning: a deletion (tombstone) written after this offset is kept
    by the topic at least ``delete.retention.ms`` after this time."""

    def dumps(self) -> bytes:
        return _OFFSET.pack(self.offset, self.as_of)

    @classmethod
    def loads(cls, raw: bytes) -> StoredOffset | None:
        if len(raw) != _OFFSET.size:
            return None
        offset, as_of = _OFFSET.unpack(raw)
        return cls(offset, as_of)


@dataclass(frozen=True, slots=True)
class Resume:
    """Where to read a maps partition from: its stored offset, or its beginning."""

    offset: int | None
    """The stored offset to read from; None: from the beginning."""
    why: str | None = None
    """Why a stored offset is not used (None when there was none, or it is)."""


def resume_from(
    stored: StoredOffset | None,
    low: int,
    high: int,
    now: float,
    delete_retention_ms: int | None,
) -> Resume:
    """Where to read a partition whose offsets are now ``low``..``high`` (its low and high
    watermarks) given its ``stored`` offset: there if ``low <= offset <= high`` and it
    is younger than the topic's ``delete.retention.ms`` (None: not known, not checked);
    otherwise from the beginning, saying why. An offset older than that may have missed a
    deletion: the topic's compaction can have removed both the map and its tombstone."""
    if stored is None:
        return Resume(None)
    if not low <= stored.offset <= high:
        return Resume(
            None,
            f"its stored offset {stored.offset} is not within its offsets {low}..{high}",
        )
    age = now - stored.as_of
    if delete_retention_ms is not None and age * 1000 >= delete_retention_ms:
        return Resume(
            None,
            f"its stored offset {stored.offset} was caught up {age:.0f}s ago, longer than "
            f"the topic keeps deletions (delete.retention.ms={delete_retention_ms})",
        )
    return Resume(stored.offset)
