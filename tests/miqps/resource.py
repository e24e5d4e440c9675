"""What a canonical URL must keep of its input: the resource it names under WHATWG.

Both URLs are read by the WHATWG parser, and their parts are compared percent-decoded once,
as the server sees them. Only the documented normalizations may differ: the fragment
(unless a ``#!`` route), empty query pairs, the order of query pairs and of the matrix
parameters of one segment, and the parameters the canonicalizer says it dropped.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import unquote_to_bytes

import can_ada


def _name(part: str) -> str:
    return part.partition("=")[0]


def _path_key(pathname: str, dropped: frozenset[str]) -> list[object]:
    """Each segment decoded; the ``;`` parts of a segment as a multiset when they all hold
    a ``=`` (they may be matrix parameters, whose order is normalized), else in order."""
    segments: list[object] = []
    for segment in pathname.split("/"):
        head, *parts = segment.split(";")
        if parts and all("=" in part for part in parts):
            kept = sorted(unquote_to_bytes(p) for p in parts if ";" + _name(p) not in dropped)
            segments.append((unquote_to_bytes(head), kept) if kept else unquote_to_bytes(head))
        else:
            segments.append(unquote_to_bytes(segment))
    return segments


def _query_key(search: str, dropped: frozenset[str]) -> list[bytes]:
    pairs = [pair for pair in search[1:].split("&") if pair and _name(pair) not in dropped]
    return sorted(unquote_to_bytes(pair) for pair in pairs)


def resource_difference(original: str, canonical: str, dropped: Iterable[str] = ()) -> str:
    """Why ``canonical`` names another resource than ``original``, or ``""`` if it does not."""
    if not can_ada.can_parse(canonical):
        return "the canonical URL does not parse"
    before = can_ada.parse(original)
    after = can_ada.parse(canonical)
    gone = frozenset(dropped)
    for part in ("protocol", "username", "password", "hostname", "port"):
        if getattr(before, part) != getattr(after, part):
            return f"{part}: {getattr(before, part)!r} became {getattr(after, part)!r}"
    if _path_key(before.pathname, gone) != _path_key(after.pathname, gone):
        return f"path: {before.pathname!r} became {after.pathname!r}"
    if _query_key(before.search, gone) != _query_key(after.search, gone):
        return f"query: {before.search!r} became {after.search!r}"
    route = before.hash if before.hash.startswith("#!") else ""
    if unquote_to_bytes(route) != unquote_to_bytes(after.hash):
        return f"fragment: {before.hash!r} became {after.hash!r}"
    return ""
