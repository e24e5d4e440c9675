"""Helpers shared by the simweb tests."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from selectolax.lexbor import LexborHTMLParser

from simweb.sites import PageKind, Role, Route, Site


def main_text(site: Site, html: str) -> str:
    """Visible text of the page's main element, with the known per-fetch noise removed."""
    tree = LexborHTMLParser(html)
    main = tree.css_first(site.template.main_selector)
    assert main is not None, f"no {site.template.main_selector} on a {site.host} page"
    for selector in site.template.noise_selectors:
        for node in main.css(selector):
            node.decompose()
    return " ".join(main.text(separator=" ").split())


def main_view(site: Site, html: str) -> str:
    """What a person sees of the item: the main text, the paths of the item's images (their
    queries are resize, cache-buster and echo) and the chosen variant controls, in either
    layout (the second one's classes start with ``ab-``)."""
    tree = LexborHTMLParser(html)
    images = sorted(
        str(node.attributes.get("src") or "").split("?")[0]
        for node in tree.css("img.product-image, img.ab-product-image")
    )
    chosen = sorted(
        f"{node.attributes.get('name')}={node.attributes.get('value')}"
        for node in tree.css("form.buy input[checked], form.ab-buy input[checked]")
    ) + sorted(
        str(node.attributes.get("value"))
        for node in tree.css("form.buy option[selected], form.ab-buy option[selected]")
    )
    return " | ".join([main_text(site, html), *images, *chosen])


def css_text(html: str, selector: str) -> str:
    node = LexborHTMLParser(html).css_first(selector)
    assert node is not None, selector
    return node.text(separator=" ").strip()


def attr_value(html: str, selector: str, name: str) -> str:
    node = LexborHTMLParser(html).css_first(selector)
    assert node is not None, selector
    return str(node.attributes[name])


def canonical_href(html: str) -> str:
    node = LexborHTMLParser(html).css_first('link[rel="canonical"]')
    assert node is not None
    return str(node.attributes["href"])


def find_site(sites: Sequence[Site], test: Callable[[Site], bool]) -> Site:
    for site in sites:
        if test(site):
            return site
    raise AssertionError("no site matches")


def item_route(site: Site) -> Route:
    """The site's main item route (its key may be in the path)."""
    for route in site.routes:
        if route.kind is PageKind.ITEM and not route.rare and not route.hang:
            return route
    raise AssertionError(f"{site.host} has no item route")


def keyed_route(site: Site) -> Route:
    """An item route whose key is a query parameter."""
    for route in site.routes:
        if route.kind is PageKind.ITEM and route.key and not route.hang:
            return route
    raise AssertionError(f"{site.host} has no query-keyed item route")


def item_url(site: Site, route: Route, idx: int = 0, extra: str = "") -> str:
    item = site.catalog.items[idx]
    if route.path_key:
        url = f"http://{site.host}{route.path}{item.key(route.path_key)}"
        return url + ("?" + extra if extra else "")
    key = route.param(route.key[0])
    assert key is not None
    url = f"http://{site.host}{route.path}?{key.name}={item.key(key.attr)}"
    return url + ("&" + extra if extra else "")


def unknown_item_url(site: Site, route: Route) -> str:
    if route.path_key:
        return f"http://{site.host}{route.path}does-not-exist-0"
    key = route.param(route.key[0])
    assert key is not None
    return f"http://{site.host}{route.path}?{key.name}=does-not-exist-0"


def tracking_name(site: Site, route: Route) -> str:
    for noise in site.noise:
        if noise.role is Role.TRACKING and route.param(noise.name) is None:
            return noise.name
    raise AssertionError("no tracking parameter")
