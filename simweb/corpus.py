"""URL corpora with ground truth: which URLs of the simulated web show the same page."""

from __future__ import annotations

import base64
import bisect
import itertools
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote_plus

from simweb.resolve import match_route, page_key, split_target
from simweb.sites import MATRIX_MARK, Item, NoiseParam, PageKind, Role, Route, Site, route_traps
from simweb.vocab import CAMPAIGN_WORDS, CITIES, COLORS, REF_SOURCES, UTM_MEDIUMS, UTM_SOURCES


@dataclass(frozen=True)
class CorpusURL:
    url: str
    content_key: str
    traps: frozenset[str] = frozenset()
    """The traps of ``simweb.sites.TRAPS`` this URL touches."""


def content_key_for(site: Site, url: str) -> str:
    """Ground-truth identity of the page ``url`` shows, following the site's redirects."""
    host, path, query = split_target(url)
    if host != site.host:
        raise ValueError(f"{url!r} is not on {site.host}")
    return page_key(site, path, query)


def url_traps(site: Site, url: str) -> frozenset[str]:
    """The traps ``url`` touches: those of the route it is on."""
    host, path, _ = split_target(url)
    if host != site.host:
        raise ValueError(f"{url!r} is not on {site.host}")
    match = match_route(site, path)
    return frozenset() if match is None else route_traps(site, match[0])


def generate_corpus(sites: Sequence[Site], urls_per_site: int, seed: int = 0) -> list[CorpusURL]:
    """``urls_per_site`` URLs for every site (rare routes included), shuffled together."""
    out: list[CorpusURL] = []
    for site in sites:
        out.extend(_SiteCorpus(site, seed).generate(urls_per_site))
    random.Random(f"corpus-order:{seed}").shuffle(out)
    return out


_SAFE = re.compile(r"[A-Za-z0-9_.~=&-]*")
_ALNUM = "abcdefghijklmnopqrstuvwxyz0123456789"
_HEX_STYLES = {"hex": 40, "hex32": 128, "HEX32": 128}


@dataclass(frozen=True)
class _ParamPlan:
    name: str
    role: Role
    presence: float
    default: str
    default_share: float
    choices: tuple[str, ...]
    attr: str
    step: int
    item_share: float


@dataclass(frozen=True)
class _RoutePlan:
    route: Route
    prefix: str
    item: bool
    key_names: tuple[tuple[str, ...], ...]
    key_cum: tuple[float, ...]
    key_attrs: dict[str, str]
    params: tuple[_ParamPlan, ...]
    noise: tuple[NoiseParam, ...]
    traps: frozenset[str]


class _SiteCorpus:
    def __init__(self, site: Site, seed: int) -> None:
        self.site = site
        self.rng = random.Random(f"corpus:{seed}:{site.host}:{site.seed}")
        self.plans = {r.name: self._plan(r) for r in site.routes}
        self.common = [self.plans[r.name] for r in site.routes if not r.rare and r.weight > 0]
        self.route_cum = list(itertools.accumulate(p.route.weight for p in self.common))
        catalog = site.catalog
        self.items = catalog.items
        self.item_cum = catalog.cum_weights
        self.tag_cum = catalog.tag_weights
        self.base = f"http://{site.host}"

    def _plan(self, route: Route) -> _RoutePlan:
        site = self.site
        key_names: tuple[tuple[str, ...], ...] = (route.key,)
        key_cum: tuple[float, ...] = (1.0,)
        if len(route.key) > 1:
            key_names = (route.key, route.key[:1], route.key[1:])
            key_cum = tuple(itertools.accumulate(route.key_mix))
        params = []
        for p in route.params:
            if p.name in route.key:
                continue
            choices = p.values
            if p.role in (Role.DEFAULTED, Role.SORT):
                choices = p.values[1:]
            elif p.role is Role.FILTER:
                choices = {
                    "category": site.catalog.categories,
                    "brand": site.catalog.brands,
                    "color": COLORS,
                    "city": CITIES,
                }.get(p.attr, ())
            params.append(
                _ParamPlan(
                    p.name,
                    p.role,
                    p.presence,
                    p.default,
                    p.default_share,
                    choices,
                    p.attr,
                    p.step,
                    p.item_share,
                )
            )
        return _RoutePlan(
            route=route,
            prefix=f"{site.host}|{route.name}",
            item=route.kind in (PageKind.ITEM, PageKind.COMPARE),
            key_names=key_names,
            key_cum=key_cum,
            key_attrs={p.name: p.attr for p in route.params if p.name in route.key},
            params=tuple(params),
            noise=tuple(
                n
                for n in site.noise
                if n.name not in route.by_name and not (n.matrix and route.path == "/")
            ),
            traps=route_traps(site, route),
        )

    def generate(self, count: int) -> list[CorpusURL]:
        out: list[CorpusURL] = []
        for route in self.site.routes:
            for _ in range(min(route.rare, count - len(out))):
                out.append(self._url(self.plans[route.name], noise=False))
        common = self.common
        cum = self.route_cum
        total = cum[-1]
        rand = self.rng.random
        while len(out) < count:
            out.append(self._url(common[bisect.bisect(cum, rand() * total)], noise=True))
        return out

    def _item(self) -> Item:
        cum = self.item_cum
        return self.items[min(bisect.bisect(cum, self.rng.random() * cum[-1]), len(cum) - 1)]

    def _pick(self, seq: Sequence[str]) -> str:
        return seq[int(self.rng.random() * len(seq))]

    def _url(self, plan: _RoutePlan, noise: bool) -> CorpusURL:
        rng = self.rng
        rand = rng.random
        route = plan.route
        pairs: list[tuple[str, str]] = []
        key = [plan.prefix]
        segment = ""
        item: Item | None = None
        if plan.item:
            item = self._item()
            key.append(f"#{item.idx}")
            if route.path_key:
                segment = item.key(route.path_key)
            else:
                names = plan.key_names[bisect.bisect(plan.key_cum, rand())]
                for name in names:
                    pairs.append((name, item.key(plan.key_attrs[name])))
        elif route.path_key == "category":
            segment = self._pick(self.site.catalog.categories)
        elif route.path_key == "tag":
            segment = self._tag()
        if segment and not plan.item:
            key.append(f"@{segment}")
        for p in plan.params:
            if rand() >= p.presence:
                continue
            role = p.role
            if role is Role.VARIANT or role is Role.FILTER:
                value = self._tag() if p.attr == "text" else self._pick(p.choices)
                if p.item_share >= 1.0 or (
                    item is not None and route.by_name[p.name].applies_to(item.idx)
                ):
                    key.append(f"{p.name}={value}")
            elif role is Role.DEFAULTED or role is Role.SORT:
                if rand() < p.default_share:
                    value = p.default
                else:
                    value = self._pick(p.choices)
                    key.append(f"{p.name}={value}")
            elif role is Role.PAGINATION:
                if rand() < p.default_share:
                    value = p.default
                else:
                    if p.attr == "pages":
                        if item is None or item.pages < 2:
                            continue
                        number = rng.randint(2, item.pages)
                    else:
                        number = 2 + min(int(rng.expovariate(0.6)), 12)
                    value = str(int(p.default) + (number - 1) * p.step)
                    key.append(f"{p.name}={value}")
            elif role is Role.LAYOUT:
                value = p.choices[0]
            elif role is Role.IDENTITY:
                other = self._item()
                value = other.key(p.attr)
                key.insert(2, f"+{other.idx}")
            else:
                continue
            pairs.append((p.name, value))
        if noise:
            present: set[str] = set()
            extra = []
            for n in plan.noise:
                if n.requires and n.requires not in present:
                    continue
                if rand() < n.probability:
                    extra.append((n.name, self._noise_value(n)))
                    present.add(n.name)
            if extra:
                pairs.extend(extra)
                if rand() < self.site.shuffle_share:
                    rng.shuffle(pairs)
        elif len(pairs) > 1 and rand() < self.site.shuffle_share:
            rng.shuffle(pairs)
        url = self.base + route.path + segment
        if any(name.startswith(MATRIX_MARK) for name, _ in pairs):
            url += "".join(f"{n}={v}" for n, v in pairs if n.startswith(MATRIX_MARK))
            pairs = [(n, v) for n, v in pairs if not n.startswith(MATRIX_MARK)]
        if pairs:
            query = "&".join([f"{n}={v}" for n, v in pairs])
            if not _SAFE.fullmatch(query):
                query = "&".join([f"{quote_plus(n)}={quote_plus(v)}" for n, v in pairs])
            url += "?" + query
        return CorpusURL(url, "|".join(key), plan.traps)

    def _tag(self) -> str:
        cum = self.tag_cum
        idx = bisect.bisect(cum, self.rng.random() * cum[-1])
        return self.site.catalog.tags[min(idx, len(cum) - 1)]

    def _noise_value(self, n: NoiseParam) -> str:
        rng = self.rng
        style = n.style
        bits = _HEX_STYLES.get(style)
        if bits:
            text = f"{rng.getrandbits(bits):0{bits // 4}x}"
            return text.upper() if style.isupper() else text
        if style == "choice":
            return self._pick(n.values)
        if style == "source":
            return self._pick(UTM_SOURCES)
        if style == "medium":
            return self._pick(UTM_MEDIUMS)
        if style == "campaign":
            return f"{self._pick(CAMPAIGN_WORDS)}_{int(rng.random() * 40) + 1}"
        if style == "word":
            return self._pick(self.site.vocab.nouns)
        if style == "ref":
            return self._pick(REF_SOURCES)
        if style == "token":
            raw = rng.randbytes(18 + int(rng.random() * 12))
            return base64.urlsafe_b64encode(raw).decode().rstrip("=")
        if style == "alnum":
            return "".join(rng.choices(_ALNUM, k=26))
        if style == "ms":
            return str(1_730_000_000_000 + int(rng.random() * 10**10))
        if style == "unix":
            return str(1_730_000_000 + int(rng.random() * 10**7))
        return str(1_000_000 + int(rng.random() * 10**10))
