"""MIQPS: learn, per site, which URL query parameters change a page, and canonicalize URLs.

The public API::

    from miqps import Canonicalizer

    canonicalizer = Canonicalizer.from_file("maps.jsonl")
    # or follow the maps topic live (the streams extra): streams.from_kafka("host:9092")
    canonicalizer.canonicalize("https://shop.example/p/1?id=1&utm_source=x")
    canonicalizer.explain(url)            # a Decision: kept, dropped, layer per parameter,
                                          # status (Status.LEARNED or Status.PROVISIONAL)
    canonicalizer.canonicalize_many(urls)  # lazily, in order

Everything else in the package is internal and may change.
"""

from __future__ import annotations

from miqps.canonical import Canonicalizer, Decision, Status
from miqps.maps import DomainMap, InvalidMap
from miqps.urls import InvalidURL

__all__ = [
    "Canonicalizer",
    "Decision",
    "DomainMap",
    "InvalidMap",
    "InvalidURL",
    "Status",
]
