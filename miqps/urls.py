"""URL model and static normalization.

Parsing is WHATWG (ada, through can_ada): it lowercases scheme and host, applies IDNA,
drops default ports and normalizes IPv4 spellings such as ``127.1`` or ``0x7f000001``.
On top of it we only normalize percent-encoding (decode unreserved characters, uppercase
hex digits), split the query into ordered pairs, split matrix parameters (``;name=value``)
off path segments and drop the fragment unless it is a ``#!`` route.

This is the per-URL hot path of the canonicalizer, so it reads one attribute of the parsed
URL (``href``) and slices the WHATWG serialization itself instead of asking the C++ object
for every component: ``scheme "//" [userinfo "@"] host [":" port] path ["?" query]
["#" fragment]``, where a special URL's path always starts with ``/`` and no component
before the fragment can contain ``#`` (nor ``?`` before the query, nor ``/`` before the path).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from itertools import groupby
from operator import itemgetter
from typing import Any

import can_ada

MAX_URL_BYTES = 8 * 1024

_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")
_PERCENT_TRIPLET = re.compile(r"%[0-9A-Fa-f]{2}")
_STRAY_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
# A triplet that normalization changes: lowercase hex, or an unreserved character
# (- . 0-9 A-Z _ a-z ~ are %2D %2E %30-%39 %41-%5A %5F %61-%7A %7E).
_UNNORMAL_TRIPLET = re.compile(
    r"%(?:[a-f][0-9A-Fa-f]|[0-9A-F][a-f]|2[DE]|3[0-9]|4[1-9A-F]|5[0-9AF]|6[1-9A-F]|7[0-9AE])"
)
_ASCII_DIGIT = re.compile(r"[0-9]")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_HEX = "0123456789abcdefABCDEF"
# Every spelling of every triplet, mapped to its normal form: the character itself when it
# is unreserved, the triplet with uppercase hex digits otherwise.
_TRIPLETS = {
    "%" + hi + lo: (
        chr(int(hi + lo, 16)) if chr(int(hi + lo, 16)) in _UNRESERVED else "%" + (hi + lo).upper()
    )
    for hi in _HEX
    for lo in _HEX
}
_ada_parse = can_ada.parse
# A matrix parameter: a token name, "=", then a value (the caller splits on ";" and "/").
_MATRIX_PARAM = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*=.*", re.DOTALL)
# Segments whose meaning is a dot segment: removing what follows them would move the path.
_DOT_SEGMENTS = frozenset({".", ".."})


class InvalidURL(ValueError):
    """A URL that cannot be canonicalized; ``reason`` says why in a few words."""

    def __init__(self, reason: str, text: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.text = text


def _normalize_triplet(match: re.Match[str]) -> str:
    return _TRIPLETS[match.group()]


def normalize_percent_encoding(text: str) -> str:
    """Decode percent-encoded unreserved characters and uppercase the rest.

    Reserved characters such as ``%2F %3F %23 %26 %3D %2B`` stay encoded, so meaning never
    changes. A stray ``%`` (one not followed by two hex digits) stays literal, and a hex
    digit that would complete an escape with it stays encoded: ``%%36%31`` must not become
    ``%61``.
    """
    if "%" not in text or _UNNORMAL_TRIPLET.search(text) is None:
        return text
    if _STRAY_PERCENT.search(text) is None:
        # Every "%" starts a triplet, and "%25" stays encoded: no new escape can form.
        return _PERCENT_TRIPLET.sub(_normalize_triplet, text)
    return _normalize_beside_stray_percent(text)


def _normalize_beside_stray_percent(text: str) -> str:
    out: list[str] = []
    position = 0
    for match in _PERCENT_TRIPLET.finditer(text):
        out.append(text[position : match.start()])
        position = match.end()
        normal = _TRIPLETS[match.group()]
        if normal in _HEX and _ends_in_open_escape(out):
            normal = match.group().upper()
        out.append(normal)
    out.append(text[position:])
    return "".join(out)


def _ends_in_open_escape(parts: list[str]) -> bool:
    """Whether the text so far ends with ``%`` or ``%`` and a hex digit.

    ``parts`` alternate between text and triplets, each triplet one character at least.
    """
    tail = "".join(parts[-4:])[-2:]
    return tail.endswith("%") or (len(tail) == 2 and tail[0] == "%" and tail[1] in _HEX)


def path_shape(path: str) -> str:
    """The coarse shape of a path: its first segment when it is a word, then ``*`` per segment.

    ``/p/123`` and ``/p/456`` share the shape ``/p/*``; ``/search`` and ``/compare`` do not,
    because one parameter set can mean different things under different paths of a site.
    """
    slashes = path.count("/")
    start = path.find("/") + 1
    if slashes < 2:
        first = path[start:]
        return "/" + first if _is_word(first) else "/*"
    first = path[start : path.find("/", start)]
    return ("/" + first if _is_word(first) else "/*") + "/*" * (slashes - 1)


def _is_word(segment: str) -> bool:
    if len(segment) > 32:
        return False
    if segment.isalpha():  # letters are never digits
        return True
    if segment.isascii():
        return _ASCII_DIGIT.search(segment) is None
    return not any(ch.isdigit() for ch in segment)


def param_name(pair: str) -> str:
    name, _, _ = pair.partition("=")
    return name


def split_matrix(path: str) -> tuple[str, tuple[tuple[int, str], ...]]:
    """``path`` without its matrix parameters, and those as ``(offset, "name=value")``.

    ``offset`` is where the parameter's segment ends in the returned path. A segment counts
    as carrying matrix parameters only when every part after its first ``;`` is
    ``name=value`` with a token name (``[A-Za-z_][A-Za-z0-9_.-]*``) and the segment itself
    is not ``.`` or ``..``; any other ``;`` is an ordinary path character and stays.
    """
    if ";" not in path:
        return path, ()
    bare: list[str] = []
    matrix: list[tuple[int, str]] = []
    length = 0
    for index, segment in enumerate(path.split("/")):
        if index:
            bare.append("/")
            length += 1
        head, _, rest = segment.partition(";")
        params = rest.split(";") if rest else []
        if params and head not in _DOT_SEGMENTS and all(map(_MATRIX_PARAM.fullmatch, params)):
            segment = head
            matrix.extend((length + len(head), param) for param in params)
        bare.append(segment)
        length += len(segment)
    return "".join(bare), tuple(matrix)


def split_pairs(query: str) -> list[str]:
    """The non-empty ``name=value`` pairs of a query (without its ``?``), in order."""
    pairs = query.split("&")
    if "" in pairs:
        return [pair for pair in pairs if pair]
    return pairs


class NormalizedURL:
    """A statically normalized http(s) URL with its parameters kept as ordered pairs.

    An immutable value: ``origin`` is scheme, userinfo, host and port; ``host`` the hostname
    alone (IDNA, lowercase; brackets for IPv6); ``path`` the path without matrix parameters;
    ``matrix`` those parameters as ``(offset, "name=value")``, ``offset`` being where their
    segment ends in ``path``; ``pairs`` the query's ``name=value`` pairs; ``route`` a ``#!``
    fragment or ``""``.

    A matrix parameter is named ``";" + name`` wherever parameters are named (``names``,
    ``value_of``, ``with_only``, ``without``, patterns), so ``;v`` and the query's ``v``
    are different parameters; its value is ``";name=value"``.
    """

    __slots__ = ("host", "matrix", "origin", "pairs", "path", "route")

    origin: str
    host: str
    path: str
    pairs: tuple[str, ...]
    route: str
    matrix: tuple[tuple[int, str], ...]

    def __init__(
        self,
        origin: str,
        host: str,
        path: str,
        pairs: tuple[str, ...],
        route: str,
        matrix: tuple[tuple[int, str], ...] = (),
    ) -> None:
        self.origin = origin
        self.host = host
        self.path = path
        self.pairs = pairs
        self.route = route
        self.matrix = matrix

    def _fields(
        self,
    ) -> tuple[str, str, str, tuple[str, ...], str, tuple[tuple[int, str], ...]]:
        return (self.origin, self.host, self.path, self.pairs, self.route, self.matrix)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, NormalizedURL):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return (
            f"NormalizedURL(origin={self.origin!r}, host={self.host!r}, path={self.path!r}, "
            f"pairs={self.pairs!r}, route={self.route!r}, matrix={self.matrix!r})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (NormalizedURL, self._fields())

    @property
    def has_params(self) -> bool:
        """Whether the URL has any parameter, in the query or in the path."""
        return bool(self.pairs or self.matrix)

    @property
    def params(self) -> tuple[str, ...]:
        """Every parameter as its value: query pairs, then ``";name=value"`` of the path."""
        if not self.matrix:
            return self.pairs
        return self.pairs + tuple(";" + param for _, param in self.matrix)

    @property
    def names(self) -> frozenset[str]:
        return frozenset([param_name(param) for param in self.params])

    @property
    def pattern(self) -> str:
        return pattern_key(path_shape(self.path), self.names)

    def value_of(self, name: str) -> str:
        """All values of ``name``, joined, so repeated parameters count as one value."""
        return "&".join([param for param in self.params if param_name(param) == name])

    def with_only(self, keep: Iterable[str] | frozenset[str]) -> str:
        """The URL with only the ``keep`` parameters, in stable name order."""
        keep_set = keep if isinstance(keep, frozenset | set) else frozenset(keep)
        return self._build(keep_set.__contains__)

    def without(self, drop: Iterable[str]) -> str:
        drop_set = frozenset(drop)
        return self._build(lambda name: name not in drop_set)

    def _build(self, keeps: Callable[[str], bool]) -> str:
        pairs = [pair for pair in self.pairs if keeps(param_name(pair))]
        path = self.path
        if self.matrix:
            path = _with_matrix(
                path, [(end, p) for end, p in self.matrix if keeps(";" + param_name(p))]
            )
        if not pairs:
            return self.origin + path + self.route
        if len(pairs) > 1:
            pairs.sort(key=param_name)
        return self.origin + path + "?" + "&".join(pairs) + self.route

    @property
    def url(self) -> str:
        """The full normalized URL, every parameter kept."""
        return self._build(_keep_every)


def _keep_every(name: str) -> bool:
    return True


def _with_matrix(path: str, matrix: list[tuple[int, str]]) -> str:
    """``path`` with ``matrix`` put back, each segment's parameters in stable name order."""
    if not matrix:
        return path
    parts: list[str] = []
    start = 0
    for end, group in groupby(matrix, key=itemgetter(0)):
        parts.append(path[start:end])
        parts.extend(";" + param for param in sorted([p for _, p in group], key=param_name))
        start = end
    parts.append(path[start:])
    return "".join(parts)


def pattern_key(shape: str, names: Iterable[str]) -> str:
    """``/p/*?color&id``: the path shape, then the sorted, case-sensitive parameter names."""
    return shape + "?" + "&".join(sorted(names))


def split_pattern(pattern: str) -> tuple[str, tuple[str, ...]]:
    shape, _, names = pattern.partition("?")
    return shape, tuple(names.split("&")) if names else ()


def check_text(text: str) -> None:
    """Raise :class:`InvalidURL` for input no URL parser should see.

    In this order: invalid UTF-8 (lone surrogates), longer than :data:`MAX_URL_BYTES`,
    control characters, empty.
    """
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


def components(text: str) -> tuple[str, str, str, str, str]:
    """``(origin, host, path, query, route)`` of ``text``, all normalized, or :class:`InvalidURL`.

    ``query`` is without its ``?`` and still holds empty pairs; ``route`` is a ``#!``
    fragment or ``""``. This is :func:`parse` without building an object.
    """
    # Printable ASCII within the size limit cannot fail any check; the rest is checked fully.
    if not (text.isascii() and text.isprintable()) or len(text) > MAX_URL_BYTES or not text:
        check_text(text)
    try:
        href: str = _ada_parse(text).href
    except ValueError:
        raise InvalidURL("not a parsable URL", text[:200]) from None
    except Exception as error:  # a parser bug must become bad input, never a crash
        raise InvalidURL(f"parser error: {type(error).__name__}", text[:200]) from None
    if href.startswith("https://"):
        start = 8
    elif href.startswith("http://"):
        start = 7
    else:
        scheme = href.partition(":")[0]
        raise InvalidURL(f"scheme {scheme!r} is not http or https", text[:200])
    slash = href.find("/", start)
    if slash <= start:
        raise InvalidURL("no host", text[:200])
    end = href.find("#", slash)
    route = ""
    if end < 0:
        end = len(href)
    elif href.startswith("#!", end):
        route = href[end:]
        if "%" in route:
            route = normalize_percent_encoding(route)
    mark = href.find("?", slash, end)
    if mark < 0:
        path = href[slash:end]
        query = ""
    else:
        path = href[slash:mark]
        query = href[mark + 1 : end]
        if "%" in query:
            query = normalize_percent_encoding(query)
    if "%" in path:
        path = normalize_percent_encoding(path)
    origin = href[:slash]
    host = origin[start:]
    if "@" in host:  # userinfo; "@" inside it is always percent-encoded
        host = host[host.rfind("@") + 1 :]
    if ":" in host and not host.endswith("]"):  # a port; IPv6 literals end with "]"
        host = host[: host.rfind(":")]
    return origin, host, path, query, route


def parse(text: str) -> NormalizedURL:
    """Normalize ``text`` or raise :class:`InvalidURL` with the reason. Nothing else escapes."""
    origin, host, path, query, route = components(text)
    pairs: tuple[str, ...] = tuple(split_pairs(query)) if query else ()
    if ";" in path:
        bare, matrix = split_matrix(path)
        return NormalizedURL(origin, host, bare, pairs, route, matrix)
    return NormalizedURL(origin, host, path, pairs, route)
