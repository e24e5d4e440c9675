"""Ground truth of the content-identity traps, both directions, in every family."""

from __future__ import annotations

import random

from simweb.corpus import content_key_for, generate_corpus, url_traps
from simweb.render import render_document, render_main
from simweb.resolve import canonical_url, resolve, split_matrix, split_target
from simweb.sites import (
    INVOICE,
    MATRIX_MARK,
    TRAPS,
    Display,
    Rendering,
    Role,
    Route,
    Site,
    param_roles,
    route_traps,
)
from tests.simweb.support import item_url, main_text


def _trap_route(sites: list[Site], trap: str) -> tuple[Site, Route]:
    for site in sites:
        for route in site.routes:
            if trap in route_traps(site, route):
                return site, route
    raise AssertionError(f"no route holds {trap}")


def _tracking(site: Site, route: Route) -> str:
    return next(
        n.name
        for n in site.noise
        if n.role is Role.TRACKING and not n.matrix and route.param(n.name) is None
    )


def test_every_trap_is_in_every_family(family_sites: list[Site]) -> None:
    held = {
        trap for site in family_sites for route in site.routes for trap in route_traps(site, route)
    }
    assert held == set(TRAPS)
    corpus = generate_corpus(family_sites, 400, seed=3)
    tagged = {trap for entry in corpus for trap in entry.traps}
    assert tagged == set(TRAPS)
    sites = {site.host: site for site in family_sites}
    for entry in corpus[:500]:
        assert entry.traps == url_traps(sites[split_target(entry.url)[0]], entry.url)


def test_one_site_per_family_has_interstitials_and_one_has_few_promos(
    family_sites: list[Site],
) -> None:
    challenged = [site for site in family_sites if site.interstitial_rate > 0]
    assert len(challenged) == 1
    assert 0.1 <= challenged[0].interstitial_rate <= 0.14
    assert all(2 <= site.template.promo_variants <= 8 for site in family_sites)
    assert min(site.template.promo_variants for site in family_sites) <= 3


def test_image_only_variant_is_content_and_echoes_are_not(family_sites: list[Site]) -> None:
    site, route = _trap_route(family_sites, "image-variant")
    colour = next(p for p in route.params if p.display is Display.IMAGE)
    assert colour.role is Role.VARIANT
    plain = item_url(site, route, 4)
    keys = {content_key_for(site, f"{plain}&{colour.name}={value}") for value in colour.values}
    keys.add(content_key_for(site, plain))
    assert len(keys) == len(colour.values) + 1
    tracking = _tracking(site, route)
    red = f"{plain}&{colour.name}={colour.values[0]}"
    assert content_key_for(site, f"{red}&{tracking}=mail") == content_key_for(site, red)


def test_data_only_item_and_its_size_are_content(family_sites: list[Site]) -> None:
    site, route = _trap_route(family_sites, "data-item")
    assert route.rendering is Rendering.DATA and route.path_key
    size = next(p for p in route.params if p.role is Role.VARIANT)
    one, two = item_url(site, route, 1), item_url(site, route, 2)
    assert content_key_for(site, one) != content_key_for(site, two)
    sized = f"{one}?{size.name}={size.values[2]}"
    assert content_key_for(site, sized) != content_key_for(site, one)
    tracking = _tracking(site, route)
    assert content_key_for(site, f"{sized}&{tracking}=mail") == content_key_for(site, sized)
    assert resolve(site, *split_target(f"{sized}&{tracking}=mail")[1:]).status == 200
    missing = f"http://{site.host}{route.path}no-such-sku"
    assert resolve(site, *split_target(missing)[1:]).status == 404


def test_shell_identity_is_content_and_tracking_is_not(family_sites: list[Site]) -> None:
    site, route = _trap_route(family_sites, "shell")
    assert route.rendering is Rendering.SHELL
    one, two = item_url(site, route, 1), item_url(site, route, 2)
    assert content_key_for(site, one) != content_key_for(site, two)
    tracking = _tracking(site, route)
    assert content_key_for(site, f"{one}&{tracking}=x1") == content_key_for(site, one)


def test_split_matrix() -> None:
    assert split_matrix("/a;x=1/b;y=2;z=%41") == (
        "/a/b",
        [(";x", "1", "x=1"), (";y", "2", "y=2"), (";z", "A", "z=%41")],
    )
    assert split_matrix("/plain/path") == ("/plain/path", [])
    assert split_matrix("/;jsessionid=AB") == ("/", [(";jsessionid", "AB", "jsessionid=AB")])


def test_matrix_session_ids_route_to_the_same_page(family_sites: list[Site]) -> None:
    site, _ = _trap_route(family_sites, "matrix-session")
    [session] = [n for n in site.noise if n.matrix]
    assert session.role is Role.SESSION and session.name.startswith(MATRIX_MARK)
    corpus = [e for e in generate_corpus([site], 2000, seed=4) if "matrix-session" in e.traps]
    carrying = [e for e in corpus if session.name + "=" in e.url]
    assert 0.3 <= len(carrying) / len(corpus) <= 0.5
    for entry in carrying[:200]:
        host, path, query = split_target(entry.url)
        clean = split_matrix(path)[0]
        assert content_key_for(site, entry.url) == entry.content_key
        assert content_key_for(site, f"http://{host}{clean}?{query}") == entry.content_key
        assert resolve(site, path, query).page.key == resolve(site, clean, query).page.key
    route = next(r for r in site.routes if r.path != "/")
    assert param_roles(site)[(route.hint, session.name)] is Role.SESSION


def test_content_matrix_parameter_picks_the_page(family_sites: list[Site]) -> None:
    site, route = _trap_route(family_sites, "matrix-content")
    param = next(p for p in route.params if p.matrix)
    assert param.role is Role.VARIANT
    plain = item_url(site, route, 3)
    keys = {content_key_for(site, plain)}
    for value in param.values:
        url = plain + f"{param.name}={value}"
        key = content_key_for(site, url)
        keys.add(key)
        page = resolve(site, *split_target(url)[1:]).page
        canonical = canonical_url(site, page)
        assert f"{param.name}={value}" in canonical
        assert content_key_for(site, canonical) == key
    assert len(keys) == len(param.values) + 1
    corpus = generate_corpus([site], 1500, seed=2)
    assert any(param.name + "=" in entry.url for entry in corpus)


def _fetches(site: Site, url: str, count: int) -> list[str]:
    """``count`` fetches of ``url`` as the server renders them, each with its own noise."""
    answer = resolve(site, *split_target(url)[1:])
    main = render_main(site, answer.page)
    return [
        render_document(site, answer.page, main, answer.echo, random.Random(n), url)
        for n in range(count)
    ]


def test_a_print_view_is_its_article_in_another_template(family_sites: list[Site]) -> None:
    site, route = _trap_route(family_sites, "print-view")
    view = next(p for p in route.params if p.role is Role.LAYOUT)
    assert view.role.neutral and len(view.values) == 1
    plain = item_url(site, route, 4)
    printed = f"{plain}&{view.name}={view.values[0]}"
    assert content_key_for(site, printed) == content_key_for(site, plain)
    assert param_roles(site)[(route.hint, view.name)] is Role.LAYOUT
    [plain_page], [print_page] = _fetches(site, plain, 1), _fetches(site, printed, 1)
    title = f'class="{site.template.title_class}"'
    assert title in plain_page and title not in print_page, "another template"
    assert main_text(site, plain_page) == main_text(site, print_page), "the same article"


def test_a_printed_invoice_is_another_item_under_the_same_name(family_sites: list[Site]) -> None:
    site, route = _trap_route(family_sites, "print-other-item")
    printed = next(p for p in route.params if p.attr == INVOICE)
    assert printed.role is Role.VARIANT and printed.values == ("1",)
    order = item_url(site, route, 4)
    invoice = f"{order}&{printed.name}=1"
    assert content_key_for(site, invoice) != content_key_for(site, order)
    assert "Invoice" in main_text(site, _fetches(site, invoice, 1)[0])
    assert "Invoice" not in main_text(site, _fetches(site, order, 1)[0])
    assert _trap_route(family_sites, "print-view")[0] is site, "beside a print view"


def test_an_ab_layout_site_serves_a_second_layout_around_the_same_content(
    family_sites: list[Site],
) -> None:
    site, route = _trap_route(family_sites, "ab-layout")
    assert [s for s in family_sites if s.ab_share] == [site]
    route = next(r for r in site.routes if r.key and r.rendering is Rendering.SERVER)
    pages = _fetches(site, item_url(site, route, 3), 200)
    second = [page for page in pages if "ab-grid" in page]
    assert 0.2 <= len(second) / len(pages) <= 0.4
    assert len({main_text(site, page) for page in pages}) == 1


def test_a_client_rendered_item_recommends_a_changing_list_in_its_data(
    family_sites: list[Site],
) -> None:
    site, route = _trap_route(family_sites, "data-item")
    pages = _fetches(site, item_url(site, route, 1), 12)
    lengths = {page.count('"title":') for page in pages}
    assert len(lengths) > 1, "the recommendations change length from fetch to fetch"
    assert all("renderedAt" in page for page in pages)
