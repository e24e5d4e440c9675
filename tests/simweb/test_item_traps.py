"""Ground truth of the item-level traps, both directions, in every family: a variant that
changes only a minority of the items, a choice-like parameter that changes none, and the
terse error page of a URL without its key."""

from __future__ import annotations

import httpx

from miqps.content import snapshot_html
from simweb.corpus import generate_corpus
from simweb.resolve import page_key, split_target
from simweb.sites import MissingKey, Role, Site, route_traps


def test_a_minority_variant_changes_about_a_tenth_of_the_items(family_sites: list[Site]) -> None:
    site, route = next(
        (s, r) for s in family_sites for r in s.routes if "minority-variant" in route_traps(s, r)
    )
    [variant] = [p for p in route.params if p.item_share < 1.0]
    assert variant.presence >= 0.85, "carried on nearly every product URL"
    items = range(len(site.catalog.items))
    share = sum(variant.applies_to(item) for item in items) / len(items)
    assert 0.05 < share < 0.2
    key_name = route.key[0]
    changed = unchanged = 0
    for item in site.catalog.items[:300]:
        query = f"{key_name}={item.num}"
        with_size = page_key(site, route.path, f"{query}&{variant.name}={variant.values[0]}")
        if with_size == page_key(site, route.path, query):
            unchanged += 1
        else:
            changed += 1
            assert variant.applies_to(item.idx)
    assert changed and unchanged > 4 * changed


def test_a_choice_like_tracking_parameter_repeats_a_few_values_and_changes_nothing(
    family_sites: list[Site],
) -> None:
    hosts = {
        s.host: s for s in family_sites for r in s.routes if "choice-noise" in route_traps(s, r)
    }
    corpus = [e for e in generate_corpus(family_sites, 600, seed=5) if "choice-noise" in e.traps]
    assert corpus
    for host, site in hosts.items():
        [noise] = [n for n in site.noise if n.style == "choice"]
        assert noise.role is Role.TRACKING and 2 <= len(noise.values) <= 4
        carrying = [
            e for e in corpus if e.url.startswith(f"http://{host}/") and noise.name in e.url
        ]
        assert len(carrying) > 50
        for entry in carrying:
            _, path, query = split_target(entry.url)
            rest = "&".join(p for p in query.split("&") if not p.startswith(noise.name + "="))
            assert page_key(site, path, rest) == entry.content_key


def test_some_sites_answer_a_url_without_its_key_tersely_and_others_send_it_home(
    family_sites: list[Site],
) -> None:
    terse = [s for s in family_sites if s.missing_key is MissingKey.TERSE]
    home = [s for s in family_sites if s.missing_key is MissingKey.HOME]
    assert terse and home
    for site in terse:
        route = next(r for r in site.routes if r.key)
        assert "terse-error" in route_traps(site, route)
        assert page_key(site, route.path, "utm_source=mail") == f"{site.host}|error"
    for site in home:
        route = next(r for r in site.routes if r.key)
        assert page_key(site, route.path, "utm_source=mail") == f"{site.host}|home"


def test_the_terse_page_is_a_404_that_cannot_be_judged(
    all_sites: list[Site], client: httpx.Client
) -> None:
    site = next(s for s in all_sites if s.missing_key is MissingKey.TERSE)
    route = next(r for r in site.routes if r.key)
    answer = client.get(f"http://{site.host}{route.path}")
    assert answer.status_code == 404
    snapshot = snapshot_html(404, str(answer.url), answer.content)
    assert snapshot.unjudgeable is not None and "shell" in snapshot.unjudgeable
