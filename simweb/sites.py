"""Synthetic websites: their routes, parameters, catalogues, templates and misbehaviours.

Every site is built from one of six archetypes, so any family of at least six sites holds
every trap (``TRAPS``; ``route_traps`` says which traps a route holds). The tuning and
holdout families use the same archetypes but draw hosts, paths, parameter names,
probabilities, markup and templates from their own seeds and name pools. The validation
family mixes the two pools, choice by choice, on seeds of its own: a third set of sites to
check a learner change against without looking at the holdout.
"""

from __future__ import annotations

import enum
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property

from simweb.vocab import CITIES, COLORS, SIZES, THEMES, Theme

FAMILIES = ("tuning", "holdout", "validation")
ARCHETYPES = 6
TRAPS = (
    "image-variant",
    "data-item",
    "interstitial",
    "shell",
    "matrix-session",
    "matrix-content",
    "rotating-noise",
    "print-view",
    "print-other-item",
    "ab-layout",
    "minority-variant",
    "alias-pair",
    "choice-noise",
    "terse-error",
)
MATRIX_MARK = ";"
"""A parameter name that starts with this sits in the path (``/seg;name=value``)."""
FEW_PROMO_VARIANTS = 3
"""Sites whose promo block rotates among at most this many variants hold "rotating-noise"."""
INVOICE = "invoice"
"""The ``attr`` of a parameter that prints another item (an order's invoice) in the print
template: content, though its name and value are those of a print view elsewhere."""


class Role(enum.Enum):
    IDENTITY = "identity"
    VARIANT = "variant"
    DEFAULTED = "defaulted"
    ALIAS = "alias"
    FILTER = "filter"
    PAGINATION = "pagination"
    SORT = "sort"
    TRACKING = "tracking"
    SESSION = "session"
    CACHE_BUSTER = "cache_buster"
    LAYOUT = "layout"
    """Shows the same item in another template (``print=1``, ``view=amp``): one value."""

    @property
    def neutral(self) -> bool:
        """True when the parameter never changes what the page shows."""
        return self in _NEUTRAL_ROLES


_NEUTRAL_ROLES = frozenset({Role.TRACKING, Role.SESSION, Role.CACHE_BUSTER, Role.LAYOUT})


class PageKind(enum.Enum):
    HOME = "home"
    ITEM = "item"
    LISTING = "listing"
    COMPARE = "compare"
    NOT_FOUND = "notfound"
    ERROR = "error"
    """What a site answers a URL without the key of its route, when it does not send the
    visitor home (``MissingKey.TERSE``)."""


class CanonicalMode(enum.Enum):
    CORRECT = "correct"
    HOME = "home"
    TRACKING = "tracking"


class Display(enum.Enum):
    """How a variant parameter shows on the page."""

    TEXT = "text"
    IMAGE = "image"
    """Only the item's images and the selected state of the variant picker change."""


class Rendering(enum.Enum):
    """How a route's pages are built."""

    SERVER = "server"
    DATA = "data"
    """The same visible shell on every page; the item lives in JSON-LD and a data blob."""
    SHELL = "shell"
    """An empty client-side shell; scripts fetch the item."""


class Interstitial(enum.Enum):
    """Bot-protection and consent pages a site may answer instead of the real page."""

    BROWSER_CHECK = "browser-check"
    BLOCKED = "blocked"
    JUST_A_MOMENT = "just-a-moment"
    CONSENT = "consent"

    @property
    def status(self) -> int:
        return {"blocked": 403, "just-a-moment": 503}.get(self.value, 200)


class UnknownKey(enum.Enum):
    NOT_FOUND = "404"
    SOFT = "soft404"


class MissingKey(enum.Enum):
    """What a site answers a URL of a keyed route that lacks the key."""

    HOME = "home"
    """A redirect to the home page."""
    TERSE = "terse"
    """A 404 of a script and one line of text: a page that is evidence of nothing."""


@dataclass(frozen=True)
class Param:
    """A content parameter of a route.

    ``attr`` is the key format for IDENTITY/ALIAS (int, sku, code, slug), the item attribute
    a FILTER matches (text, category, brand, color, city), ``pages`` or ``list`` for
    PAGINATION, and the kind of setting for DEFAULTED (lang, currency, market).
    """

    name: str
    role: Role
    values: tuple[str, ...] = ()
    default: str = ""
    presence: float = 1.0
    default_share: float = 0.0
    attr: str = ""
    label: str = ""
    step: int = 1
    display: Display = Display.TEXT
    item_share: float = 1.0
    """The share of the catalogue's items a VARIANT changes (apparel sizes on a general
    store); on the others the parameter is carried and changes nothing."""

    @property
    def matrix(self) -> bool:
        return self.name.startswith(MATRIX_MARK)

    def applies_to(self, item: int) -> bool:
        """Whether this parameter changes the page of catalogue item ``item``."""
        if self.item_share >= 1.0:
            return True
        return random.Random(f"applies:{self.name}:{item}").random() < self.item_share


@dataclass(frozen=True)
class Route:
    name: str
    path: str
    kind: PageKind
    params: tuple[Param, ...] = ()
    key: tuple[str, ...] = ()
    key_mix: tuple[float, ...] = ()
    path_key: str = ""
    weight: float = 1.0
    rare: int = 0
    hang: bool = False
    rendering: Rendering = Rendering.SERVER

    @property
    def hint(self) -> str:
        return self.path + "*" if self.path_key else self.path

    @cached_property
    def by_name(self) -> dict[str, Param]:
        return {p.name: p for p in self.params}

    def param(self, name: str) -> Param | None:
        return self.by_name.get(name)

    @property
    def second(self) -> Param | None:
        for p in self.params:
            if p.role is Role.IDENTITY and p.name not in self.key:
                return p
        return None


@dataclass(frozen=True)
class NoiseParam:
    name: str
    role: Role
    probability: float
    style: str
    requires: str = ""
    values: tuple[str, ...] = ()
    """For the ``choice`` style: the few values it takes, repeating across many items."""

    @property
    def matrix(self) -> bool:
        return self.name.startswith(MATRIX_MARK)


@dataclass(frozen=True)
class Template:
    layout: int
    main_tag: str
    main_class: str
    title_class: str
    price_class: str
    desc_class: str
    variant_class: str
    list_class: str
    item_class: str
    recs_class: str
    ads_class: str
    footer_class: str
    time_class: str
    reqid_class: str
    csrf_name: str
    ads_in_main: bool
    time_format: int
    per_page: int
    promo_class: str
    promo_variants: int

    @property
    def main_selector(self) -> str:
        return f"{self.main_tag}.{self.main_class}"

    @property
    def noise_selectors(self) -> tuple[str, ...]:
        """CSS selectors of the per-fetch noise (for tests; a learner must find it itself)."""
        return (
            f".{self.recs_class}",
            f".{self.ads_class}",
            f".{self.time_class}",
            f".{self.reqid_class}",
            f".{self.promo_class}",
            "script",
            "input",
        )


@dataclass(frozen=True)
class Markup:
    """How a site writes images, variant pickers and structured data."""

    image_root: str
    resize_name: str
    image_buster: str
    picker: str
    picture: bool
    data_blob: str
    microdata: bool


@dataclass(frozen=True)
class Item:
    idx: int
    name: str
    slug: str
    num: str
    sku: str
    code: str
    category: str
    brand: str
    colors: tuple[str, ...]
    tags: tuple[str, ...]
    price: int
    city: str
    day: str
    pages: int

    def key(self, fmt: str) -> str:
        if fmt == "int":
            return self.num
        if fmt == "sku":
            return self.sku
        if fmt == "code":
            return self.code
        if fmt == "slug":
            return self.slug
        if fmt == "category":
            return self.category
        raise ValueError(f"unknown key format {fmt!r}")


@dataclass(frozen=True)
class Catalog:
    items: tuple[Item, ...]
    lookup: dict[str, dict[str, int]]
    cum_weights: tuple[float, ...]
    categories: tuple[str, ...]
    brands: tuple[str, ...]
    tags: tuple[str, ...]
    tag_weights: tuple[float, ...]

    def find(self, fmt: str, value: str) -> int:
        return self.lookup.get(fmt, {}).get(value, -1)


@dataclass(frozen=True)
class Site:
    host: str
    family: str
    theme: str
    archetype: int
    seed: int
    routes: tuple[Route, ...]
    noise: tuple[NoiseParam, ...]
    template: Template
    markup: Markup
    vocab: Theme = field(compare=False, repr=False)
    catalog: Catalog = field(compare=False, repr=False)
    interstitial_rate: float = 0.0
    interstitials: tuple[Interstitial, ...] = ()
    tracking_redirect: int = 0
    unknown_key: UnknownKey = UnknownKey.NOT_FOUND
    canonical: CanonicalMode = CanonicalMode.CORRECT
    shuffle_share: float = 0.3
    ab_share: float = 0.0
    """The share of responses served in a second layout (A/B test): other wrappers and
    classes around the same content."""
    missing_key: MissingKey = MissingKey.HOME

    def route(self, name: str) -> Route:
        for r in self.routes:
            if r.name == name:
                return r
        raise KeyError(name)

    @cached_property
    def noise_roles(self) -> dict[str, Role]:
        return {n.name: n.role for n in self.noise}

    def noise_role(self, route: Route, name: str) -> Role | None:
        """Role of ``name`` as noise on ``route``; a route's own parameters take precedence."""
        if name in route.by_name:
            return None
        return self.noise_roles.get(name)


def route_traps(site: Site, route: Route) -> frozenset[str]:
    """Ground truth: the traps of ``TRAPS`` that URLs of ``route`` on ``site`` touch."""
    traps = set()
    if site.interstitial_rate > 0:
        traps.add("interstitial")
    if any(p.display is Display.IMAGE for p in route.params):
        traps.add("image-variant")
    if route.rendering is Rendering.DATA:
        traps.add("data-item")
    if route.rendering is Rendering.SHELL:
        traps.add("shell")
    if route.path != "/" and any(n.matrix for n in site.noise):
        traps.add("matrix-session")
    if any(p.matrix for p in route.params):
        traps.add("matrix-content")
    if site.template.promo_variants <= FEW_PROMO_VARIANTS:
        traps.add("rotating-noise")
    if any(p.role is Role.LAYOUT for p in route.params):
        traps.add("print-view")
    if any(p.attr == INVOICE for p in route.params):
        traps.add("print-other-item")
    if site.ab_share > 0:
        traps.add("ab-layout")
    if any(p.item_share < 1.0 for p in route.params):
        traps.add("minority-variant")
        if sum(p.role is Role.ALIAS for p in route.params) >= 2:
            traps.add("alias-pair")
    if any(n.style == "choice" and n.name not in route.by_name for n in site.noise):
        traps.add("choice-noise")
    if site.missing_key is MissingKey.TERSE and route.key:
        traps.add("terse-error")
    return frozenset(traps)


def param_roles(site: Site) -> dict[tuple[str, str], Role]:
    """Ground truth: (route path hint, parameter name) -> role."""
    roles: dict[tuple[str, str], Role] = {}
    for route in site.routes:
        for p in route.params:
            roles[(route.hint, p.name)] = p.role
        for n in site.noise:
            if route.param(n.name) is None:
                roles[(route.hint, n.name)] = n.role
    return roles


def build_sites(family: str, count: int, seed: int = 0) -> list[Site]:
    """Build ``count`` sites of ``family`` (one of ``FAMILIES``); six or more hold every trap."""
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, not {family!r}")
    if count < 0:
        raise ValueError("count must be >= 0")
    rng = random.Random(f"simweb:{family}:{seed}")
    order = list(range(ARCHETYPES))
    if family != "tuning":
        rng.shuffle(order)
    sites = []
    for i in range(count):
        arch = order[i % ARCHETYPES]
        site_seed = rng.getrandbits(48)
        sites.append(_Builder(family, i, arch, site_seed).build())
    return sites


def _key(name: str, fmt: str, alias: bool = False) -> Param:
    return Param(name, Role.ALIAS if alias else Role.IDENTITY, attr=fmt)


def _variant(name: str, values: tuple[str, ...], presence: float, label: str) -> Param:
    return Param(name, Role.VARIANT, values=values, presence=presence, label=label)


def _defaulted(
    name: str, default: str, others: tuple[str, ...], presence: float, share: float, attr: str
) -> Param:
    return Param(
        name,
        Role.DEFAULTED,
        values=(default, *others),
        default=default,
        presence=presence,
        default_share=share,
        attr=attr,
        label={"lang": "Language", "currency": "Currency", "market": "Market"}[attr],
    )


def _filter(name: str, attr: str, presence: float) -> Param:
    return Param(name, Role.FILTER, presence=presence, attr=attr, label=name)


def _page(name: str, presence: float, attr: str, default: int = 1, step: int = 1) -> Param:
    return Param(
        name,
        Role.PAGINATION,
        default=str(default),
        presence=presence,
        default_share=0.15,
        attr=attr,
        step=step,
    )


def _sort(name: str, default: str, others: tuple[str, ...], presence: float) -> Param:
    return Param(
        name,
        Role.SORT,
        values=(default, *others),
        default=default,
        presence=presence,
        default_share=0.8,
        label="Sorted by",
    )


class _Builder:
    def __init__(self, family: str, index: int, arch: int, seed: int) -> None:
        self.family = family
        self.index = index
        self.arch = arch
        self.seed = seed
        self.rng = random.Random(seed)

    def tuned(self, choice: object) -> bool:
        """Whether this site takes the tuning family's option for ``choice``.

        Validation sites take either family's option, drawn per site and per choice (the
        same choice always draws the same side, so a key name and its route agree): mixes
        neither family has, on seeds of their own.
        """
        if self.family != "validation":
            return self.family == "tuning"
        return random.Random(f"{self.seed}:{choice}").random() < 0.5

    def pick(self, tuning: str, holdout: str, choice: object = None) -> str:
        """``choice`` ties this pick to another one, such as a default to its other values."""
        return tuning if self.tuned(choice or (tuning, holdout)) else holdout

    def choice(self, tuning: tuple[str, ...], holdout: tuple[str, ...]) -> str:
        return self.rng.choice(tuning if self.tuned((tuning, holdout)) else holdout)

    def p(self, low: float, high: float) -> float:
        return round(self.rng.uniform(low, high), 3)

    def q(self, low: float, high: float, choice: str) -> float:
        """:meth:`p` drawn apart from the site's other draws, which it leaves as they were."""
        return round(random.Random(f"{self.seed}:{choice}").uniform(low, high), 3)

    def build(self) -> Site:
        builders: dict[int, Callable[[], _Spec]] = {
            0: self._shop,
            1: self._store,
            2: self._news,
            3: self._events,
            4: self._docs,
            5: self._forum,
        }
        spec = builders[self.arch]()
        suffix, letter = {"tuning": (".sim", "t"), "holdout": (".test", "h")}.get(
            self.family, (".example", "v")
        )
        host = f"{letter}{self.index + 1:02d}-{spec.theme_name}{suffix}"
        vocab = THEMES[spec.vocab]
        home = Route("home", "/", PageKind.HOME, weight=0.03)
        routes = (home, *spec.routes)
        return Site(
            host=host,
            family=self.family,
            theme=spec.theme_name,
            archetype=self.arch,
            seed=self.seed,
            routes=routes,
            noise=spec.noise,
            template=self._template(spec.few_promos),
            markup=self._markup(),
            interstitial_rate=spec.interstitial_rate,
            interstitials=spec.interstitials,
            tracking_redirect=spec.tracking_redirect,
            unknown_key=spec.unknown_key,
            canonical=spec.canonical,
            shuffle_share=self.p(0.15, 0.5),
            ab_share=spec.ab_share,
            missing_key=spec.missing_key,
            vocab=vocab,
            catalog=self._catalog(vocab, spec.items),
        )

    def _utm(self, low: float, high: float) -> list[NoiseParam]:
        p = self.p(low, high)
        return [
            NoiseParam("utm_source", Role.TRACKING, p, "source"),
            NoiseParam("utm_medium", Role.TRACKING, 0.85, "medium", requires="utm_source"),
            NoiseParam("utm_campaign", Role.TRACKING, 0.7, "campaign", requires="utm_source"),
            NoiseParam("utm_content", Role.TRACKING, 0.12, "word", requires="utm_source"),
            NoiseParam("utm_term", Role.TRACKING, 0.08, "word", requires="utm_source"),
        ]

    def _clickids(self, k: int) -> list[NoiseParam]:
        pool = (
            ("gclid", "fbclid", "msclkid", "yclid", "igshid", "_ga")
            if self.tuned("clickid-pool")
            else ("gclid", "fbclid", "dclid", "srsltid", "mkt_tok", "s_kwcid", "_hsmi")
        )
        names = self.rng.sample(pool, k)
        return [NoiseParam(n, Role.TRACKING, self.p(0.02, 0.09), "token") for n in names]

    def _extra_tracking(self) -> list[NoiseParam]:
        pool = (
            ("mc_eid", "trk", "icid")
            if self.tuned("extra-tracking-pool")
            else ("cmpid", "spm", "oly_enc_id", "_hsenc")
        )
        return [NoiseParam(self.rng.choice(pool), Role.TRACKING, self.p(0.02, 0.06), "hex")]

    def _shop(self) -> _Spec:
        key_a, key_b = ("id", "pid") if self.tuned("shop-keys") else ("itemid", "item_no")
        fmt = "int"
        color = self.pick("color", "colour")
        lang = _defaulted(
            self.pick("lang", "hl"),
            "en",
            ("de", "fr", "es") if self.tuned("shop-lang-values") else ("nl", "sv", "it"),
            self.p(0.8, 0.95),
            self.p(0.85, 0.93),
            "lang",
        )
        product = Route(
            "product",
            self.choice(("/product", "/product.php"), ("/goods", "/offer")),
            PageKind.ITEM,
            params=(
                _key(key_a, fmt, alias=True),
                _key(key_b, fmt, alias=True),
                _variant(color, COLORS[:6], self.p(0.25, 0.4), "Color"),
                replace(
                    _variant(self.pick("size", "sz"), SIZES, self.p(0.15, 0.3), "Size"),
                    presence=self.q(0.85, 0.95, "apparel-presence"),
                    item_share=self.q(0.08, 0.13, "apparel-share"),
                ),
                lang,
            ),
            key=(key_a, key_b),
            key_mix=(0.6, 0.3, 0.1),
            weight=0.62,
        )
        compare = Route(
            "compare",
            self.pick("/compare", "/vs"),
            PageKind.COMPARE,
            params=(_key(key_a, fmt), Param("ref", Role.IDENTITY, presence=0.85, attr=fmt)),
            key=(key_a,),
            weight=0.07,
        )
        search = Route(
            "search",
            self.pick("/search", "/find"),
            PageKind.LISTING,
            params=(
                _filter(self.pick("q", "query"), "text", 1.0),
                _filter(color, "color", self.p(0.2, 0.3)),
                _filter(self.pick("brand", "maker"), "brand", self.p(0.1, 0.2)),
                _page(self.pick("page", "p"), self.p(0.3, 0.4), "list"),
                _sort(
                    self.pick("sort", "order"),
                    self.pick("relevance", "featured"),
                    ("price_asc", "price_desc", "newest")
                    if self.tuned("shop-sort-values")
                    else ("cheap", "dear", "new"),
                    self.p(0.5, 0.7),
                ),
            ),
            weight=0.26,
        )
        gift = Route(
            "gift",
            self.pick("/gift", "/voucher"),
            PageKind.ITEM,
            params=(
                _key(key_a, fmt),
                _variant(self.pick("amount", "value"), ("25", "50", "100"), 1.0, "Amount"),
            ),
            key=(key_a,),
            rare=2,
        )
        app_product = Route(
            "app-product",
            self.pick("/products/", "/dp/"),
            PageKind.ITEM,
            params=(_variant(self.pick("size", "option"), SIZES, self.p(0.2, 0.35), "Size"),),
            path_key="sku",
            weight=0.18,
            rendering=Rendering.DATA,
        )
        noise = [
            *self._utm(0.2, 0.3),
            *self._clickids(2),
            NoiseParam("ref", Role.TRACKING, self.p(0.08, 0.14), "ref"),
            NoiseParam(self.pick("sid", "sessid"), Role.SESSION, self.p(0.04, 0.08), "hex32"),
            NoiseParam("v", Role.CACHE_BUSTER, self.p(0.03, 0.05), "int"),
        ]
        return _Spec(
            theme_name=self.pick("shop", "market"),
            vocab="goods",
            routes=(product, compare, search, gift, app_product),
            noise=tuple(noise),
            tracking_redirect=301,
            unknown_key=UnknownKey.NOT_FOUND,
            canonical=CanonicalMode.CORRECT,
            items=self.rng.randint(800, 2500),
            missing_key=MissingKey.TERSE,
        )

    def _store(self) -> _Spec:
        product = Route(
            "item",
            self.pick("/item", "/p"),
            PageKind.ITEM,
            params=(
                _key("ref", "code"),
                _variant(self.pick("size", "sz"), SIZES, self.p(0.2, 0.35), "Size"),
                _variant(
                    self.pick("variant", "style"),
                    tuple(str(39400 + i) for i in range(8)),
                    self.p(0.15, 0.3),
                    "Variant",
                ),
                Param(
                    self.pick("color", "swatch"),
                    Role.VARIANT,
                    values=COLORS,
                    presence=self.p(0.3, 0.45),
                    label="Colour",
                    display=Display.IMAGE,
                ),
                _defaulted(
                    self.pick("currency", "cur"),
                    self.pick("USD", "EUR", "store-currency-values"),
                    ("EUR", "GBP") if self.tuned("store-currency-values") else ("CHF", "SEK"),
                    self.p(0.6, 0.8),
                    self.p(0.85, 0.92),
                    "currency",
                ),
            ),
            key=("ref",),
            weight=0.64,
        )
        category = Route(
            "category",
            self.pick("/c/", "/cat/"),
            PageKind.LISTING,
            params=(
                _filter(self.pick("brand", "maker"), "brand", self.p(0.15, 0.25)),
                _page(self.pick("page", "pg"), self.p(0.3, 0.45), "list"),
                _sort(
                    self.pick("sort", "order_by"),
                    self.pick("popular", "bestseller"),
                    ("price", "new") if self.tuned("store-sort-values") else ("price", "rating"),
                    self.p(0.4, 0.6),
                ),
            ),
            path_key="category",
            weight=0.33,
        )
        qa = Route(
            "qa",
            self.pick("/item-qa", "/p-questions"),
            PageKind.ITEM,
            params=(_key("ref", "code"), _page(self.pick("qpage", "qp"), 1.0, "pages")),
            key=("ref",),
            rare=3,
        )
        noise = [
            *self._utm(0.25, 0.35),
            *self._clickids(2),
            NoiseParam("mc", Role.TRACKING, self.p(0.06, 0.1), "hex"),
            NoiseParam(self.pick("mc_cid", "_hsenc"), Role.TRACKING, self.p(0.03, 0.06), "hex"),
            NoiseParam(self.pick("jsessionid", "JSESSIONID"), Role.SESSION, 0.05, "hex32"),
            NoiseParam("cb", Role.CACHE_BUSTER, self.p(0.03, 0.05), "int"),
        ]
        return _Spec(
            theme_name=self.pick("store", "outlet"),
            vocab="fashion",
            routes=(product, category, qa),
            noise=tuple(noise),
            tracking_redirect=0,
            unknown_key=UnknownKey.SOFT,
            canonical=CanonicalMode.HOME,
            items=self.rng.randint(600, 2000),
        )

    def _news(self) -> _Spec:
        key_a, key_b = ("id", "slug") if self.tuned("news-keys") else ("aid", "title")
        page = self.pick("page", "pg")
        article = Route(
            "article",
            self.pick("/article", "/story"),
            PageKind.ITEM,
            params=(
                _key(key_a, "int", alias=True),
                _key(key_b, "slug", alias=True),
                _page(page, self.p(0.1, 0.2), "pages"),
                Param(
                    self.pick("print", "view", "news-print-view"),
                    Role.LAYOUT,
                    values=(self.pick("1", "amp", "news-print-view"),),
                    presence=0.08,
                ),
            ),
            key=(key_a, key_b),
            key_mix=(0.7, 0.18, 0.12),
            weight=0.7,
        )
        section = Route(
            "section",
            self.pick("/section", "/rubrik"),
            PageKind.LISTING,
            params=(
                _filter(self.pick("name", "topic"), "category", 1.0),
                _page(page, self.p(0.3, 0.4), "list"),
            ),
            weight=0.15,
        )
        tag = Route(
            "tag",
            self.pick("/tag/", "/thema/"),
            PageKind.LISTING,
            params=(_page(page, self.p(0.2, 0.35), "list"),),
            path_key="tag",
            weight=0.12,
        )
        printable = Route(
            "print",
            self.pick("/print", "/amp"),
            PageKind.ITEM,
            params=(
                _key(key_a, "int"),
                _variant(self.pick("format", "layout"), ("a4", "letter"), 1.0, "Format"),
            ),
            key=(key_a,),
            rare=1,
        )
        noise = [
            *self._utm(0.3, 0.4),
            *self._clickids(1),
            *self._extra_tracking(),
            NoiseParam("eid", Role.TRACKING, self.p(0.05, 0.09), "hex"),
            NoiseParam("_", Role.CACHE_BUSTER, self.p(0.02, 0.04), "ms"),
            NoiseParam("v", Role.CACHE_BUSTER, self.p(0.03, 0.05), "hex"),
        ]
        return _Spec(
            theme_name=self.pick("news", "magazine"),
            vocab="news",
            routes=(article, section, tag, printable, self._invoice()),
            noise=tuple(noise),
            tracking_redirect=302,
            unknown_key=UnknownKey.NOT_FOUND,
            canonical=CanonicalMode.CORRECT,
            items=self.rng.randint(1500, 3000),
            missing_key=MissingKey.TERSE,
            interstitial_rate=self.p(0.1, 0.14),
            interstitials=(Interstitial.BROWSER_CHECK,)
            if self.tuned("interstitial-kinds")
            else (
                Interstitial.BROWSER_CHECK,
                Interstitial.BLOCKED,
                Interstitial.JUST_A_MOMENT,
                Interstitial.CONSENT,
            ),
        )

    def _invoice(self) -> Route:
        """A subscriber's order, whose ``print=1`` prints its invoice: another item."""
        key = self.pick("order", "inv")
        return Route(
            "order",
            self.pick("/account/order", "/billing"),
            PageKind.ITEM,
            params=(
                _key(key, "int"),
                Param("print", Role.VARIANT, values=("1",), presence=0.45, attr=INVOICE),
            ),
            key=(key,),
            weight=0.05,
        )

    def _events(self) -> _Spec:
        event = Route(
            "event",
            self.pick("/event", "/show"),
            PageKind.ITEM,
            params=(
                _key("eid", "int"),
                _defaulted(
                    "mc",
                    self.pick("us", "eu", "events-market-values"),
                    ("uk", "de", "fr")
                    if self.tuned("events-market-values")
                    else ("uk", "us", "ch"),
                    self.p(0.75, 0.9),
                    self.p(0.85, 0.92),
                    "market",
                ),
                _variant(
                    self.pick("tier", "seat"),
                    ("standard", "vip", "balcony")
                    if self.tuned("events-tier-values")
                    else ("stalls", "circle", "box"),
                    self.p(0.2, 0.3),
                    "Tier",
                ),
            ),
            key=("eid",),
            weight=0.65,
        )
        listing = Route(
            "events",
            self.pick("/events", "/agenda"),
            PageKind.LISTING,
            params=(
                _filter(self.pick("city", "town"), "city", self.p(0.7, 0.9)),
                _filter(self.pick("genre", "kind"), "category", self.p(0.2, 0.35)),
                _page(self.pick("page", "p"), self.p(0.25, 0.4), "list"),
                _sort(
                    "sort",
                    "date",
                    ("price", "popularity")
                    if self.tuned("events-sort-values")
                    else ("cheapest", "hot"),
                    self.p(0.4, 0.6),
                ),
            ),
            weight=0.32,
        )
        venue = Route(
            "venue",
            self.pick("/venue-map", "/seatplan"),
            PageKind.ITEM,
            params=(
                _key("eid", "int"),
                _variant(self.pick("level", "floor"), ("1", "2", "3"), 1.0, "Level"),
            ),
            key=("eid",),
            rare=2,
        )
        app_event = Route(
            "app-event",
            self.pick("/m/event", "/app/show"),
            PageKind.ITEM,
            params=(_key("eid", "int"),),
            key=("eid",),
            weight=0.06,
            rendering=Rendering.SHELL,
        )
        noise = [
            *self._utm(0.2, 0.3),
            *self._clickids(2),
            NoiseParam("ref", Role.TRACKING, self.p(0.08, 0.14), "ref"),
            NoiseParam(self.pick("sessionid", "sid"), Role.SESSION, self.p(0.05, 0.08), "alnum"),
            NoiseParam(self.pick("ts", "t"), Role.CACHE_BUSTER, self.p(0.03, 0.05), "unix"),
            NoiseParam(
                self.pick("tab", "panel"),
                Role.TRACKING,
                self.q(0.4, 0.6, "tab-presence"),
                "choice",
                values=("info", "seats", "map", "reviews")
                if self.tuned("tab-values")
                else ("overview", "tickets", "faq"),
            ),
        ]
        return _Spec(
            theme_name=self.pick("events", "tickets"),
            vocab="events",
            routes=(event, listing, venue, app_event),
            noise=tuple(noise),
            tracking_redirect=0,
            unknown_key=UnknownKey.NOT_FOUND,
            canonical=CanonicalMode.TRACKING,
            items=self.rng.randint(400, 1500),
            ab_share=0.3,
        )

    def _docs(self) -> _Spec:
        versions = (
            ("1.0", "2.0", "2.1", "3.0", "3.2")
            if self.tuned("docs-versions")
            else tuple(str(n) for n in range(101, 113))
        )
        page = Route(
            "doc",
            self.pick("/docs/", "/wiki/"),
            PageKind.ITEM,
            params=(
                _variant("v", versions, self.p(0.25, 0.35), "Version"),
                _defaulted(
                    self.pick("lang", "uselang"),
                    "en",
                    ("ja", "de") if self.tuned("docs-lang-values") else ("nl", "it"),
                    self.p(0.4, 0.6),
                    self.p(0.85, 0.92),
                    "lang",
                ),
                _variant(
                    MATRIX_MARK + self.pick("os", "platform"),
                    ("linux", "macos", "windows")
                    if self.tuned("docs-platforms")
                    else ("android", "ios", "web", "desktop"),
                    self.p(0.15, 0.3),
                    "Platform",
                ),
            ),
            path_key="slug",
            weight=0.72,
        )
        search = Route(
            "search",
            self.pick("/search", "/w/search"),
            PageKind.LISTING,
            params=(
                _filter(self.pick("q", "term"), "text", 1.0),
                _page("page", 0.3, "list")
                if self.tuned("docs-pager")
                else _page("offset", 0.3, "list", default=0, step=20),
            ),
            weight=0.25,
        )
        snippet = Route(
            "snippet",
            self.pick("/snippet", "/oldid"),
            PageKind.ITEM,
            params=(
                _key(self.pick("id", "oldid"), "int"),
                _variant(self.pick("lines", "section"), ("1-20", "21-40"), 1.0, "Lines"),
            ),
            key=(self.pick("id", "oldid"),),
            rare=self.rng.randint(2, 3),
        )
        noise = [
            *self._utm(0.15, 0.25),
            *self._clickids(1),
            NoiseParam("ref", Role.TRACKING, self.p(0.04, 0.07), "ref"),
            NoiseParam(self.pick("sid", "PHPSESSID"), Role.SESSION, self.p(0.04, 0.07), "hex32"),
            NoiseParam(self.pick("ts", "_"), Role.CACHE_BUSTER, self.p(0.03, 0.06), "ms"),
        ]
        return _Spec(
            theme_name=self.pick("docs", "wiki"),
            vocab="docs",
            routes=(page, search, snippet),
            noise=tuple(noise),
            tracking_redirect=0,
            unknown_key=UnknownKey.SOFT,
            canonical=CanonicalMode.CORRECT,
            items=self.rng.randint(300, 900),
        )

    def _forum(self) -> _Spec:
        key = self.pick("tid", "t")
        pager = (
            _page("page", self.p(0.3, 0.45), "pages")
            if self.tuned("forum-thread-pager")
            else _page("start", self.p(0.3, 0.45), "pages", default=0, step=15)
        )
        thread = Route(
            "thread",
            self.pick("/thread", "/topic"),
            PageKind.ITEM,
            params=(_key(key, "int"), pager),
            key=(key,),
            weight=0.58,
        )
        profile = Route(
            "profile",
            self.pick("/profile", "/member"),
            PageKind.ITEM,
            params=(_key(self.pick("uid", "u"), "sku"),),
            key=(self.pick("uid", "u"),),
            weight=0.12,
        )
        board = Route(
            "board",
            self.pick("/forum", "/board"),
            PageKind.LISTING,
            params=(
                _filter(self.pick("f", "b"), "category", 1.0),
                _page("page", 0.35, "list")
                if self.tuned("forum-board-pager")
                else _page("start", 0.35, "list", 0, 15),
                _sort(
                    self.pick("sort", "order"),
                    "latest",
                    ("top", "oldest") if self.tuned("forum-sort-values") else ("votes", "replies"),
                    0.5,
                ),
            ),
            weight=0.25,
        )
        attachments = Route(
            "attachments",
            self.pick("/attachments", "/download"),
            PageKind.ITEM,
            params=(_key(key, "int"),),
            key=(key,),
            weight=0.05,
            hang=True,
        )
        report = Route(
            "report",
            self.pick("/report", "/quote"),
            PageKind.ITEM,
            params=(
                _key(key, "int"),
                _variant(self.pick("reason", "post"), ("spam", "abuse", "other"), 1.0, "Reason"),
            ),
            key=(key,),
            rare=1,
        )
        noise = [
            *self._utm(0.1, 0.2),
            *self._clickids(1),
            NoiseParam(self.pick("sid", "PHPSESSID"), Role.SESSION, self.p(0.2, 0.3), "hex32"),
            NoiseParam(self.pick("sessionid", "sess"), Role.SESSION, self.p(0.03, 0.06), "alnum"),
            NoiseParam("ref", Role.TRACKING, self.p(0.04, 0.08), "ref"),
            NoiseParam("_", Role.CACHE_BUSTER, self.p(0.03, 0.06), "ms"),
            NoiseParam(
                MATRIX_MARK + self.pick("jsessionid", "sid", "forum-matrix-session"),
                Role.SESSION,
                self.p(0.36, 0.44),
                self.pick("HEX32", "hex32", "forum-matrix-session"),
            ),
        ]
        return _Spec(
            theme_name=self.pick("forum", "board"),
            vocab="forum",
            routes=(thread, profile, board, attachments, report),
            noise=tuple(noise),
            tracking_redirect=0,
            unknown_key=UnknownKey.NOT_FOUND,
            canonical=CanonicalMode.CORRECT,
            items=self.rng.randint(500, 1800),
            few_promos=True,
            missing_key=MissingKey.TERSE,
        )

    def _markup(self) -> Markup:
        return Markup(
            image_root=self.pick("/img/", "/media/catalog/product/"),
            resize_name=self.pick("w", "width"),
            image_buster=self.pick("v", "t", "markup-buster"),
            picker=self.pick("select", "radio"),
            picture=not self.tuned("markup-picture"),
            data_blob=self.pick("next", "nuxt"),
            microdata=not self.tuned("markup-microdata"),
        )

    def _template(self, few_promos: bool) -> Template:
        r = self.rng
        layout = r.randrange(3)
        return Template(
            layout=layout,
            main_tag=("main", "div", "article")[layout],
            main_class=r.choice(("content", "page-body", "main-col", "primary")),
            title_class=r.choice(("product-title", "item-name", "headline", "page-title")),
            price_class=r.choice(("price", "amount", "cost", "price-now")),
            desc_class=r.choice(("description", "summary", "body-copy", "text")),
            variant_class=r.choice(("variant", "option", "selection", "facet")),
            list_class=r.choice(("results", "grid", "listing", "items")),
            item_class=r.choice(("result", "card", "tile", "entry")),
            recs_class=r.choice(("recs", "you-may-like", "reco-strip", "related-picks")),
            ads_class=r.choice(("ad-slot", "sponsored", "promo-box", "adv")),
            footer_class=r.choice(("site-footer", "foot", "bottom")),
            time_class=r.choice(("ts", "render-time", "generated-at")),
            reqid_class=r.choice(("req-id", "trace", "debug-id")),
            csrf_name=r.choice(("csrf_token", "authenticity_token", "_csrf")),
            ads_in_main=r.random() < 0.5,
            time_format=r.randrange(3),
            per_page=r.choice((12, 16, 20, 24)),
            promo_class=r.choice(("promo", "hero-banner", "campaign", "teaser")),
            promo_variants=r.randint(2, FEW_PROMO_VARIANTS if few_promos else 8),
        )

    def _catalog(self, vocab: Theme, n: int) -> Catalog:
        r = random.Random(self.seed ^ 0x5EED)
        offset = r.randrange(1000, 90000)
        stride = r.randint(1, 7)
        prefix = "".join(r.choice("ABCDEFGHJKLMNPQRSTUVWXYZ") for _ in range(3))
        letters = "ABCDEFGHJKLMNPQRSTUVWXYZ"
        words = sorted(set(vocab.adjectives) | set(vocab.nouns))
        rnd = r.random

        def pick(seq: tuple[str, ...] | list[str]) -> str:
            return seq[int(rnd() * len(seq))]

        items = []
        for idx in range(n):
            adj = pick(vocab.adjectives)
            noun = pick(vocab.nouns)
            brand = pick(vocab.brands)
            num = str(offset + idx * stride)
            first = int(rnd() * len(COLORS))
            colors = tuple(
                sorted({COLORS[(first + 3 * k) % len(COLORS)] for k in range(1 + idx % 4)})
            )
            items.append(
                Item(
                    idx=idx,
                    name=f"{brand.title()} {adj.title()} {noun.title()}",
                    slug=f"{adj}-{noun}-{num}",
                    num=num,
                    sku=f"{prefix}-{idx * 3 + 100:06d}",
                    code=f"{letters[idx % 24]}{letters[(idx // 24) % 24]}{idx * 7 + 10007}",
                    category=pick(vocab.categories),
                    brand=brand,
                    colors=colors,
                    tags=(adj, noun, pick(words)),
                    price=299 + int(rnd() * 49700),
                    city=pick(CITIES),
                    day=f"2025-{1 + int(rnd() * 12):02d}-{1 + int(rnd() * 28):02d}",
                    pages=1 + int(rnd() * 12),
                )
            )
        formats = ("int", "sku", "code", "slug")
        lookup = {fmt: {it.key(fmt): it.idx for it in items} for fmt in formats}
        weights = [1.0 / (rank + 1) ** 1.05 for rank in range(n)]
        r.shuffle(weights)
        tags = tuple(words)
        tag_weights = tuple(1.0 / (rank + 1) for rank in range(len(tags)))
        return Catalog(
            items=tuple(items),
            lookup=lookup,
            cum_weights=tuple(itertools.accumulate(weights)),
            categories=vocab.categories,
            brands=vocab.brands,
            tags=tags,
            tag_weights=tuple(itertools.accumulate(tag_weights)),
        )


@dataclass(frozen=True)
class _Spec:
    theme_name: str
    vocab: str
    routes: tuple[Route, ...]
    noise: tuple[NoiseParam, ...]
    tracking_redirect: int
    unknown_key: UnknownKey
    canonical: CanonicalMode
    items: int
    interstitial_rate: float = 0.0
    interstitials: tuple[Interstitial, ...] = ()
    few_promos: bool = False
    ab_share: float = 0.0
    missing_key: MissingKey = MissingKey.HOME
