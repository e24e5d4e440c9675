"""URL model and static normalization.

Parsing is WHATWG (ada, through can_ada): it lowercases scheme and host, applies IDNA,
drops default ports and normalizes IPv4 spellings such as ``127.1`` or ``0x7f000001``.
On top of it we only normalize percent-encoding (decode unreserved characters, uppercase
hex digits), split the query into ordered pairs and drop the fragment unless it is a
``#!`` route.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import can_ada

MAX_URL_BYTES = 8 * 1024

_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")
_PERCENT_TRIPLET = re.compile(r"%([0-9A-Fa-f]{2})")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_SCHEMES = frozenset(("http:", "https:"))


class InvalidURL(ValueError):
    """A URL that cannot be canonicalized; ``reason`` says why in a few words."""

    def __init__(self, reason: str, text: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.text = text


def _normalize_triplet(match: re.Match[str]) -> str:
    char = chr(int(match.group(1), 16))
    return char if char in _UNRESERVED else "%" + match.group(1).upper()


def normalize_percent_encoding(text: str) -> str:
    """Decode percent-encoded unreserved characters and uppercase the rest.

    Reserved characters such as ``%2F %3F %23 %26 %3D %2B`` stay encoded, so meaning never
    changes.
    """
    if "%" not in text:
        return text
    return _PERCENT_TRIPLET.sub(_normalize_triplet, text)


def path_shape(path: str) -> str:
    """The coarse shape of a path: its first segment when it is a word, then ``*`` per segment.

    ``/p/123`` and ``/p/456`` share the shape ``/p/*``; ``/search`` and ``/compare`` do not,
    because one parameter set can mean different things under different paths of a site.
    """
    segments = path.split("/")
    if len(segments) <= 2:
        first = segments[-1]
        return "/" + first if _is_word(first) else "/*"
    first = segments[1]
    head = first if _is_word(first) else "*"
    return "/" + head + "/*" * (len(segments) - 2)


def _is_word(segment: str) -> bool:
    return len(segment) <= 32 and not any(ch.isdigit() for ch in segment)


def param_name(pair: str) -> str:
    name, _, _ = pair.partition("=")
    return name


@dataclass(frozen=True, slots=True)
class NormalizedURL:
    """A statically normalized http(s) URL with its query kept as ordered ``name=value`` pairs."""

    origin: str
    host: str
    path: str
    pairs: tuple[str, ...]
    route: str

    @property
    def names(self) -> frozenset[str]:
        return frozenset(param_name(pair) for pair in self.pairs)

    @property
    def pattern(self) -> str:
        return pattern_key(path_shape(self.path), self.names)

    def value_of(self, name: str) -> str:
        """All values of ``name``, joined, so repeated parameters count as one value."""
        return "&".join(pair for pair in self.pairs if param_name(pair) == name)

    def with_only(self, keep: Iterable[str] | frozenset[str]) -> str:
        """The URL with only the ``keep`` parameters, in stable name order."""
        keep_set = keep if isinstance(keep, frozenset | set) else frozenset(keep)
        kept = [pair for pair in self.pairs if param_name(pair) in keep_set]
        return self._build(kept)

    def without(self, drop: Iterable[str]) -> str:
        drop_set = frozenset(drop)
        return self._build([pair for pair in self.pairs if param_name(pair) not in drop_set])

    def _build(self, pairs: list[str]) -> str:
        pairs.sort(key=param_name)
        query = "?" + "&".join(pairs) if pairs else ""
        return self.origin + self.path + query + self.route

    @property
    def url(self) -> str:
        """The full normalized URL, every parameter kept."""
        return self._build(list(self.pairs))


def pattern_key(shape: str, names: Iterable[str]) -> str:
    """``/p/*?color&id``: the path shape, then the sorted, case-sensitive parameter names."""
    return shape + "?" + "&".join(sorted(names))


def split_pattern(pattern: str) -> tuple[str, tuple[str, ...]]:
    shape, _, names = pattern.partition("?")
    return shape, tuple(names.split("&")) if names else ()


def parse(text: str) -> NormalizedURL:
    """Normalize ``text`` or raise :class:`InvalidURL` with the reason. Nothing else escapes."""
    if not text.isascii():
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError:
            shown = text[:200].encode("utf-8", "replace").decode()
            raise InvalidURL("not valid UTF-8", shown) from None
    else:
        size = len(text)
    if size > MAX_URL_BYTES:
        raise InvalidURL(f"longer than {MAX_URL_BYTES} bytes", text[:200])
    if _CONTROL_CHARS.search(text):
        raise InvalidURL("contains control characters", text[:200])
    if not text:
        raise InvalidURL("empty", text)
    try:
        parsed = can_ada.parse(text)
    except ValueError:
        raise InvalidURL("not a parsable URL", text[:200]) from None
    except Exception as error:  # a parser bug must become bad input, never a crash
        raise InvalidURL(f"parser error: {type(error).__name__}", text[:200]) from None
    return _from_parsed(parsed, text)


def _from_parsed(parsed: can_ada.URL, text: str) -> NormalizedURL:
    protocol = parsed.protocol
    if protocol not in _SCHEMES:
        raise InvalidURL(f"scheme {protocol[:-1]!r} is not http or https", text[:200])
    host = parsed.host
    if not host:
        raise InvalidURL("no host", text[:200])
    search = parsed.search
    pairs: tuple[str, ...] = ()
    if search:
        query = normalize_percent_encoding(search[1:])
        pairs = tuple(pair for pair in query.split("&") if pair)
    fragment = parsed.hash
    route = normalize_percent_encoding(fragment) if fragment.startswith("#!") else ""
    userinfo = ""
    if "@" in text and (parsed.username or parsed.password):
        userinfo = parsed.username + (":" + parsed.password if parsed.password else "") + "@"
    return NormalizedURL(
        origin=protocol + "//" + userinfo + host,
        host=parsed.hostname,
        path=normalize_percent_encoding(parsed.pathname),
        pairs=pairs,
        route=route,
    )
