"""MIQPS: learn, per site, which URL query parameters change a page, and canonicalize URLs.

The public API::

    from miqps import Canonicalizer

    canonicalizer = Canonicalizer.from_file("maps.jsonl")
    # or follow the maps topic live (the streams extra): miqps.from_kafka("host:9092")
    canonicalizer.canonicalize("https://shop.example/p/1?id=1&utm_source=x")
    canonicalizer.explain(url)            # a Decision: kept, dropped, layer per parameter,
                                          # status (Status.LEARNED or Status.PROVISIONAL)
    canonicalizer.canonicalize_many(urls)  # lazily, in order

Everything else in the package is internal and may change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from miqps.canonical import Canonicalizer, Decision, Status
from miqps.maps import DomainMap, InvalidMap
from miqps.urls import InvalidURL

if TYPE_CHECKING:
    from streams.maps.follow import from_kafka

__all__ = [
    "Canonicalizer",
    "Decision",
    "DomainMap",
    "InvalidMap",
    "InvalidURL",
    "Status",
    "from_kafka",
]


def __getattr__(name: str) -> Any:
    """``from_kafka`` lives with Kafka, in the ``streams`` extra: it is imported on first
    use, so that importing :mod:`miqps` imports no Kafka."""
    if name != "from_kafka":
        raise AttributeError(f"module 'miqps' has no attribute {name!r}")
    try:
        from streams.maps.follow import from_kafka
    except ImportError as error:
        raise ImportError(f"miqps.from_kafka needs the 'streams' extra ({error})") from error
    return from_kafka
