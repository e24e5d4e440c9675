"""The rules of a site: which page a URL shows, or where it redirects."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple
from urllib.parse import quote, unquote_plus

from simweb.sites import (
    MATRIX_MARK,
    MissingKey,
    PageKind,
    Param,
    Rendering,
    Role,
    Route,
    Site,
    UnknownKey,
)


@dataclass(frozen=True)
class Page:
    kind: PageKind
    key: str
    route: Route | None = None
    item: int = -1
    other: int = -1
    segment: str = ""
    values: tuple[tuple[str, str], ...] = ()
    layout: str = ""
    """The layout parameter the page is shown in (a print view), not part of its key."""


@dataclass(frozen=True)
class Resolution:
    status: int
    page: Page
    location: str = ""
    echo: tuple[tuple[str, str], ...] = ()


class QueryPair(NamedTuple):
    name: str
    value: str
    raw: str


def split_target(url: str) -> tuple[str, str, str]:
    """Split an absolute http(s) URL into (host, path, query) without the fragment."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in ("http", "https"):
        raise ValueError(f"not an absolute http URL: {url!r}")
    rest = rest.split("#", 1)[0]
    cut = len(rest)
    for sep in "/?":
        pos = rest.find(sep)
        if 0 <= pos < cut:
            cut = pos
    authority, tail = rest[:cut], rest[cut:]
    host = normalize_host(authority)
    path, _, query = tail.partition("?")
    return host, path or "/", query


def normalize_host(authority: str) -> str:
    host = authority.rsplit("@", 1)[-1].lower()
    for port in (":80", ":443"):
        if host.endswith(port):
            host = host[: -len(port)]
    return host.rstrip(".")


def _unquote(text: str) -> str:
    if "%" in text or "+" in text:
        return unquote_plus(text)
    return text


def parse_query(query: str) -> list[QueryPair]:
    pairs = []
    for raw in query.split("&"):
        if not raw:
            continue
        name, _, value = raw.partition("=")
        pairs.append(QueryPair(_unquote(name), _unquote(value), raw))
    return pairs


def first_values(pairs: Sequence[QueryPair]) -> dict[str, str]:
    values: dict[str, str] = {}
    for pair in pairs:
        values.setdefault(pair.name, pair.value)
    return values


def split_matrix(path: str) -> tuple[str, list[QueryPair]]:
    """``/a;x=1/b;y=2;z=3`` -> (``/a/b``, its matrix parameters named ``;x``, ``;y``, ``;z``)."""
    if MATRIX_MARK not in path:
        return path, []
    segments = []
    pairs = []
    for segment in path.split("/"):
        head, *params = segment.split(MATRIX_MARK)
        segments.append(head)
        for raw in params:
            if raw:
                name, _, value = raw.partition("=")
                pairs.append(QueryPair(MATRIX_MARK + _unquote(name), _unquote(value), raw))
    return "/".join(segments), pairs


def request_values(path: str, query: str) -> tuple[str, dict[str, str]]:
    """The path without matrix parameters, and the first value of every query and matrix
    parameter (matrix names keep their leading ``;``)."""
    clean, matrix = split_matrix(path)
    values = first_values(parse_query(query))
    for pair in matrix:
        values.setdefault(pair.name, pair.value)
    return clean, values


def match_route(site: Site, path: str) -> tuple[Route, str] | None:
    """The route serving ``path`` (matrix parameters ignored) and its key segment."""
    path = split_matrix(path)[0]
    for route in site.routes:
        if route.path_key:
            if path.startswith(route.path) and len(path) > len(route.path):
                segment = unquote_plus(path[len(route.path) :])
                if "/" not in segment:
                    return route, segment
        elif path == route.path:
            return route, ""
    return None


def home_page(site: Site) -> Page:
    return Page(PageKind.HOME, f"{site.host}|home", site.routes[0])


def not_found_page(site: Site) -> Page:
    return Page(PageKind.NOT_FOUND, f"{site.host}|notfound")


def error_page(site: Site) -> Page:
    return Page(PageKind.ERROR, f"{site.host}|error")


def missing_key_key(site: Site) -> str:
    """The content key of what a keyed route shows without its key."""
    return (error_page(site) if site.missing_key is MissingKey.TERSE else home_page(site)).key


def not_found(site: Site) -> Resolution:
    status = 200 if site.unknown_key is UnknownKey.SOFT else 404
    return Resolution(status, not_found_page(site))


def _normalize(param: Param, raw: str) -> str | None:
    role = param.role
    if role is Role.VARIANT:
        return raw if raw in param.values else None
    if role in (Role.DEFAULTED, Role.SORT):
        return raw if raw in param.values and raw != param.default else None
    if role is Role.PAGINATION:
        try:
            number = int(raw)
        except ValueError:
            return None
        default = int(param.default or "1")
        return str(number) if number > default else None
    if role is Role.FILTER:
        text = raw.strip()
        return text or None
    return None


def page_for(site: Site, route: Route, segment: str, params: Mapping[str, str]) -> Page | None:
    """The page ``route`` shows for these first-occurrence parameter values.

    None means the route's key parameter is missing (the site bounces to its home page).
    """
    catalog = site.catalog
    kind = route.kind
    if kind is PageKind.HOME:
        return home_page(site)
    item = -1
    other = -1
    if kind is PageKind.LISTING:
        if route.path_key:
            pool = catalog.categories if route.path_key == "category" else catalog.tags
            if segment not in pool:
                return not_found_page(site)
    elif route.path_key:
        item = catalog.find(route.path_key, segment)
        if item < 0:
            return not_found_page(site)
    else:
        for name in route.key:
            value = params.get(name)
            if value is not None:
                key_param = route.param(name)
                assert key_param is not None
                item = catalog.find(key_param.attr, value)
                if item < 0:
                    return not_found_page(site)
                break
        else:
            return None
    values: list[tuple[str, str]] = []
    layout = ""
    for param in route.params:
        raw = params.get(param.name)
        if raw is None or param.name in route.key:
            continue
        if param.role is Role.LAYOUT:
            layout = param.name if raw in param.values else layout
            continue
        if param.role is Role.IDENTITY:
            other = catalog.find(param.attr, raw)
            continue
        if not param.applies_to(item):
            continue
        norm = _normalize(param, raw)
        if norm is not None:
            values.append((param.name, norm))
    parts = [site.host, route.name]
    if item >= 0:
        parts.append(f"#{item}")
    if other >= 0:
        parts.append(f"+{other}")
    if segment and kind is PageKind.LISTING:
        parts.append(f"@{segment}")
    parts.extend(f"{name}={value}" for name, value in values)
    return Page(kind, "|".join(parts), route, item, other, segment, tuple(values), layout)


def page_key(site: Site, path: str, query: str) -> str:
    """The content key of the page ``path?query`` ends on (redirects followed)."""
    clean, values = request_values(path, query)
    match = match_route(site, clean)
    if match is None:
        return f"{site.host}|notfound"
    route, segment = match
    page = page_for(site, route, segment, values)
    return missing_key_key(site) if page is None else page.key


def page_shown(sites: Sequence[Site]) -> Callable[[str], str]:
    """The content key of the page a URL shows on ``sites`` (redirects followed), or an
    empty string for a URL that is not on them."""
    by_host = {site.host: site for site in sites}

    def shown(text: str) -> str:
        try:
            host, path, query = split_target(text)
        except ValueError:
            return ""
        site = by_host.get(host)
        return "" if site is None else page_key(site, path, query)

    return shown


def resolve(site: Site, path: str, query: str) -> Resolution:
    """What the site answers for ``path?query``: a page, a redirect or a not-found."""
    pairs = parse_query(query)
    clean, values = request_values(path, query)
    match = match_route(site, clean)
    if match is None:
        return not_found(site)
    route, segment = match
    echo = tuple(
        (p.name, p.value)
        for p in pairs
        if site.noise_role(route, p.name) in (Role.TRACKING, Role.SESSION)
    )
    # The client-rendered front ends run on an app server without the legacy redirect.
    if site.tracking_redirect and route.rendering is Rendering.SERVER:
        kept = [p.raw for p in pairs if site.noise_role(route, p.name) is not Role.TRACKING]
        if len(kept) < len(pairs):
            clean_query = "&".join(kept)
            target = resolve(site, path, clean_query)
            location = f"http://{site.host}{quote(path, safe='/%:@!$&()*+,;=-._~')}"
            if clean_query:
                location += "?" + clean_query
            return Resolution(site.tracking_redirect, target.page, location, echo)
    page = page_for(site, route, segment, values)
    if page is None:
        if site.missing_key is MissingKey.TERSE:
            return Resolution(404, error_page(site), "", echo)
        return Resolution(302, home_page(site), f"http://{site.host}/", echo)
    if page.kind is PageKind.NOT_FOUND:
        return not_found(site)
    return Resolution(200, page, "", echo)


def canonical_url(site: Site, page: Page) -> str:
    """The correct canonical URL of a page."""
    route = page.route
    base = f"http://{site.host}"
    if route is None or page.kind is PageKind.HOME:
        return base + "/"
    catalog = site.catalog
    path = route.path
    if route.path_key:
        path += quote(page.segment, safe="")
    query: list[tuple[str, str]] = []
    if route.key and page.item >= 0:
        key_param = route.param(route.key[0])
        assert key_param is not None
        query.append((key_param.name, catalog.items[page.item].key(key_param.attr)))
    second = route.second
    if second is not None and page.other >= 0:
        query.append((second.name, catalog.items[page.other].key(second.attr)))
    for name, value in page.values:
        if name.startswith(MATRIX_MARK):
            path += f"{MATRIX_MARK}{quote(name[1:])}={quote(value)}"
        else:
            query.append((name, value))
    if not query:
        return base + path
    return base + path + "?" + "&".join(f"{quote(n)}={quote(v)}" for n, v in query)
