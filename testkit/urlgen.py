"""Synthetic URLs and the maps that decide them, for the tests and the benchmarks alike.

- :func:`generate` and :func:`build_maps`: realistic URLs over about 200 sites (IDNA hosts,
  matrix session ids, fragments, confirmed default values), with maps learning most of
  their patterns (``bench.canonicalize_speed``'s mix);
- :func:`fuzzed_url` and :func:`learned_looking_maps`: URLs that stress every
  normalization, with maps learned-looking enough that dropping moves URLs between learned
  patterns (``bench.canonical_fuzz``);
- :func:`synthetic_urls` and :func:`learned_maps`: product, search and article URLs with
  tracking parameters, and maps deciding every pattern (``bench.stream_throughput``).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field

from miqps.maps import DomainMap, Layer, ParamEvidence, PatternDecision, Verification, utc_now
from miqps.urls import InvalidURL, parse, path_shape, pattern_key

DOMAIN_COUNT = 200
LEARNED_SHARE = 0.9


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


_WORDS = _words(
    "red blue green black white large small classic organic vintage leather cotton summer "
    "winter running trail garden kitchen travel office wireless smart mini pro ultra eco"
)
_NOUNS = _words(
    "shoe jacket lamp chair table phone cable bag watch camera kettle mug desk sofa tent "
    "bike helmet book guitar blender"
)
_TOPICS = _words("politics sports tech science business culture travel health food opinion")
_TLDS = ("com", "com", "com", "net", "org", "de", "co.uk", "fr", "io", "shop")
_IDNA_HOSTS = ("bücher-{n}.de", "münchen-shop{n}.de", "café-{n}.fr", "例え{n}.jp", "пример{n}.рф")

# What a site's parameters are, by kind: content parameters change the page (kept), the
# rest are tracking, session and identity noise (dropped by the learned maps).
_CONTENT = {
    "product": ("id", "variant", "color", "size", "sku"),
    "search": ("q", "page", "sort", "category", "brand", "price_max"),
    "article": ("page", "lang", "amp"),
    "category": ("page", "sort", "sz", "start", "filter"),
}
# Confirmed default values the maps carry (a learned map elides them): 30% of URLs use them.
_DEFAULTS = {"page": "page=1", "sort": "sort=relevance", "lang": "lang=en"}
_TRACKING = (
    "utm_source",
    "utm_medium",
    "utm_campaign",
    "utm_content",
    "gclid",
    "fbclid",
    "ref",
    "mc_eid",
    "_ga",
    "src",
    "cmpid",
    "yclid",
)
_SESSION = ("sid", "sessionid", "jsessionid", "PHPSESSID", "_hsenc")
_IDENTITY = ("uid", "user_id", "email_hash", "token")
_NOISE = _TRACKING + _SESSION + _IDENTITY


@dataclass
class Site:
    """A site: how its URLs look, and which parameter combinations its links carry."""

    host: str  # as written in URLs (may be Unicode or uppercase)
    ascii_host: str  # as WHATWG serializes it: the key of its map
    kinds: tuple[str, ...]
    paths: dict[str, tuple[int, ...]]  # kind -> which path templates the site uses
    combos: dict[str, tuple[tuple[str, ...], ...]]  # kind -> content parameter sets
    bundles: tuple[tuple[str, ...], ...]  # tracking/session/identity sets links carry
    session_in_path: bool  # jsessionid as a matrix parameter of the last path segment
    patterns: dict[str, tuple[frozenset[str], frozenset[str]]] = field(default_factory=dict)


def make_sites(rng: random.Random, count: int = DOMAIN_COUNT) -> list[Site]:
    import can_ada

    sites: list[Site] = []
    for number in range(count):
        if number % 40 == 7:
            host = rng.choice(_IDNA_HOSTS).format(n=number)
        else:
            stem = f"{rng.choice(_WORDS)}-{rng.choice(_NOUNS)}{number}"
            host = f"{rng.choice(('www.', 'shop.', '', 'm.'))}{stem}.{rng.choice(_TLDS)}"
        ascii_host = can_ada.parse(f"https://{host}/").hostname
        kinds = tuple(rng.sample(sorted(_CONTENT), rng.randint(1, 3)))
        paths = {kind: tuple(rng.sample(range(_PATH_TEMPLATES), 2)) for kind in kinds}
        combos = {
            kind: tuple(tuple(rng.sample(_CONTENT[kind], rng.randint(1, 3))) for _ in range(2))
            for kind in kinds
        }
        noise = rng.sample(_NOISE, 8)
        bundles = ((), (), *(tuple(noise[i : i + rng.randint(1, 3)]) for i in range(0, 8, 2)))
        sites.append(Site(host, ascii_host, kinds, paths, combos, bundles, rng.random() < 0.5))
    return sites


_PATH_TEMPLATES = 3


def _slug(rng: random.Random) -> str:
    return "-".join([*rng.sample(_WORDS, rng.randint(1, 3)), rng.choice(_NOUNS)])


def _path(rng: random.Random, kind: str, template: int) -> str:
    if kind == "product":
        return (
            f"/p/{rng.randint(1, 10**7)}",
            f"/product/{_slug(rng)}-{rng.randint(1, 10**6)}",
            "/item",
        )[template]
    if kind == "search":
        return ("/search", "/s", "/search/results")[template]
    if kind == "article":
        return (
            f"/news/{rng.randint(2015, 2026)}/{rng.randint(1, 12):02d}/{_slug(rng)}",
            f"/{rng.choice(_TOPICS)}/{_slug(rng)}-{rng.randint(1, 10**5)}",
            f"/blog/{_slug(rng)}",
        )[template]
    return (
        f"/c/{rng.choice(_NOUNS)}",
        f"/c/{rng.choice(_NOUNS)}/{rng.choice(_WORDS)}",
        "/category",
    )[template]


def _value(rng: random.Random, name: str) -> str:
    if name == "q":
        words = rng.sample((*_WORDS, *_NOUNS), rng.randint(1, 3))
        spelling = rng.random()
        if spelling < 0.5:
            return "+".join(words)
        if spelling < 0.8:
            return "%20".join(words)
        return "%20".join(words) + rng.choice(("%C3%A9t%C3%A9", "%e2%82%ac", "%2fx", "%7e1"))
    if name in _DEFAULTS and rng.random() < 0.3:
        return _DEFAULTS[name].partition("=")[2]
    if name in ("id", "sku", "uid", "user_id", "page", "start", "sz", "price_max"):
        return str(rng.randint(1, 10**6))
    if name in (
        "sid",
        "sessionid",
        "jsessionid",
        "PHPSESSID",
        "token",
        "email_hash",
        "_ga",
        "gclid",
        "fbclid",
        "yclid",
        "mc_eid",
        "_hsenc",
    ):
        return f"{rng.getrandbits(64):016x}"
    if name == "filter":
        return rng.choice(("brand%3Aacme", "color%3ablue%2Csize%3AM", "price%3C100"))
    return rng.choice(_WORDS)


def generate(n: int, seed: int = 7) -> tuple[list[str], list[Site]]:
    """``n`` URLs over :data:`DOMAIN_COUNT` sites, and the sites with the patterns they use.

    Each URL carries one of its site's content parameter sets plus one tracking, session or
    identity bundle (or none): 1 to 6 parameters, shuffled, with fresh values.
    """
    rng = random.Random(seed)
    sites = make_sites(rng)
    weights = [1.0 / (rank + 1) ** 0.6 for rank in range(len(sites))]  # a few big sites
    urls: list[str] = []
    for site in rng.choices(sites, weights=weights, k=n):
        kind = rng.choice(site.kinds)
        path = _path(rng, kind, rng.choice(site.paths[kind]))
        content_names = rng.choice(site.combos[kind])
        noise_names = rng.choice(site.bundles)
        names = [*content_names, *noise_names]
        rng.shuffle(names)
        if site.session_in_path and "jsessionid" in names:
            names.remove("jsessionid")
            path += f";jsessionid={_value(rng, 'jsessionid')}"
            noise_names = tuple(";" + n if n == "jsessionid" else n for n in noise_names)
        query = "&".join([f"{name}={_value(rng, name)}" for name in names])
        scheme = "https" if rng.random() < 0.9 else "http"
        host = site.host.upper() if rng.random() < 0.02 else site.host
        fragment = rng.choice(("", "", "", "", "", "", "", "", "#reviews", "#!/tab/specs"))
        urls.append(f"{scheme}://{host}{path}?{query}{fragment}")
        key = (
            path_shape(path.partition(";")[0])
            + "?"
            + "&".join(sorted([*content_names, *noise_names]))
        )
        site.patterns.setdefault(key, (frozenset(content_names), frozenset(noise_names)))
    return urls, sites


def build_maps(sites: list[Site], rng: random.Random) -> list[DomainMap]:
    """One map per site; :data:`LEARNED_SHARE` of the patterns seen are learned."""
    maps: list[DomainMap] = []
    stamp = "2026-01-01T00:00:00Z"
    for site in sites:
        patterns: dict[str, PatternDecision] = {}
        for key, (kept, dropped) in sorted(site.patterns.items()):
            if rng.random() >= LEARNED_SHARE:
                continue
            params = {
                name: ParamEvidence(
                    "keep",
                    Layer.LEARNED,
                    3,
                    3,
                    0,
                    0,
                    [_DEFAULTS[name]] if name in _DEFAULTS else [],
                )
                for name in kept
            }
            params.update(
                {name: ParamEvidence("drop", Layer.LEARNED, 3, 0, 3, 0) for name in dropped}
            )
            patterns[key] = PatternDecision(
                kept, dropped, params, Verification(2, 0, 0, []), stamp, 10
            )
        maps.append(DomainMap(site.ascii_host, 1, stamp, patterns))
    return maps


HOSTS = (
    "forum.example",
    "shop.example",
    "java.example",
    "Shop.Example",
    "b\u00fccher.example",
    "shop.example:8080",
    "u:p@shop.example",
    "[::1]",
    "other.example",
    "10.0.0.1",
)
SEGMENTS = (
    "p",
    "board",
    "12",
    "docs",
    "guide",
    "..",
    ".",
    "%2e",
    "a;b",
    "x;y;z",
    "caf%C3%A9",
    "%%36%31",
    "%%32%45",
    "%4%31",
    "%7euser",
    "",
    "item-42",
    "%3B",
    "a%2Fb",
)
MATRIX = ("jsessionid", "sid", "v", "utm_source", "JSESSIONID", "1x", "")
NAMES = (
    "id",
    "b",
    "start",
    "order",
    "page",
    "hl",
    "q",
    "ref",
    "sid",
    "utm_source",
    "utm_medium",
    "gclid",
    "fbclid",
    "variant",
    "a",
    "a.b",
    "a-b",
    "A",
    "",
    "x%3Dy",
    "%75tm",
    ";v",
)
VALUES = (
    "1",
    "2",
    "45",
    "en",
    "latest",
    "general",
    "",
    "%%36%31",
    "%7e",
    "a%2Fb",
    "x=y",
    "%E2%82%AC",
    "+",
    "%",
    "1;2",
)
FRAGMENTS = ("", "", "", "#top", "#!/tab", "#!%7e/x", "#")


def fuzzed_url(rng: random.Random) -> str:
    segments = [rng.choice(SEGMENTS) for _ in range(rng.randint(0, 4))]
    for _ in range(rng.choice((0, 0, 0, 1, 2))):
        value = rng.choice(VALUES).replace(";", "")
        pair = f"{rng.choice(MATRIX)}={value}" if rng.random() < 0.9 else rng.choice(MATRIX)
        if segments:
            segments[rng.randrange(len(segments))] += ";" + pair
        else:
            segments.append(";" + pair)
    pairs = []
    for _ in range(rng.choice((0, 1, 2, 3, 3, 4, 5, 6))):
        name = rng.choice(NAMES)
        pairs.append(name if rng.random() < 0.05 else f"{name}={rng.choice(VALUES)}")
    if pairs and rng.random() < 0.1:
        pairs.append(rng.choice(pairs))  # a repeated pair
    query = "&".join(pairs) + rng.choice(("", "", "", "&", "&&"))
    scheme = rng.choice(("http", "https", "https", "HTTPS"))
    mark = "?" if query or rng.random() < 0.1 else ""
    return f"{scheme}://{rng.choice(HOSTS)}/{'/'.join(segments)}{mark}{query}" + rng.choice(
        FRAGMENTS
    )


def learned_looking_maps(texts: list[str], rng: random.Random) -> list[DomainMap]:
    """Patterns of the URLs and of subsets of their names, kept and dropped at random."""
    stamp = "2026-12-02T00:00:00Z"
    patterns: dict[str, dict[str, PatternDecision]] = {}
    for text in texts:
        try:
            url = parse(text)
        except InvalidURL:
            continue
        names = sorted(url.names)
        if not names:
            continue
        for subset in (names, [n for n in names if rng.random() < 0.6]):
            if not subset:
                continue
            kept = {name for name in subset if rng.random() < 0.6}
            params = {}
            for name in subset:
                keep = name in kept
                layer = Layer.LEARNED if rng.random() < 0.85 else Layer.INSUFFICIENT
                defaults = [url.value_of(name)] if keep and rng.random() < 0.3 else []
                params[name] = ParamEvidence(
                    "keep" if keep else "drop", layer, 3, 3 * keep, 3 * (not keep), 0, defaults
                )
            key = pattern_key(path_shape(url.path), subset)
            patterns.setdefault(url.host, {})[key] = PatternDecision(
                frozenset(kept), frozenset(subset) - kept, params, Verification(), stamp, 5
            )
    return [DomainMap(host, 1, stamp, by_key) for host, by_key in patterns.items()]


STREAM_WORDS = ("alpha", "bravo", "delta", "echo", "kilo", "lima", "nova", "oscar", "tango", "zulu")
STREAM_TRACKING = ("utm_source", "utm_medium", "utm_campaign", "gclid", "fbclid", "ref", "sid")
STREAM_CONTENT = ("id", "page", "color", "size", "q", "sort")


def synthetic_urls(count: int, domains: int, seed: int = 7) -> Iterator[str]:
    """Product/search/article URLs over ``domains`` hosts, with tracking parameters."""
    rng = random.Random(seed)
    for _ in range(count):
        domain = rng.randrange(domains)
        host = f"www.{STREAM_WORDS[domain % 10]}{domain}.example"
        kind = rng.random()
        if kind < 0.5:
            path = f"/p/{rng.randrange(1, 10**6)}"
            params = [f"id={rng.randrange(10**6)}"]
        elif kind < 0.8:
            path = "/search"
            params = [f"q={rng.choice(STREAM_WORDS)}", f"page={rng.randrange(1, 20)}"]
        else:
            path = f"/news/{rng.choice(STREAM_WORDS)}-{rng.randrange(10**5)}"
            params = []
        if rng.random() < 0.6:
            params.append(f"utm_source={rng.choice(STREAM_WORDS)}")
            params.append(f"utm_medium={rng.choice(('email', 'cpc', 'social'))}")
        if rng.random() < 0.3:
            params.append(f"sid={rng.getrandbits(64):016x}")
        if rng.random() < 0.2:
            params.append(f"color={rng.choice(('red', 'blue', 'green'))}")
        rng.shuffle(params)
        query = "?" + "&".join(params) if params else ""
        yield f"https://{host}{path}{query}"


def learned_maps(urls: list[str]) -> list[DomainMap]:
    """A map that decides every pattern of ``urls``: tracking dropped, content kept."""
    patterns: dict[str, dict[str, frozenset[str]]] = {}
    for text in urls:
        url = parse(text)
        if url.pairs:
            patterns.setdefault(url.host, {})[url.pattern] = url.names
    now = utc_now()
    maps = []
    for domain, by_pattern in patterns.items():
        decisions = {}
        for key, names in by_pattern.items():
            kept = frozenset(name for name in names if name not in STREAM_TRACKING)
            params = {
                name: ParamEvidence(
                    "keep" if name in kept else "drop",
                    Layer.LEARNED,
                    6,
                    6 if name in kept else 0,
                    0 if name in kept else 6,
                    0,
                )
                for name in names
            }
            decisions[key] = PatternDecision(
                kept, names - kept, params, Verification(2, 0, 0, []), now, 1
            )
        maps.append(DomainMap(domain, 1, now, decisions))
    return maps
