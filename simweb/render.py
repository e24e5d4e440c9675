"""HTML for the simulated pages: a deterministic main part plus per-fetch noise around it."""

from __future__ import annotations

import random
import re
import threading
import time
import zlib
from collections.abc import Sequence
from html import escape
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

from simweb import structured
from simweb.resolve import Page, canonical_url
from simweb.sites import (
    INVOICE,
    CanonicalMode,
    Display,
    Item,
    PageKind,
    Param,
    Rendering,
    Role,
    Route,
    Site,
)
from simweb.vocab import AD_SPONSORS, CURRENCIES, PROMO_LINES, UI_WORDS

AD_MARK = "<!--ad-->"
_Q = "\x01"
_AMP = "\x02"
_IMG = "\x03"
"""Ends an image URL's query: a per-fetch cache-buster, then the echoed tracking values."""

_CSS = (
    "body{font-family:system-ui,sans-serif;margin:0;color:#222}header.top{display:flex;"
    "gap:1rem;padding:.5rem 1rem;background:#f4f4f4}nav ul{list-style:none;display:flex;"
    "gap:.75rem;margin:0;padding:0}main,.content,.page-body,.main-col,.primary{max-width:"
    "60rem;margin:1rem auto;padding:0 1rem}table{border-collapse:collapse}td,th{padding:"
    ".25rem .5rem;border-bottom:1px solid #ddd}aside{border-top:1px solid #eee;padding:1rem}"
    "footer{font-size:.8rem;color:#666;padding:1rem;background:#fafafa}"
)
_FOOTER_LINKS = (
    "About us",
    "Help centre",
    "Contact",
    "Careers",
    "Press",
    "Blog",
    "Stores",
    "Gift cards",
    "Returns",
    "Shipping",
    "Privacy",
    "Terms of use",
)
_LEGAL = (
    "Prices include VAT where applicable. Availability, delivery times and offers may change "
    "without notice. We use cookies to improve your experience; by continuing to browse you "
    "agree to our use of cookies. Registered office: 1 Example Street, Simtown. Company number "
    "00000000. Customer service is available Monday to Friday, 9am to 6pm."
)
_AD_LINES = ("Save big today", "Limited offer", "Try it free", "New arrivals")


def stable_hash(text: str) -> int:
    return zlib.crc32(text.encode())


def site_name(site: Site) -> str:
    return site.host.split(".")[0].replace("-", " ").title()


def _marker(href: str) -> str:
    return href + (_AMP if "?" in href else _Q)


class _Kit:
    """Everything about a site's pages that never changes, computed once."""

    def __init__(self, site: Site) -> None:
        self.site = site
        catalog = site.catalog
        items = catalog.items
        self.item_href = [self._item_href(it) for it in items]
        self.item_name = [escape(it.name) for it in items]
        self.listing_href = {c: self._listing_href(c) for c in catalog.categories}
        self.sentences = self._sentence_pool()
        self.index: dict[tuple[str, str], frozenset[int]] = self._index()
        self.orders: dict[str, tuple[list[int], list[int]]] = {}
        self.name = escape(site_name(site))
        self.chrome_top, self.chrome_bottom = self._chrome()
        self.primary = next((r.name for r in site.routes if r.kind is PageKind.ITEM), "")
        self.pagination_pages = {
            r.name: any(p.role is Role.PAGINATION and p.attr == "pages" for p in r.params)
            for r in site.routes
        }
        self.promos = self._promos()

    def _promos(self) -> list[str]:
        """The few variants the promo block rotates among, each with several text nodes."""
        site = self.site
        r = random.Random(site.seed ^ 0x960)
        variants = []
        for n in range(site.template.promo_variants):
            headline, line, cta = r.choice(PROMO_LINES)
            noun = r.choice(site.vocab.nouns)
            percent = r.choice((10, 15, 20, 25, 30, 40))
            variants.append(
                f'<div class="slide"><img src="{site.markup.image_root}promo/{n + 1}.jpg" '
                f'alt="{escape(headline)}" width="600" height="200"><h3>{escape(headline)}</h3>'
                f"<p>{escape(line)}</p><p>Up to {percent}% off every {escape(noun)}.</p>"
                f'<a class="button" href="/offers/{n + 1}{_Q}">{escape(cta)}</a></div>'
            )
        return variants

    def _item_href(self, item: Item) -> str:
        for route in self.site.routes:
            if route.kind is PageKind.ITEM and not route.rare and not route.hang:
                if route.path_key:
                    return route.path + quote(item.key(route.path_key), safe="")
                key_param = route.param(route.key[0])
                if key_param is not None:
                    return f"{route.path}?{key_param.name}={quote(item.key(key_param.attr))}"
        return "/"

    def _listing_href(self, category: str) -> str:
        for route in self.site.routes:
            if route.kind is not PageKind.LISTING:
                continue
            if route.path_key == "category":
                return route.path + quote(category)
            for param in route.params:
                if param.role is Role.FILTER and param.attr == "category":
                    return f"{route.path}?{param.name}={quote(category)}"
        return "/"

    def _sentence_pool(self) -> list[str]:
        r = random.Random(self.site.seed ^ 0xD0C)
        vocab = self.site.vocab
        words = vocab.filler + vocab.nouns + vocab.adjectives
        pool = []
        for _ in range(500):
            chosen = [words[int(r.random() * len(words))] for _ in range(r.randint(8, 16))]
            pool.append(escape(" ".join(chosen).capitalize() + "."))
        return pool

    def _index(self) -> dict[tuple[str, str], frozenset[int]]:
        buckets: dict[tuple[str, str], set[int]] = {}
        for it in self.site.catalog.items:
            keys = [("category", it.category), ("brand", it.brand), ("city", it.city)]
            keys.extend(("color", c) for c in it.colors)
            keys.extend(("tag", t) for t in it.tags)
            keys.extend(("text", w) for w in {*it.tags, *it.name.lower().split()})
            for key in keys:
                buckets.setdefault(key, set()).add(it.idx)
        return {key: frozenset(v) for key, v in buckets.items()}

    def paragraphs(self, seed_text: str, count: int) -> str:
        h = stable_hash(f"{self.site.seed}:{seed_text}")
        pool = self.sentences
        n = len(pool)
        parts = []
        for i in range(count):
            k = 3 + (h >> (2 * i)) % 4
            start = (h + i * 7919) % n
            parts.append("<p>" + " ".join(pool[(start + j * 131) % n] for j in range(k)) + "</p>")
        return "".join(parts)

    def blurb(self, idx: int) -> str:
        return self.sentences[(idx * 7919 + 17) % len(self.sentences)]

    def matching(self, attr: str, value: str) -> frozenset[int] | None:
        """Items a filter keeps; None when it keeps all."""
        if attr not in ("text", "category", "brand", "color", "city", "tag"):
            return None
        return self.index.get((attr, value.lower()), frozenset())

    def select(self, order: str, keep: frozenset[int] | None) -> list[int]:
        """Item indexes in ``order``, restricted to ``keep`` unless it is None."""
        cached = self.orders.get(order)
        if cached is None:
            ordered = [it.idx for it in _sort_items(order, self.site.catalog.items)]
            rank = [0] * len(ordered)
            for position, idx in enumerate(ordered):
                rank[idx] = position
            cached = (ordered, rank)
            self.orders[order] = cached
        ordered, rank = cached
        if keep is None:
            return ordered
        return sorted(keep, key=rank.__getitem__)

    def _chrome(self) -> tuple[str, str]:
        site = self.site
        t = site.template
        catalog = site.catalog
        nav = "".join(
            f'<li><a href="{_marker(self.listing_href[c])}">{escape(c.title())}</a><ul>'
            + "".join(
                f'<li><a href="{_marker(self.listing_href[c])}">{escape(b.title())} '
                f"{escape(c)}</a></li>"
                for b in catalog.brands[:4]
            )
            + "</ul></li>"
            for c in catalog.categories
        )
        action, field = "/", "q"
        for route in site.routes:
            if route.kind is PageKind.LISTING and not route.path_key:
                for param in route.params:
                    if param.role is Role.FILTER and param.attr == "text":
                        action, field = route.path, param.name
        top = (
            f'<body class="layout-{t.layout}"><header class="top">'
            f'<a class="logo" href="/{_Q}">{self.name}</a><nav><ul>{nav}</ul></nav>'
            f'<form class="search" action="{action}" method="get">'
            f'<input name="{field}" placeholder="Search">'
        )
        footer_links = "".join(
            f'<li><a href="/{quote(x.lower().replace(" ", "-"))}{_Q}">{x}</a></li>'
            for x in _FOOTER_LINKS
        )
        bottom = (
            f'<footer class="{t.footer_class}"><ul>{footer_links}</ul>'
            f"<p>© 2025 {self.name}. All rights reserved. {_LEGAL}</p>"
        )
        return top, bottom


_KITS: dict[tuple[str, int], _Kit] = {}
_KITS_LOCK = threading.Lock()


def kit(site: Site) -> _Kit:
    """The kit of ``site``, kept for the last site of its host and seed: two sites may share
    both and still differ (a crawl catalogue of another size)."""
    key = (site.host, site.seed)
    found = _KITS.get(key)
    if found is None or found.site is not site:
        with _KITS_LOCK:
            found = _KITS.get(key)
            if found is None or found.site is not site:
                found = _Kit(site)
                _KITS[key] = found
    return found


def _ui(page: Page) -> tuple[str, str, str, str]:
    route = page.route
    if route is not None:
        for name, value in page.values:
            param = route.param(name)
            if param is not None and param.attr == "lang":
                return UI_WORDS.get(value, UI_WORDS["en"])
    return UI_WORDS["en"]


def _currency(page: Page) -> tuple[str, float]:
    route = page.route
    code = ""
    if route is not None:
        for param in route.params:
            if param.role is Role.DEFAULTED and param.attr in ("currency", "market"):
                code = dict(page.values).get(param.name, param.default)
    return CURRENCIES.get(code, ("$", 1.0))


def _money(currency: tuple[str, float], cents: int) -> str:
    symbol, rate = currency
    return f"{symbol}{cents * rate / 100:,.2f}"


def _value_label(route: Route, name: str) -> str:
    param = route.param(name)
    if param is None:
        return name
    if param.role is Role.PAGINATION:
        return "Page" if param.step == 1 else "Starting at"
    return param.label or name


def render_main(site: Site, page: Page) -> str:
    """The deterministic part of a page: everything the content key stands for."""
    k = kit(site)
    kind = page.kind
    if kind is PageKind.HOME:
        return _home(k)
    if kind is PageKind.NOT_FOUND:
        return _not_found(site)
    if kind is PageKind.ERROR:
        return f"<p>Missing {escape(site.vocab.item_word)} reference.</p>"
    if kind is PageKind.LISTING:
        return _listing(k, page)
    if page.route is not None and page.route.rendering is Rendering.DATA:
        return _app_item(k)
    if prints_invoice(page):
        return _invoice(k, page)
    return _item(k, page)


def prints_invoice(page: Page) -> bool:
    """Whether ``page`` is an order printed as its invoice, in the print template."""
    route = page.route
    return route is not None and any(
        (param := route.param(name)) is not None and param.attr == INVOICE
        for name, _ in page.values
    )


def _invoice(k: _Kit, page: Page) -> str:
    t = k.site.template
    item = k.site.catalog.items[page.item]
    currency = _currency(page)
    vat = item.price // 5
    return (
        f'<h1 class="{t.title_class}">Invoice INV-{item.num}</h1>'
        f"<p>Billed to subscriber account {item.num}, issued {item.day}. Payable within "
        "30 days.</p>"
        f'<table class="invoice"><tr><th>Description</th><th>Amount</th></tr>'
        f"<tr><td>Subscription: {k.item_name[item.idx]}</td>"
        f"<td>{_money(currency, item.price)}</td></tr>"
        f"<tr><th>VAT</th><td>{_money(currency, vat)}</td></tr>"
        f"<tr><th>Total</th><td>{_money(currency, item.price + vat)}</td></tr></table>"
    )


_CLASS = re.compile(r'class="([^"]*)"')


def alternate_layout(site: Site, main: str) -> str:
    """``main`` in a second template: other wrapper elements, and every class renamed but
    those of the per-fetch noise."""
    t = site.template
    noise = {t.ads_class, t.promo_class}

    def renamed(match: re.Match[str]) -> str:
        names = (name if name in noise else "ab-" + name for name in match.group(1).split())
        return 'class="' + " ".join(names) + '"'

    return f'<div class="ab-grid"><div class="ab-column">{_CLASS.sub(renamed, main)}</div></div>'


def _app_item(k: _Kit) -> str:
    """What a client-rendered item page shows before its scripts run: the same on every item."""
    t = k.site.template
    return (
        '<div id="__next"><div class="skeleton" aria-busy="true">'
        f'<h1 class="{t.title_class}">Loading…</h1>'
        '<div class="skeleton-image"></div><p>Free delivery on orders over 50. '
        "Free returns within 30 days.</p></div></div>"
    )


def _home(k: _Kit) -> str:
    site = k.site
    t = site.template
    cum = site.catalog.cum_weights
    top = sorted(range(len(cum)), key=lambda i: -(cum[i] - (cum[i - 1] if i else 0.0)))
    cards = "".join(
        f'<li class="{t.item_class}"><a href="{k.item_href[i]}">{k.item_name[i]}</a></li>'
        for i in top[: t.per_page]
    )
    cats = "".join(
        f'<li><a href="{k.listing_href[c]}">{escape(c.title())}</a></li>'
        for c in site.catalog.categories
    )
    return (
        f'<h1 class="{t.title_class}">Welcome to {k.name}</h1>'
        f'<div class="{t.desc_class}">{k.paragraphs("home", 3)}</div>{AD_MARK}'
        f'<h2>Popular right now</h2><ul class="{t.list_class}">{cards}</ul>'
        f"<h2>Browse</h2><ul>{cats}</ul>"
    )


def _not_found(site: Site) -> str:
    t = site.template
    return (
        f'<h1 class="{t.title_class}">Page not found</h1>'
        f"<p>Sorry, we could not find that {site.vocab.item_word}. It may have been moved "
        f'or removed.</p><p><a href="/">Back to the home page</a></p>{AD_MARK}'
    )


def _item(k: _Kit, page: Page) -> str:
    site = k.site
    t = site.template
    route = page.route
    assert route is not None
    catalog = site.catalog
    item = catalog.items[page.item]
    price_label, desc_label, details_label, cta = _ui(page)
    currency = _currency(page)
    cents = item.price
    suffix = []
    lines = []
    page_no = ""
    for name, value in page.values:
        param = route.param(name)
        if param is None or param.display is Display.IMAGE:
            continue
        if param.role is Role.VARIANT:
            cents += variant_cents(name, value)
            suffix.append(value.upper() if len(value) <= 3 else value.title())
        if param.role is Role.PAGINATION:
            page_no = value
        label = escape(_value_label(route, name))
        lines.append(f'<p class="{t.variant_class}">{label}: {escape(value)}</p>')
    title = k.item_name[item.idx]
    if suffix:
        title += " – " + escape(" / ".join(suffix))
    crumbs = (
        f'<nav class="crumbs"><a href="/">Home</a> › <a href="{k.listing_href[item.category]}">'
        f"{escape(item.category.title())}</a> › {k.item_name[item.idx]}</nav>"
    )
    desc = k.paragraphs(f"{item.idx}:{page_no}", 3 + item.idx % 5)
    specs = (
        ("Reference", item.key(_key_format(route))),
        ("Brand", item.brand.title()),
        ("Category", item.category.title()),
        ("Colours", ", ".join(item.colors)),
        ("Date", item.day),
        ("City", item.city.title()),
    )
    compare = ""
    if page.kind is PageKind.COMPARE:
        if page.other >= 0:
            other = catalog.items[page.other]
            other_name = k.item_name[other.idx]
            title = f"Compare {k.item_name[item.idx]} vs {other_name}"
            compare = (
                f'<h2>Compared with {other_name}</h2><table class="compare">'
                f"<tr><th></th><th>{k.item_name[item.idx]}</th><th>{other_name}</th></tr>"
                f"<tr><th>{price_label}</th><td>{_money(currency, item.price)}</td>"
                f"<td>{_money(currency, other.price)}</td></tr>"
                f"<tr><th>Brand</th><td>{item.brand}</td><td>{other.brand}</td></tr>"
                f"<tr><th>Reference</th><td>{item.num}</td><td>{other.num}</td></tr></table>"
            )
        else:
            title = f"Compare {k.item_name[item.idx]}"
            compare = (
                f"<p>Pick a second {site.vocab.item_word} to compare with "
                f"{k.item_name[item.idx]}.</p>"
            )
    if route.name != k.primary and page.kind is PageKind.ITEM:
        lines.insert(0, f'<p class="section">{escape(route.name.title())} view</p>')
    pages_note = ""
    if page_no or k.pagination_pages[route.name]:
        pages_note = f'<p class="pages">Page {escape(page_no or "1")} of {item.pages}</p>'
    spec_rows = "".join(f"<tr><th>{n}</th><td>{escape(v)}</td></tr>" for n, v in specs)
    gallery = _gallery(site, page) if page.kind is PageKind.ITEM else ""
    return (
        f'{crumbs}<h1 class="{t.title_class}">{title}</h1>{gallery}{"".join(lines)}'
        f'<p class="{t.price_class}">{price_label}: {_money(currency, cents)}</p>'
        f'<div class="{t.desc_class}"><h2>{desc_label}</h2>{desc}</div>{AD_MARK}{pages_note}'
        f'{compare}<h2>{details_label}</h2><table class="specs">{spec_rows}</table>'
        f"{_buy_form(site, route, page, cta)}"
    )


def variant_cents(name: str, value: str) -> int:
    """What choosing ``value`` for the variant ``name`` adds to an item's price."""
    return (stable_hash(f"{name}={value}") % 7) * 150


def image_variant(route: Route) -> Param | None:
    return next((p for p in route.params if p.display is Display.IMAGE), None)


def item_image(site: Site, page: Page, width: int, ext: str = "jpg") -> str:
    """The URL of an item page's main image: its path names the item and the image-only
    variant shown; resize, cache-buster and echoed values follow in the query."""
    item = site.catalog.items[page.item]
    view = "main"
    route = page.route
    variant = image_variant(route) if route is not None else None
    if variant is not None:
        view = dict(page.values).get(variant.name, view)
    markup = site.markup
    return f"{markup.image_root}{item.sku.lower()}/{view}.{ext}?{markup.resize_name}={width}{_IMG}"


def _gallery(site: Site, page: Page) -> str:
    name = escape(site.catalog.items[page.item].name)
    src, big = item_image(site, page, 600), item_image(site, page, 1200)
    img = (
        f'<img class="product-image" src="{src}" srcset="{src} 1x, {big} 2x" alt="{name}" '
        'width="600" height="600">'
    )
    if site.markup.picture:
        webp, webp_big = item_image(site, page, 600, "webp"), item_image(site, page, 1200, "webp")
        img = (
            f'<picture><source type="image/webp" srcset="{webp} 1x, {webp_big} 2x">{img}</picture>'
        )
    return f'<figure class="gallery">{img}</figure>'


def _buy_form(site: Site, route: Route, page: Page, cta: str) -> str:
    """The add-to-cart form; an image-only variant shows here only as the chosen control."""
    variant = image_variant(route)
    picker = ""
    if variant is not None:
        chosen = dict(page.values).get(variant.name, "")
        name = escape(variant.name)
        if site.markup.picker == "radio":
            picker = (
                f"<fieldset><legend>{escape(variant.label)}</legend>"
                + "".join(
                    f'<label><input type="radio" name="{name}" value="{v}"'
                    f"{' checked' if v == chosen else ''}> {v.title()}</label>"
                    for v in variant.values
                )
                + "</fieldset>"
            )
        else:
            picker = (
                f'<label for="pick-{name}">{escape(variant.label)}</label>'
                f'<select id="pick-{name}" name="{name}">'
                f'<option value=""{"" if chosen else " selected"}>Choose</option>'
                + "".join(
                    f'<option value="{v}"{" selected" if v == chosen else ""}>{v.title()}</option>'
                    for v in variant.values
                )
                + "</select>"
            )
    return (
        f'<form class="buy" action="/cart/add" method="post">{picker}'
        f'<button class="cta">{cta}</button></form>'
    )


def _key_format(route: Route) -> str:
    if route.path_key:
        return route.path_key
    param = route.param(route.key[0]) if route.key else None
    return param.attr if param is not None and param.attr else "int"


def _sort_items(order: str, items: Sequence[Item]) -> list[Item]:
    if "desc" in order or order == "dear":
        return sorted(items, key=lambda it: (-it.price, it.idx))
    if "price" in order or "cheap" in order:
        return sorted(items, key=lambda it: (it.price, it.idx))
    if order in ("newest", "new", "latest"):
        return sorted(items, key=lambda it: (it.day, it.idx), reverse=True)
    if order in ("oldest", "date"):
        return sorted(items, key=lambda it: (it.day, it.idx))
    salt = stable_hash(order)
    return sorted(items, key=lambda it: ((it.idx * 2654435761) ^ salt) & 0xFFFFFFFF)


def _listing(k: _Kit, page: Page) -> str:
    site = k.site
    t = site.template
    route = page.route
    assert route is not None
    values = dict(page.values)
    keep: frozenset[int] | None = None
    heading = ""
    if route.path_key == "category":
        keep = k.matching("category", page.segment)
        heading = page.segment.title()
    elif route.path_key == "tag":
        keep = k.matching("tag", page.segment)
        heading = f"Tagged “{page.segment}”"
    facets = []
    order = ""
    offset = 0
    page_text = ""
    for param in route.params:
        value = values.get(param.name)
        if param.role is Role.FILTER:
            if value is None:
                continue
            hit = k.matching(param.attr, value)
            if hit is not None:
                keep = hit if keep is None else keep & hit
            if param.attr == "text":
                heading = f"Results for “{value}”"
            else:
                facets.append(f"{param.name}: {value}")
        elif param.role is Role.SORT:
            order = value or param.default
            if value is not None:
                facets.append(f"{param.label.lower()} {value}")
        elif param.role is Role.PAGINATION and value is not None:
            number = int(value)
            if param.step == 1:
                offset = (number - 1) * t.per_page
                page_text = f"Page {number}"
            else:
                offset = number
                page_text = f"Starting at result {number + 1}"
    if not heading:
        heading = f"All {site.vocab.item_word}s"
    selected = k.select(order or "relevance", keep)
    shown = selected[offset : offset + t.per_page]
    currency = _currency(page)
    items = site.catalog.items
    cards = "".join(
        f'<li class="{t.item_class}"><a href="{k.item_href[i]}">{k.item_name[i]}</a> '
        f'<span class="{t.price_class}">{_money(currency, items[i].price)}</span> '
        f"<small>{escape(items[i].category)} · {items[i].day}</small><p>{k.blurb(i)}</p></li>"
        for i in shown
    )
    facet_line = f'<p class="{t.variant_class}">{escape("; ".join(facets))}</p>' if facets else ""
    page_line = f'<p class="pages">{escape(page_text)}</p>' if page_text else ""
    word = site.vocab.item_word
    empty = "" if shown else f"<p>No {word}s match.</p>"
    return (
        f'<h1 class="{t.title_class}">{escape(heading)}</h1>{facet_line}{page_line}'
        f"<p>{len(selected)} {word}s found</p>{AD_MARK}"
        f'<ul class="{t.list_class}">{cards}</ul>{empty}'
    )


def render_document(
    site: Site,
    page: Page,
    main: str,
    echo: Sequence[tuple[str, str]],
    rng: random.Random,
    request_url: str = "",
) -> str:
    """The full HTML of one fetch of ``request_url``: ``main`` wrapped in chrome with fresh
    noise, echoes of the request, and the structured data of a client-rendered page."""
    if page.kind is PageKind.ERROR:
        return terse_error(site, main, rng)
    k = kit(site)
    t = site.template
    catalog = site.catalog
    encoded = urlencode(echo) if echo else ""
    q_suffix = "?" + encoded if encoded else ""
    amp_suffix = "&" + encoded if encoded else ""
    route = page.route
    data_page = route is not None and route.rendering is Rendering.DATA and page.item >= 0
    head = _head_links(site, page, request_url, data_page)
    token = f"{rng.getrandbits(128):032x}"
    nonce = f"{rng.getrandbits(64):016x}"
    currency = _currency(page)
    picks = rng.sample(range(len(catalog.items)), min(8, len(catalog.items)))
    recs = "".join(
        f'<li><a href="{_marker(k.item_href[i])}">{k.item_name[i]}</a> '
        f"<span>{_money(currency, catalog.items[i].price)}</span></li>"
        for i in picks
    )
    sponsor = AD_SPONSORS[int(rng.random() * len(AD_SPONSORS))]
    ad_id = rng.getrandbits(32)
    ad = (
        f'<div class="{t.ads_class}"><a href="http://ads.example.sim/click?ad={ad_id}">'
        f'<img src="http://ads.example.sim/{ad_id}.png" alt="{sponsor}"> {sponsor}: '
        f"{_AD_LINES[ad_id % len(_AD_LINES)]}</a></div>"
    )
    if t.ads_in_main:
        main = main.replace(AD_MARK, ad)
        ad = ""
    if page.layout or prints_invoice(page) or (site.ab_share and rng.random() < site.ab_share):
        main = alternate_layout(site, main)
    promo = f'<section class="{t.promo_class}">{k.promos[rng.randrange(len(k.promos))]}</section>'
    body_data = ""
    if data_page:
        product = _product(site, page)
        head += structured.json_ld(product, request_url)
        if site.markup.microdata:
            main += structured.microdata(product, request_url)
        body_data = _data_blob(site, page, product, request_url, rng)
    hidden = "".join(
        f'<input type="hidden" name="{escape(n)}" value="{escape(v)}">' for n, v in echo
    )
    state = ",".join(f'"{escape(n)}":"{escape(v)}"' for n, v in echo)
    html = (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(_head_title(site, page))} | {k.name}</title>"
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"{head}<style>{_CSS}</style>"
        f'<script src="/static/app.js?build=7{_AMP}"></script></head>{k.chrome_top}'
        f'<input type="hidden" name="{t.csrf_name}" value="{token}">{hidden}'
        f"<button>Go</button></form></header>"
        f'<{t.main_tag} class="{t.main_class}">{main}{promo}</{t.main_tag}>'
        f'<aside class="{t.recs_class}"><h3>Recommended for you</h3><ul>{recs}</ul></aside>{ad}'
        f"{k.chrome_bottom}"
        f'<p class="{t.time_class}">{_timestamp(t.time_format, rng)}</p>'
        f'<p class="{t.reqid_class}">Request ID: {nonce}</p></footer>'
        f'<img src="/px.gif?e=pv&amp;cb={rng.getrandbits(31)}{_AMP}" width="1" height="1" '
        'alt="" style="display:none">'
        f'<script>window.__STATE__={{"rid":"{nonce}",{state}}};</script>{body_data}</body></html>'
    )
    image_suffix = f"&{site.markup.image_buster}={rng.getrandbits(31)}{amp_suffix}"
    return (
        html.replace(AD_MARK, "")
        .replace(_Q, q_suffix)
        .replace(_AMP, amp_suffix)
        .replace(_IMG, image_suffix)
    )


def terse_error(site: Site, main: str, rng: random.Random) -> str:
    """An error page as many sites send it: a script and one line of text."""
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Error</title>'
        f'<script nonce="{rng.getrandbits(64):016x}" src="/static/error.js"></script></head>'
        f"<body>{main}</body></html>"
    )


def _head_links(site: Site, page: Page, request_url: str, data_page: bool) -> str:
    """Canonical link and Open Graph tags. ``og:url`` echoes the requested URL as it came;
    a client-rendered page has no canonical link and no item image in its head."""
    tags = []
    if page.kind is not PageKind.NOT_FOUND and not data_page:
        if site.canonical is CanonicalMode.HOME:
            canonical = f"http://{site.host}/"
        else:
            canonical = canonical_url(site, page)
            if site.canonical is CanonicalMode.TRACKING:
                canonical += _Q if "?" not in canonical else _AMP
        tags.append(f'<link rel="canonical" href="{escape(canonical)}">')
    tags.append(f'<meta property="og:site_name" content="{kit(site).name}">')
    if request_url:
        tags.append(f'<meta property="og:url" content="{escape(request_url)}">')
    if page.kind is PageKind.ITEM and not data_page:
        image = f"http://{site.host}{item_image(site, page, 1200)}"
        tags.append(f'<meta property="og:image" content="{image}">')
        tags.append(f'<meta name="twitter:image" content="{image}">')
        tags.append('<meta name="twitter:card" content="summary_large_image">')
    return "".join(tags)


def _product(site: Site, page: Page) -> structured.JSON:
    route = page.route
    assert route is not None
    item = site.catalog.items[page.item]
    size = ""
    cents = item.price
    for name, value in page.values:
        size = value
        cents += variant_cents(name, value)
    image = f"http://{site.host}{item_image(site, page, 1200).replace(_IMG, '')}"
    return structured.product_offer(site, item, image, size, cents, "USD")


def _data_blob(
    site: Site, page: Page, product: structured.JSON, request_url: str, rng: random.Random
) -> str:
    route = page.route
    assert route is not None
    sizes = next((p.values for p in route.params if p.role is Role.VARIANT), ())
    selected = next((v for _, v in page.values), "")
    query = {"sku": page.segment}
    query.update(parse_qsl(urlsplit(request_url).query, keep_blank_values=True))
    items = site.catalog.items
    picks = rng.sample(range(len(items)), min(len(items), 3 + rng.randrange(6)))
    recommendations = [
        {"sku": items[i].sku, "title": items[i].name, "price": f"{items[i].price / 100:.2f}"}
        for i in picks
    ]
    return structured.data_blob(
        site.markup.data_blob,
        route.path,
        product,
        selected,
        sizes,
        request_url,
        query,
        rng,
        recommendations,
    )


def _head_title(site: Site, page: Page) -> str:
    if page.route is not None and page.route.rendering is not Rendering.SERVER:
        return "Shop"
    if page.kind is PageKind.ITEM or page.kind is PageKind.COMPARE:
        return site.catalog.items[page.item].name
    if page.kind is PageKind.NOT_FOUND:
        return "Not found"
    if page.kind is PageKind.HOME:
        return "Home"
    return page.segment.title() or "Listing"


def _timestamp(fmt: int, rng: random.Random) -> str:
    now = time.time()
    micros = int(now % 1 * 1_000_000)
    if fmt == 0:
        return f"Generated {time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(now))}.{micros:06d}Z"
    if fmt == 1:
        return f"Rendered at {now:.6f} in {rng.random() * 0.2:.4f}s"
    return f"{time.strftime('%H:%M:%S', time.gmtime(now))}.{micros // 1000:03d} UTC"
