"""The traps as served on loopback: what changes on the page, and what is only an echo."""

from __future__ import annotations

import json
from collections import Counter

import httpx
import pytest
from selectolax.lexbor import LexborHTMLParser

from simweb.corpus import content_key_for
from simweb.resolve import split_target
from simweb.server import SimWeb
from simweb.sites import Display, Interstitial, Rendering, Role, Route, Site, route_traps
from tests.simweb.support import item_url, main_text, main_view


def _trap_routes(sites: list[Site], trap: str) -> list[tuple[Site, Route]]:
    return [
        (site, route) for site in sites for route in site.routes if trap in route_traps(site, route)
    ]


def _tracking(site: Site, route: Route) -> str:
    return next(
        n.name
        for n in site.noise
        if n.role is Role.TRACKING and not n.matrix and route.param(n.name) is None
    )


def _echo_fetches(
    client: httpx.Client, site: Site, route: Route, idx: int, echo: str
) -> tuple[str, str, str, str]:
    """A tracking parameter of ``route`` and the pages of item ``idx``: clean, tagged with
    that parameter set to ``echo``, and clean again; the tag never changes the content key."""
    tracking = _tracking(site, route)
    clean_url = item_url(site, route, idx)
    tagged_url = item_url(site, route, idx, f"{tracking}={echo}")
    assert content_key_for(site, clean_url) == content_key_for(site, tagged_url)
    clean, tagged, again = (client.get(u).text for u in (clean_url, tagged_url, clean_url))
    return tracking, clean, tagged, again


def _attrs(html: str, selector: str, name: str) -> list[str]:
    return [str(n.attributes.get(name)) for n in LexborHTMLParser(html).css(selector)]


def _path(url: str) -> str:
    return url.split("?")[0]


def _json_scripts(html: str) -> tuple[dict[str, object], str]:
    tree = LexborHTMLParser(html)
    ld = tree.css_first('script[type="application/ld+json"]')
    blob = tree.css_first("script#__NEXT_DATA__") or tree.css_first("script#__NUXT_DATA__")
    assert ld is not None and blob is not None
    return json.loads(ld.text()), blob.text()


def test_image_only_variant_changes_only_images_and_the_chosen_control(
    client: httpx.Client, all_sites: list[Site]
) -> None:
    pickers = set()
    for site, route in _trap_routes(all_sites, "image-variant"):
        colour = next(p for p in route.params if p.display is Display.IMAGE)
        base = item_url(site, route, 7)
        red = client.get(f"{base}&{colour.name}={colour.values[0]}").text
        blue = client.get(f"{base}&{colour.name}={colour.values[1]}").text
        assert main_text(site, red) == main_text(site, blue)
        assert main_view(site, red) != main_view(site, blue)
        for selector, name in (
            ('meta[property="og:image"]', "content"),
            ('meta[name="twitter:image"]', "content"),
            ("img.product-image", "src"),
        ):
            [red_image], [blue_image] = _attrs(red, selector, name), _attrs(blue, selector, name)
            assert _path(red_image) != _path(blue_image)
            assert f"/{colour.values[0]}." in _path(red_image)
        assert LexborHTMLParser(red).css("img.product-image[srcset]")
        chosen = "form.buy option[selected], form.buy input[checked]"
        assert _attrs(red, chosen, "value") == [colour.values[0]]
        assert _attrs(blue, chosen, "value") == [colour.values[1]]
        pickers.add(site.markup.picker)
    assert pickers == {"select", "radio"}


def test_tracking_echoes_into_images_and_pixels_are_not_content(
    client: httpx.Client, all_sites: list[Site]
) -> None:
    for site, route in _trap_routes(all_sites, "image-variant"):
        _, clean, tagged, again = _echo_fetches(client, site, route, 8, "zz-echo-77")
        assert main_view(site, clean) == main_view(site, tagged) == main_view(site, again)
        tagged_images = _attrs(tagged, "img.product-image", "src")
        assert all("zz-echo-77" in src for src in tagged_images)
        [pixel] = _attrs(tagged, 'img[src^="/px.gif"]', "src")
        assert "zz-echo-77" in pixel
        buster = f"{site.markup.image_buster}="
        first = _attrs(clean, "img.product-image", "src")
        second = _attrs(again, "img.product-image", "src")
        assert first != second and [_path(u) for u in first] == [_path(u) for u in second]
        assert all(buster in src and f"{site.markup.resize_name}=600" in src for src in first)


def test_data_only_items_differ_only_in_structured_data(
    client: httpx.Client, all_sites: list[Site]
) -> None:
    blobs = set()
    for site, route in _trap_routes(all_sites, "data-item"):
        size = next(p for p in route.params if p.role is Role.VARIANT)
        one, two = item_url(site, route, 1), item_url(site, route, 2)
        sized = f"{one}?{size.name}={size.values[3]}"
        pages = {url: client.get(url) for url in (one, two, sized)}
        assert {r.status_code for r in pages.values()} == {200}
        texts = {main_text(site, r.text) for r in pages.values()}
        assert len(texts) == 1
        data = {url: _json_scripts(r.text) for url, r in pages.items()}
        assert data[one][0]["sku"] != data[two][0]["sku"]
        assert data[one][0]["name"] != data[two][0]["name"]
        offers = {url: d[0]["offers"] for url, d in data.items()}
        assert offers[one]["sku"] != offers[sized]["sku"]  # type: ignore[index]
        assert size.values[3] in data[sized][1] and size.values[3].upper() in str(offers[sized])
        if site.markup.microdata:
            product = 'div[itemtype="https://schema.org/Product"] > meta[itemprop="sku"]'
            skus = _attrs(pages[one].text, product, "content")
            assert skus == [data[one][0]["sku"]]
        blobs.add(site.markup.data_blob)
        missing = client.get(f"http://{site.host}{route.path}no-such-sku")
        assert missing.status_code == 404
    assert blobs == {"next", "nuxt"}


def test_data_page_echoes_and_nonce_are_not_content(
    client: httpx.Client, all_sites: list[Site]
) -> None:
    for site, route in _trap_routes(all_sites, "data-item"):
        tracking, clean, tagged, again = _echo_fetches(client, site, route, 5, "zz-echo-31")
        ld, blob = _json_scripts(tagged)
        assert "zz-echo-31" in str(ld["url"]) and "zz-echo-31" in str(ld["@id"])
        assert f'"{tracking}"' in blob and "zz-echo-31" in blob
        [og_url] = _attrs(tagged, 'meta[property="og:url"]', "content")
        assert "zz-echo-31" in og_url
        assert _attrs(tagged, f'input[type="hidden"][name="{tracking}"]', "value") == ["zz-echo-31"]
        clean_ld, clean_blob = _json_scripts(clean)
        again_ld, again_blob = _json_scripts(again)
        assert clean_ld == again_ld
        assert clean_blob != again_blob
        assert {k: v for k, v in ld.items() if k not in ("url", "@id", "offers")} == {
            k: v for k, v in clean_ld.items() if k not in ("url", "@id", "offers")
        }


def test_client_shells_are_the_same_for_every_item(
    client: httpx.Client, all_sites: list[Site]
) -> None:
    for site, route in _trap_routes(all_sites, "shell"):
        assert route.rendering is Rendering.SHELL
        one, two = client.get(item_url(site, route, 1)), client.get(item_url(site, route, 2))
        assert one.status_code == two.status_code == 200
        assert content_key_for(site, str(one.url)) != content_key_for(site, str(two.url))
        tree = LexborHTMLParser(one.text)
        assert tree.css_first("div#root") is not None and tree.css_first("noscript")
        body = tree.body
        assert body is not None and len(body.text(separator=" ").split()) < 15
        strip = [_attrs(r.text, "script[nonce]", "nonce")[0] for r in (one, two)]
        assert one.text.replace(strip[0], "") == two.text.replace(strip[1], "")


def test_matrix_parameters_on_the_server(client: httpx.Client, all_sites: list[Site]) -> None:
    for site, route in _trap_routes(all_sites, "matrix-session"):
        if route.hang or not route.key:
            continue
        [session] = [n for n in site.noise if n.matrix]
        plain = item_url(site, route, 3)
        path, _, query = plain.partition("?")
        with_session = f"{path}{session.name}=0A1B2C3D4E5F?{query}"
        assert content_key_for(site, with_session) == content_key_for(site, plain)
        assert main_view(site, client.get(with_session).text) == main_view(
            site, client.get(plain).text
        )
    for site, route in _trap_routes(all_sites, "matrix-content"):
        param = next(p for p in route.params if p.matrix)
        plain = item_url(site, route, 3)
        chosen = plain + f"{param.name}={param.values[0]}"
        assert content_key_for(site, chosen) != content_key_for(site, plain)
        assert main_view(site, client.get(chosen).text) != main_view(site, client.get(plain).text)


def test_promo_blocks_rotate_among_few_variants(
    client: httpx.Client, all_sites: list[Site]
) -> None:
    for site in all_sites:
        route = next(
            r for r in site.routes if r.rendering is Rendering.SERVER and r.key and not r.hang
        )
        url = item_url(site, route, 2)
        promos: Counter[str] = Counter()
        for _ in range(40):
            tree = LexborHTMLParser(client.get(url).text)
            block = tree.css_first(f"{site.template.main_selector} .{site.template.promo_class}")
            assert block is not None and len(block.css("p")) >= 2 and block.css_first("img")
            promos[str(block.html)] += 1
        assert 2 <= len(promos) <= site.template.promo_variants


@pytest.mark.parametrize("family", ["tuning", "holdout"])
def test_interstitials_at_their_rate_never_change_the_page(
    family: str, tuning_sites: list[Site], holdout_sites: list[Site]
) -> None:
    sites = tuning_sites if family == "tuning" else holdout_sites
    [site] = [s for s in sites if s.interstitial_rate > 0]
    route = next(r for r in site.routes if r.key and r.rendering is Rendering.SERVER)
    urls = [item_url(site, route, i % 25) for i in range(500)]
    answers: Counter[tuple[int, str | None]] = Counter()
    views: dict[str, set[str]] = {}
    with (
        SimWeb(sites, rate_limit_per_second=0, flaky_rate=0, seed=3) as web,
        httpx.Client(proxy=web.proxy_url, timeout=10) as c,
    ):
        for url in urls:
            response = c.get(url)
            if "Ray ID" in response.text or "Before you continue" in response.text:
                answers[(response.status_code, response.headers.get("cf-mitigated"))] += 1
                assert response.status_code in {k.status for k in site.interstitials}
                continue
            assert response.status_code == 200
            views.setdefault(content_key_for(site, url), set()).add(main_view(site, response.text))
    share = sum(answers.values()) / len(urls)
    assert abs(share - site.interstitial_rate) < 0.05, share
    assert len(views) == 25 and all(len(v) == 1 for v in views.values())
    statuses = {status for status, _ in answers}
    if family == "tuning":
        assert site.interstitials == (Interstitial.BROWSER_CHECK,) and statuses == {200}
    else:
        assert {403, 503} <= statuses
        assert all(mitigated == "challenge" for status, mitigated in answers if status != 200)
    assert split_target(urls[0])[0] == site.host
