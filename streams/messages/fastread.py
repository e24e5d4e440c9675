"""The pattern-stats agent's hand-written reader of ``miqps.pattern-samples`` items: it reads
what :func:`streams.messages.records.read_sample` reads, into an :class:`Observation`, at a
fraction of the cost of the typed records."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from miqps.urls import NormalizedURL, parse, split_pattern
from streams.messages.codec import BadInput
from streams.messages.records import SAMPLE_TYPES, CountSample, DueSample


@dataclass(frozen=True, slots=True)
class Observation:
    """One pattern-sample item as the pattern-stats agent applies it: a ``due`` tick has
    no pattern, and only a ``url`` sample has a URL (parsed)."""

    domain: str
    shape: str
    pattern: str
    url: NormalizedURL | None
    count: int
    basis: str


def read_observation(item: Any) -> Observation:
    """One item of a ``miqps.pattern-samples`` array for the pattern-stats agent; raises
    :class:`BadInput` or :class:`InvalidURL` for a malformed item, and nothing else.

    It reads by hand the items :func:`read_sample` reads (a test keeps the two in step),
    because a small shape's whole step costs about 60 µs and reading its pack through the
    typed records would add a fifth to it (``python -m bench.sample_read``)."""
    if type(item) is not dict or item.get("kind") not in SAMPLE_TYPES:
        raise BadInput("pattern sample without a known kind")
    domain, pattern = item.get("domain"), item.get("pattern", "")
    shape = item.get("shape") or (split_pattern(pattern)[0] if type(pattern) is str else None)
    if not (
        type(domain) is str
        and domain
        and type(pattern) is str
        and type(shape) is str
        and shape.startswith("/")
    ):
        raise BadInput("pattern sample without a domain and a pattern or shape")
    if item["kind"] == DueSample.kind:
        return Observation(domain, shape, "", None, 0, "")
    count, basis, text = item.get("count"), item.get("basis"), item.get("url")
    if not (type(count) is int and type(basis) is str):
        raise BadInput("pattern sample without an integer count and a basis string")
    if item["kind"] == CountSample.kind:
        return Observation(domain, shape, pattern, None, count, basis)
    if type(text) is not str:
        raise BadInput("pattern sample of kind url without a url string")
    return Observation(domain, shape, pattern, parse(text), count, basis)
