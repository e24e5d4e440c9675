"""Take what the maps learned to the tools people already run: robots.txt ``Clean-param``,
Zyte duplicate-url-discarder rules, a Varnish VCL snippet, Cloudflare cache-key rules and a
ClearURLs provider list.

Every format drops only what a map learned as neutral (layers ``learned``,
``learned-domain`` and ``verification`` with the decision ``drop``); anything else is kept,
as the map's own conservative default does. A map decides per *pattern* (path shape and
set of names), while these formats speak of names under a host or a path, so a name is
exported for a scope only when *every* learned pattern of that scope holding it dropped it
as neutral:

- host-wide, when every learned pattern of the domain holding the name agrees;
- otherwise under a path, per first path segment (``/p`` covers ``/p`` and ``/p/...``),
  when every learned pattern under that segment agrees.

A pattern the map left undecided (its ``undecided`` records: a client-side shell route, a
disallowed one) keeps every name it holds, values and all, as ``canonicalize`` does, in
both scopes that cover it. Scopes the map never learned nor tried take the rules of the
host (a host-wide name is neutral in every pattern that was learned): there an export
drops what ``canonicalize``, which keeps every parameter of a pattern it does not know,
keeps. Patterns whose first segment is not a word (``/123/x``, shape ``/*``) are never
exported under a path. A format that matches paths by prefix only (``Clean-param``) also
leaves out a segment when a longer segment starting with it, or one that is not a word,
keeps the name (``/p`` would cover ``/pages`` and ``/p1``), and the root path, which as a
prefix covers the whole host; duplicate-url-discarder's patterns can say "this path
exactly" and need not.

ClearURLs writes the query again whenever it removes a field, as ``URLSearchParams``
does: a name without a value gains ``=`` (``?ref&utm_source=x`` becomes ``?ref=``) and
values are form-encoded (a space becomes ``+``). URLs that ``canonicalize`` keeps apart
only by such spellings (``?ref`` and ``?ref=``) are merged by it, and by no other format.

Confirmed default values (``page=1``) are left out only by ``varnish``, the one format
that can say "this value"; the others keep them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from miqps.canonical import StaticLayers
from miqps.maps import DomainMap, Layer, PatternDecision
from miqps.urls import split_pattern

__all__ = ["FORMATS", "NeutralScope", "clean_param_by_host", "export", "neutral_scopes"]

NEUTRAL_LAYERS = frozenset({Layer.LEARNED, Layer.DOMAIN, Layer.VERIFICATION})
HOST_WIDE = ""
"""The scope of a whole host, in :attr:`NeutralScope.segment`."""


@dataclass(frozen=True, slots=True)
class NeutralScope:
    """What a host may drop under one scope: ``segment`` is the first path segment
    (``"p"`` for ``/p`` and ``/p/...``; ``"/"`` for the root path alone) or
    :data:`HOST_WIDE`. ``names`` are neutral parameters, ``default_pairs`` the
    ``name=value`` pairs of kept parameters whose value is a confirmed default."""

    host: str
    segment: str
    names: tuple[str, ...]
    default_pairs: tuple[str, ...] = ()

    @property
    def is_host_wide(self) -> bool:
        return self.segment == HOST_WIDE

    @property
    def path(self) -> str:
        """The path this scope starts with: ``/`` for the host, ``/p`` for segment ``p``."""
        return "/" if self.segment in (HOST_WIDE, "/") else "/" + self.segment


@dataclass(slots=True)
class _Verdicts:
    """Per name, whether every learned pattern holding it dropped it as neutral, and the
    default pairs every pattern holding it confirmed."""

    neutral: dict[str, bool] = field(default_factory=dict)
    defaults: dict[str, set[str]] = field(default_factory=dict)

    def add(self, decision: PatternDecision, keep_always: frozenset[str]) -> None:
        for name in decision.kept | decision.dropped:
            self.neutral[name] = self.neutral.get(name, True) and _learned_neutral(
                decision, name, keep_always
            )
            evidence = decision.params.get(name)
            values = set(evidence.default_values) if evidence and name in decision.kept else set()
            self.defaults[name] = self.defaults.get(name, values) & values

    def keep_all(self, names: Iterable[str]) -> None:
        """A pattern that keeps every name it holds, values and all: an undecided one."""
        for name in names:
            self.neutral[name] = False
            self.defaults[name] = set()

    def neutral_names(self) -> set[str]:
        return {name for name, neutral in self.neutral.items() if neutral}

    def default_pairs(self, dropped: set[str]) -> set[str]:
        return {
            pair for name, values in self.defaults.items() if name not in dropped for pair in values
        }


def _learned_neutral(decision: PatternDecision, name: str, keep_always: frozenset[str]) -> bool:
    evidence = decision.params.get(name)
    return (
        name in decision.dropped
        and name not in keep_always
        and evidence is not None
        and evidence.decision == "drop"
        and evidence.layer in NEUTRAL_LAYERS
    )


def _segment_of(shape: str) -> str | None:
    """The first segment of a path shape (``"/"`` for the root), or None when it is not a
    word (``/*``) and so names no path."""
    head = shape.split("/", 2)[1] if shape.count("/") >= 1 else ""
    if head == "*":
        return None
    return head or "/"


def neutral_scopes(domain_map: DomainMap, layers: StaticLayers | None = None) -> list[NeutralScope]:
    """The scopes of ``domain_map`` with something to drop: the host first, then path
    segments in order. A name dropped host-wide is not repeated under a path."""
    keep_always = (layers or StaticLayers.default()).allowlist
    host = _Verdicts()
    by_segment: dict[str | None, _Verdicts] = {}
    for key, decision in domain_map.patterns.items():
        shape, _ = split_pattern(key)
        host.add(decision, keep_always)
        by_segment.setdefault(_segment_of(shape), _Verdicts()).add(decision, keep_always)
    for key in domain_map.undecided:
        shape, held = split_pattern(key)
        host.keep_all(held)
        by_segment.setdefault(_segment_of(shape), _Verdicts()).keep_all(held)
    host_names = host.neutral_names()
    scopes: list[NeutralScope] = []
    host_defaults = host.default_pairs(host_names)
    if host_names or host_defaults:
        scopes.append(
            NeutralScope(
                domain_map.domain,
                HOST_WIDE,
                tuple(sorted(host_names)),
                tuple(sorted(host_defaults)),
            )
        )
    for segment in sorted(s for s in by_segment if s is not None):
        verdicts = by_segment[segment]
        names = verdicts.neutral_names()
        defaults = verdicts.default_pairs(names) - host_defaults
        names -= host_names
        if names or defaults:
            scopes.append(
                NeutralScope(
                    domain_map.domain, segment, tuple(sorted(names)), tuple(sorted(defaults))
                )
            )
    return scopes


def _prefix_safe(scopes: list[NeutralScope], domain_map: DomainMap) -> list[NeutralScope]:
    """The scopes a path *prefix* can say: the root path covers the whole host, and ``/p``
    covers ``/pages`` and ``/p1`` too, so a segment loses the names kept under a longer
    segment or under one that is not a word (shape ``/*``)."""
    kept_under: dict[str | None, set[str]] = {}
    for key, decision in domain_map.patterns.items():
        kept_under.setdefault(_segment_of(split_pattern(key)[0]), set()).update(
            name
            for name in decision.kept | decision.dropped
            if not _learned_neutral(decision, name, frozenset())
        )
    for key in domain_map.undecided:
        shape, held = split_pattern(key)
        kept_under.setdefault(_segment_of(shape), set()).update(held)
    safe: list[NeutralScope] = []
    for scope in scopes:
        if scope.segment == "/":
            continue
        names = set(scope.names)
        if not scope.is_host_wide:
            for other, kept in kept_under.items():
                if other is None or (other != scope.segment and other.startswith(scope.segment)):
                    names -= kept
        if names:
            safe.append(NeutralScope(scope.host, scope.segment, tuple(sorted(names))))
    return safe


def _scopes(
    maps: Mapping[str, DomainMap], layers: StaticLayers, prefix_only: bool = False
) -> Iterable[tuple[DomainMap, list[NeutralScope]]]:
    for domain in sorted(maps):
        domain_map = maps[domain]
        scopes = neutral_scopes(domain_map, layers)
        if prefix_only:
            scopes = _prefix_safe(scopes, domain_map)
        if scopes:
            yield domain_map, scopes


# Clean-param: "p0[&p1&p2..&pn] [path]", at most 500 characters; the path a prefix made of
# A-Za-z0-9.-/*_ (Yandex Webmaster help, "The Clean-param directive").
_CLEAN_PARAM_NAME = re.compile(r"[A-Za-z0-9._-]+")
_CLEAN_PARAM_PATH = re.compile(r"/[A-Za-z0-9.\-/*_]*")
CLEAN_PARAM_MAX_LINE = 500


def clean_param_by_host(maps: Mapping[str, DomainMap], layers: StaticLayers) -> dict[str, str]:
    """Per host, the lines to append to its robots.txt: ``Clean-param: a&b`` host-wide,
    ``Clean-param: a /p`` under a path. Yandex reads Clean-param anywhere in the file, so
    there is no ``User-agent`` line: a ``User-agent: Yandex`` group would make Yandex
    follow that group and ignore the file's ``User-agent: *`` rules. Names or paths the
    grammar cannot spell are left out (kept)."""
    files: dict[str, str] = {}
    for domain_map, scopes in _scopes(maps, layers, prefix_only=True):
        lines: list[str] = []
        for scope in scopes:
            path = "" if scope.is_host_wide else scope.path
            if path and not _CLEAN_PARAM_PATH.fullmatch(path):
                continue
            names = [name for name in scope.names if _CLEAN_PARAM_NAME.fullmatch(name)]
            lines.extend(_clean_param_lines(names, path))
        if lines:
            heading = f"# MIQPS: {domain_map.domain} (map version {domain_map.version})"
            files[domain_map.domain] = "\n".join([heading, *lines]) + "\n"
    return files


def clean_param(maps: Mapping[str, DomainMap], layers: StaticLayers) -> str:
    """:func:`clean_param_by_host` for every host, one block each: robots.txt is per
    host, so each block goes into its own host's file."""
    return "\n".join(clean_param_by_host(maps, layers).values())


def _clean_param_lines(names: list[str], path: str) -> list[str]:
    budget = CLEAN_PARAM_MAX_LINE - len("Clean-param: ") - len(path) - 1
    lines: list[str] = []
    chunk: list[str] = []
    for name in names:
        if chunk and len("&".join([*chunk, name])) > budget:
            lines.append(_clean_param_line(chunk, path))
            chunk = []
        chunk.append(name)
    if chunk:
        lines.append(_clean_param_line(chunk, path))
    return lines


def _clean_param_line(names: list[str], path: str) -> str:
    return f"Clean-param: {'&'.join(names)} {path}".rstrip()


# url-matcher patterns (``*`` is any text) for paths under a segment that a server reads as
# another path: a dot segment, plain or percent-encoded, or a backslash (a slash to WHATWG).
_DUD_ELSEWHERE = (".", "*/.", "%2e", "*/%2e", "%2E", "*/%2E", "*\\")


def dud_rules(maps: Mapping[str, DomainMap], layers: StaticLayers) -> str:
    """duplicate-url-discarder rules: one ``queryRemoval`` rule per host and path, its
    ``urlPattern`` in url-matcher syntax. ``host/`` (with a path) matches that host only,
    where ``host`` alone would match its subdomains too; ``host/p|`` is the path ``/p``
    exactly and ``host/p/`` what lies below it. A path's rule repeats the host's names, in
    case only the most specific matching rule applies."""
    rules: list[dict[str, object]] = []
    for domain_map, scopes in _scopes(maps, layers):
        host_names: tuple[str, ...] = ()
        for scope in scopes:
            if not scope.names or any(ch in scope.segment for ch in "*|"):
                continue
            if scope.is_host_wide:
                host_names = scope.names
                include = [f"{domain_map.domain}/"]
            elif scope.segment == "/":
                include = [f"{domain_map.domain}/|"]
            else:
                below = f"{domain_map.domain}{scope.path}/"
                include = [f"{domain_map.domain}{scope.path}|", below]
            pattern: dict[str, list[str]] = {"include": include}
            if not scope.is_host_wide and scope.segment != "/":
                pattern["exclude"] = [below + tail for tail in _DUD_ELSEWHERE]
            rules.append(
                {
                    "args": sorted({*host_names, *scope.names}),
                    "order": 100 + len(rules),
                    "processor": "queryRemoval",
                    "urlPattern": pattern,
                }
            )
    return json.dumps(rules, indent=2, ensure_ascii=False) + "\n"


def _path_regex(scope: NeutralScope) -> str:
    """A regular expression for the paths of ``scope`` (ASCII, PCRE and JavaScript alike)."""
    if scope.is_host_wide:
        return "/"
    if scope.segment == "/":
        return "/(?:[?#]|$)"
    return re.escape(scope.path) + "(?:[/?#]|$)"


def _vcl_regex(text: str) -> str | None:
    """``text`` as a regular expression inside a VCL string, which has no escapes: None
    when it holds a character such a string cannot (the name is then kept)."""
    return None if any(ch in text for ch in '"\r\n') else re.escape(text)


_VCL_KEY = "req.http.X-MIQPS-Key"
_VCL_QUERY = "req.http.X-MIQPS-Query"


def _vcl_set(function: str, regex: str, replacement: str) -> str:
    return f'set {_VCL_QUERY} = {function}({_VCL_QUERY}, "{regex}", "{replacement}");'


def _lone_pair(name: str, value: str) -> str:
    """A regular expression for the pair ``name=value`` in a query written ``&a=1&b=2``,
    when ``name`` appears once: a repeated name's values are one value (``page=1&page=2``
    is not the default), and which of them a site reads is its own business. Group 1 is
    what precedes it."""
    this_name = f"&{name}(?:[=&]|$)"
    return f"^((?:(?!{this_name})&[^&]*)*)&{name}={value}(?=&|$)(?!(?:&[^&]*)*{this_name})"


# A path a server may read as another path: a dot segment (plain or percent-encoded) or a
# backslash, which WHATWG parsers take for a slash. Path scopes never apply to such paths.
_VCL_UNSAFE_PATH = r"(?i)\\|/(?:\.|%2e)"

_VCL_USAGE = """\
# MIQPS: hash URLs without their learned-neutral query parameters (VCL 4.1).
#   include "miqps.vcl";   # a relative name is looked up on the vcl_path parameter
#   sub vcl_recv { call miqps_strip; }
#   sub vcl_hash { call miqps_hash; return (lookup); }
# miqps_hash hashes the stripped URL and the host; anything your vcl_hash hashes
# besides is added to it. Without return (lookup), the built-in vcl_hash also hashes
# req.url, and URLs differing in neutral parameters are cached apart again."""


def varnish(maps: Mapping[str, DomainMap], layers: StaticLayers) -> str:
    """A VCL 4.1 snippet with two subroutines for the user's own ``vcl_recv`` and
    ``vcl_hash`` to call: ``miqps_strip`` computes ``req.http.X-MIQPS-Key``, the URL
    without neutral parameters and default values, and ``miqps_hash`` hashes it with the
    host. The query is everything after the first ``?`` and its pairs are split on ``&``
    only, as :mod:`miqps.urls` reads them, so a ``?`` inside a value (``q=a?utm_source=x``,
    ``next=/cart?ref=1``) or an ``&`` in the path is never taken for a pair's start."""
    out = [
        _VCL_USAGE,
        "sub miqps_strip {",
        f'    set {_VCL_KEY} = regsub(req.url, "\\?.*", "");',
        f'    set {_VCL_QUERY} = regsub(req.url, "^[^?]*\\??", "&");',
    ]
    for domain_map, scopes in _scopes(maps, layers):
        host = _vcl_regex(domain_map.domain.lower())
        if host is None:
            continue
        out.append(f'    if (req.http.host ~ "^(?i){host}(?::[0-9]+)?$") {{')
        for scope in scopes:
            removals = [n for n in map(_vcl_regex, scope.names) if n]
            statements = []
            if removals:
                statements.append(
                    _vcl_set("regsuball", f"&(?:{'|'.join(removals)})(?:=[^&]*)?(?=&|$)", "")
                )
            for pair in scope.default_pairs:
                name, _, value = pair.partition("=")
                name_regex, value_regex = _vcl_regex(name), _vcl_regex(value)
                if name_regex is not None and value_regex is not None:
                    statements.append(
                        _vcl_set("regsub", _lone_pair(name_regex, value_regex), "\\1")
                    )
            if not statements:
                continue
            indent = "        "
            if not scope.is_host_wide:
                out.append(
                    f'        if ({_VCL_KEY} ~ "^{_path_regex(scope)}" && '
                    f'{_VCL_KEY} !~ "{_VCL_UNSAFE_PATH}") {{'
                )
                indent += "    "
            out.extend(indent + statement for statement in statements)
            if not scope.is_host_wide:
                out.append("        }")
        out.append("    }")
    out += [
        f'    set {_VCL_QUERY} = regsub({_VCL_QUERY}, "&+$", "");',
        f'    if ({_VCL_QUERY} ~ ".") {{',
        f'        set {_VCL_KEY} = {_VCL_KEY} + "?" + regsub({_VCL_QUERY}, "^&", "");',
        "    }",
        f"    unset {_VCL_QUERY};",
        "}",
        "",
        "sub miqps_hash {",
        f"    hash_data({_VCL_KEY});",
        "    if (req.http.host) {",
        "        hash_data(req.http.host);",
        "    } else {",
        "        hash_data(server.ip);",
        "    }",
        "}",
    ]
    return "\n".join(out) + "\n"


def _cloudflare_string(text: str) -> str:
    return json.dumps(text)  # the rules language takes "..." strings with \" and \\ escapes


def cloudflare(
    maps: Mapping[str, DomainMap], layers: StaticLayers, *, cache_key_only: bool = False
) -> str:
    """A ruleset for the ``http_request_cache_settings`` phase (the body of the Rulesets
    API's "update a zone entry point ruleset"): per host and path, a ``set_cache_settings``
    rule excluding the neutral names from the cache key. A later matching rule overrides
    an earlier one's cache key, so a path's rule repeats the host's names.

    Each rule also sets ``"cache": true``, which makes every matching response eligible
    for caching (HTML included), as the dashboard's "Eligible for cache" does. With
    ``cache_key_only`` it is left out (the API's schema makes it optional): the rule sets
    the cache key alone and eligibility stays with the zone's other rules."""
    rules: list[dict[str, object]] = []
    for domain_map, scopes in _scopes(maps, layers):
        host_names: tuple[str, ...] = ()
        host = f"http.host eq {_cloudflare_string(domain_map.domain)}"
        for scope in scopes:
            if not scope.names:
                continue
            if scope.is_host_wide:
                host_names = scope.names
                expression = f"({host})"
            else:
                path = "http.request.uri.path"
                where = f"{path} eq {_cloudflare_string(scope.path)}"
                if scope.segment != "/":
                    where += f" or starts_with({path}, {_cloudflare_string(scope.path + '/')})"
                expression = f"({host} and ({where}))"
            rules.append(
                {
                    "description": f"MIQPS: {domain_map.domain} {scope.path} "
                    f"(map version {domain_map.version})",
                    "expression": expression,
                    "action": "set_cache_settings",
                    "action_parameters": {
                        **({} if cache_key_only else {"cache": True}),
                        "cache_key": {
                            "custom_key": {
                                "query_string": {
                                    "exclude": {"list": sorted({*host_names, *scope.names})}
                                }
                            }
                        },
                    },
                    "enabled": True,
                }
            )
    document = {
        "name": "MIQPS cache keys",
        "kind": "zone",
        "phase": "http_request_cache_settings",
        "rules": rules,
    }
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def clearurls(maps: Mapping[str, DomainMap], layers: StaticLayers) -> str:
    """A ClearURLs rules file (``{"providers": {...}}``), one provider per host and path.
    ClearURLs matches rules case-insensitively, so a name is left out (kept) when another
    spelling of it in the map is not dropped in the same scope."""
    providers: dict[str, dict[str, object]] = {}
    for domain_map, scopes in _scopes(maps, layers):
        spellings: dict[str, set[str]] = {}
        for decision in domain_map.patterns.values():
            for name in decision.kept | decision.dropped:
                spellings.setdefault(name.lower(), set()).add(name)
        host = re.escape(domain_map.domain.lower())
        for scope in scopes:
            exported = set(scope.names)
            rules = [
                re.escape(name)
                for name in scope.names
                if spellings.get(name.lower(), {name}) <= exported
            ]
            if not rules:
                continue
            providers[f"miqps:{domain_map.domain}{scope.path}"] = {
                "urlPattern": f"^https?://(?:[^/?#]*@)?{host}(?::[0-9]+)?{_path_regex(scope)}",
                "completeProvider": False,
                "rules": rules,
                "rawRules": [],
                "referralMarketing": [],
                "exceptions": [],
                "redirections": [],
                "forceRedirection": False,
            }
    return json.dumps({"providers": providers}, indent=2, ensure_ascii=False) + "\n"


FORMATS: dict[str, Callable[[Mapping[str, DomainMap], StaticLayers], str]] = {
    "clean-param": clean_param,
    "dud-rules": dud_rules,
    "varnish": varnish,
    "cloudflare": cloudflare,
    "clearurls": clearurls,
}


def export(
    maps: Mapping[str, DomainMap],
    format_name: str,
    layers: StaticLayers | None = None,
    *,
    cache_key_only: bool = False,
) -> str:
    """``maps`` in the format ``format_name`` (one of :data:`FORMATS`); ``cache_key_only``
    is :func:`cloudflare`'s."""
    try:
        writer = FORMATS[format_name]
    except KeyError:
        raise ValueError(f"unknown format {format_name!r}; one of {', '.join(FORMATS)}") from None
    if cache_key_only:
        if format_name != "cloudflare":
            raise ValueError("cache_key_only is for the cloudflare format")
        return cloudflare(maps, layers or StaticLayers.default(), cache_key_only=True)
    return writer(maps, layers or StaticLayers.default())
