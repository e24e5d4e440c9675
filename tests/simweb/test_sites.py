from __future__ import annotations

import pytest

from simweb.sites import (
    CanonicalMode,
    PageKind,
    Role,
    Site,
    UnknownKey,
    build_sites,
    param_roles,
)


def _roles_by_name(sites: list[Site]) -> dict[str, set[Role]]:
    out: dict[str, set[Role]] = {}
    for site in sites:
        for (_, name), role in param_roles(site).items():
            out.setdefault(name, set()).add(role)
    return out


def test_build_sites_is_deterministic() -> None:
    first = build_sites("holdout", 4, seed=3)
    again = build_sites("holdout", 4, seed=3)
    assert first == again
    assert [s.catalog.items[:50] for s in first] == [s.catalog.items[:50] for s in again]
    other = build_sites("holdout", 4, seed=4)
    assert other != first


def test_families_are_disjoint(tuning_sites: list[Site], holdout_sites: list[Site]) -> None:
    tuning_hosts = {s.host for s in tuning_sites}
    holdout_hosts = {s.host for s in holdout_sites}
    assert not tuning_hosts & holdout_hosts
    assert all(h.endswith(".sim") for h in tuning_hosts)
    assert all(h.endswith(".test") for h in holdout_hosts)
    tuning_names = set(_roles_by_name(tuning_sites))
    holdout_names = set(_roles_by_name(holdout_sites))
    assert len(tuning_names - holdout_names) >= 10
    assert len(holdout_names - tuning_names) >= 10
    tuning_paths = {r.path for s in tuning_sites for r in s.routes} - {"/"}
    holdout_paths = {r.path for s in holdout_sites for r in s.routes} - {"/"}
    assert len(tuning_paths & holdout_paths) <= 2


def test_validation_mixes_both_name_pools_on_hosts_of_its_own(
    tuning_sites: list[Site], holdout_sites: list[Site], validation_sites: list[Site]
) -> None:
    assert all(s.host.endswith(".example") for s in validation_sites)
    tuning_names = set(_roles_by_name(tuning_sites))
    holdout_names = set(_roles_by_name(holdout_sites))
    validation_names = set(_roles_by_name(validation_sites))
    assert validation_names & (tuning_names - holdout_names)
    assert validation_names & (holdout_names - tuning_names)
    assert build_sites("validation", 6) == validation_sites


def test_unknown_family_is_rejected() -> None:
    with pytest.raises(ValueError):
        build_sites("staging", 3)


def test_every_role_exists(family_sites: list[Site]) -> None:
    roles = {role for site in family_sites for role in param_roles(site).values()}
    assert roles == set(Role)


def test_names_with_two_meanings(family_sites: list[Site]) -> None:
    by_name = _roles_by_name(family_sites)
    assert {Role.IDENTITY, Role.TRACKING} <= by_name["ref"]
    assert {Role.VARIANT, Role.CACHE_BUSTER} <= by_name["v"]
    assert {Role.DEFAULTED, Role.TRACKING} <= by_name["mc"]
    assert {Role.IDENTITY, Role.TRACKING} <= by_name["eid"]
    assert any(Role.FILTER in roles and Role.VARIANT in roles for roles in by_name.values())


def test_same_name_means_different_things_on_two_paths_of_one_site(
    family_sites: list[Site],
) -> None:
    found = []
    for site in family_sites:
        roles = param_roles(site)
        for (hint, name), role in roles.items():
            if role is Role.IDENTITY:
                others = {r for (h, n), r in roles.items() if n == name and h != hint}
                if Role.TRACKING in others:
                    found.append((site.host, hint, name))
    assert found


def test_alias_pairs_and_defaults(family_sites: list[Site]) -> None:
    alias_routes = [r for s in family_sites for r in s.routes if len(r.key) == 2]
    assert len(alias_routes) >= 2
    for route in alias_routes:
        assert all(route.param(n) is not None for n in route.key)
        assert {route.param(n).role for n in route.key} == {Role.ALIAS}  # type: ignore[union-attr]
    defaulted = [p for s in family_sites for r in s.routes for p in r.params if p.default]
    assert any(p.role is Role.DEFAULTED for p in defaulted)
    for param in defaulted:
        assert param.default_share > 0
        if param.role in (Role.DEFAULTED, Role.SORT):
            assert param.values[0] == param.default
            assert param.default not in param.values[1:], param
            assert param.default_share >= 0.5


def test_site_behaviours_exist(family_sites: list[Site]) -> None:
    assert {s.tracking_redirect for s in family_sites} >= {0, 301, 302}
    assert {s.unknown_key for s in family_sites} == set(UnknownKey)
    assert {s.canonical for s in family_sites} == set(CanonicalMode)
    assert sum(r.hang for s in family_sites for r in s.routes) >= 1
    rare = [r for s in family_sites for r in s.routes if r.rare]
    assert len(rare) >= len(family_sites)
    assert all(1 <= r.rare <= 3 for r in rare)
    assert any(r.path_key and r.kind is PageKind.ITEM for s in family_sites for r in s.routes)
    assert any(r.path_key and r.kind is PageKind.LISTING for s in family_sites for r in s.routes)
    assert any(r.kind is PageKind.COMPARE for s in family_sites for r in s.routes)


def test_templates_vary(family_sites: list[Site]) -> None:
    templates = {s.template for s in family_sites}
    assert len(templates) == len(family_sites)
    assert len({t.main_selector for t in templates}) >= 3


def test_param_roles_let_route_parameters_override_noise(tuning_sites: list[Site]) -> None:
    site = next(s for s in tuning_sites if any(r.kind is PageKind.COMPARE for r in s.routes))
    roles = param_roles(site)
    compare = next(r for r in site.routes if r.kind is PageKind.COMPARE)
    product = next(r for r in site.routes if r.kind is PageKind.ITEM)
    assert roles[(compare.hint, "ref")] is Role.IDENTITY
    assert roles[(product.hint, "ref")] is Role.TRACKING
    assert roles[("/", "utm_source")] is Role.TRACKING
    assert not Role.IDENTITY.neutral
    assert Role.SESSION.neutral
