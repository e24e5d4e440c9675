"""Faust topic handles: every topic of this app carries raw bytes, written and read by
streams.messages."""

from __future__ import annotations

import faust
from faust.types import TopicT


def raw_topic(app: faust.App, name: str, partitions: int | None = None) -> TopicT:
    return app.topic(
        name,
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
        partitions=partitions,
    )
