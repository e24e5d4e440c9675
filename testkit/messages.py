"""Stand-ins for what the canonicalizer front reads of consumed messages, for the front's
benchmark and its tests (no Kafka)."""

from __future__ import annotations


class InputMessage:
    """What ``_process`` reads of a consumed message."""

    __slots__ = ("_offset", "_value")

    def __init__(self, value: bytes, offset: int) -> None:
        self._value = value
        self._offset = offset

    def error(self) -> None:
        return None

    def value(self) -> bytes:
        return self._value

    def topic(self) -> str:
        return "urls.raw"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset
