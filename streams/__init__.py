"""The Kafka stream processor over the :mod:`miqps` core (the ``streams`` extra).

Its one public name is ``streams.from_kafka`` (:func:`streams.maps.follow.from_kafka`): a
:class:`miqps.Canonicalizer` following the compacted maps topic live. It is imported on
first use, so that importing a module of the package does not load the map follower."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streams.maps.follow import from_kafka

__all__ = ["from_kafka"]


def __getattr__(name: str) -> Any:
    if name != "from_kafka":
        raise AttributeError(f"module 'streams' has no attribute {name!r}")
    from streams.maps.follow import from_kafka

    return from_kafka
