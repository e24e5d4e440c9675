"""Faust agents: pattern statistics (canonicalize role) and probing (probe role), and what
they share."""

from __future__ import annotations

from faust.types import Message

from streams.messages import Source


def source_of(message: Message) -> Source:
    """Where a Faust message came from, for its dead letter (Faust's timestamp is in s)."""
    return Source(
        message.topic,
        message.partition,
        message.offset,
        int(message.timestamp * 1000) if message.timestamp else None,
    )
