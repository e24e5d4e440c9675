from __future__ import annotations

from collections import Counter, defaultdict

import pytest

from simweb.corpus import CorpusURL, content_key_for, generate_corpus
from simweb.resolve import match_route, page_key, parse_query, resolve, split_target
from simweb.sites import MissingKey, Role, Site, build_sites, param_roles


def _by_host(sites: list[Site]) -> dict[str, Site]:
    return {s.host: s for s in sites}


def _redundancy(corpus: list[CorpusURL]) -> float:
    distinct = {c.url: c.content_key for c in corpus}
    return 1 - len(set(distinct.values())) / len(distinct)


def test_corpus_is_deterministic(tuning_sites: list[Site]) -> None:
    first = generate_corpus(tuning_sites, 300, seed=1)
    assert first == generate_corpus(tuning_sites, 300, seed=1)
    assert first != generate_corpus(tuning_sites, 300, seed=2)
    assert len(first) == 300 * len(tuning_sites)
    assert len({c.url for c in first}) < len(first)


def test_content_key_for_agrees_with_corpus(family_sites: list[Site]) -> None:
    sites = _by_host(family_sites)
    for item in generate_corpus(family_sites, 1500, seed=7):
        site = sites[split_target(item.url)[0]]
        assert content_key_for(site, item.url) == item.content_key, item.url


def test_content_key_for_rejects_other_hosts(tuning_sites: list[Site]) -> None:
    with pytest.raises(ValueError):
        content_key_for(tuning_sites[0], f"http://{tuning_sites[1].host}/")


def _expect_change(site: Site, url: str, name: str) -> bool | None:
    """Whether removing ``name`` from ``url`` must change the page; None if it depends."""
    _, path, query = split_target(url)
    match = match_route(site, path)
    assert match is not None
    route, _ = match
    pairs = parse_query(query)
    roles = param_roles(site)
    role = roles.get((route.hint, name))
    assert role is not None, (url, name)
    value = next(p.value for p in pairs if p.name == name)
    if role.neutral:
        return False
    if role is Role.ALIAS:
        return not any(p.name in route.key and p.name != name for p in pairs)
    param = route.param(name)
    assert param is not None
    if role in (Role.DEFAULTED, Role.SORT, Role.PAGINATION):
        return value != param.default
    if role is Role.VARIANT:
        return param.applies_to(resolve(site, path, query).page.item)
    return True


def test_removing_a_parameter_changes_the_key_exactly_per_its_role(
    family_sites: list[Site],
) -> None:
    sites = _by_host(family_sites)
    checked: Counter[bool] = Counter()
    for item in generate_corpus(family_sites, 400, seed=11):
        host, path, query = split_target(item.url)
        site = sites[host]
        pairs = parse_query(query)
        for name in {p.name for p in pairs}:
            rest = "&".join(p.raw for p in pairs if p.name != name)
            key = page_key(site, path, rest)
            assert key == resolve(site, path, rest).page.key
            expected = _expect_change(site, item.url, name)
            assert (key != item.content_key) == expected, (item.url, name)
            checked[bool(expected)] += 1
    assert checked[True] > 500
    assert checked[False] > 300


def test_missing_key_and_unknown_key(tuning_sites: list[Site]) -> None:
    site = next(s for s in tuning_sites if any(len(r.key) == 2 for r in s.routes))
    route = next(r for r in site.routes if len(r.key) == 2)
    a, b = route.key
    item = site.catalog.items[3]
    base = f"http://{site.host}{route.path}"
    both = content_key_for(site, f"{base}?{a}={item.num}&{b}={item.num}")
    assert content_key_for(site, f"{base}?{a}={item.num}") == both
    assert content_key_for(site, f"{base}?{b}={item.num}") == both
    missing = "error" if site.missing_key is MissingKey.TERSE else "home"
    assert content_key_for(site, base) == f"{site.host}|{missing}"
    assert content_key_for(site, f"{base}?{a}=999999999") == f"{site.host}|notfound"
    assert content_key_for(site, f"http://{site.host}/no/such/path") == f"{site.host}|notfound"


@pytest.mark.parametrize("family", ["tuning", "holdout"])
def test_redundancy(family: str) -> None:
    sites = build_sites(family, 12)
    corpus = generate_corpus(sites, 2000)
    assert 0.4 <= _redundancy(corpus) <= 0.7
    for site in sites:
        assert 0.25 <= _redundancy([c for c in corpus if f"//{site.host}/" in c.url]) <= 0.75


def test_patterns_multiply_and_rare_patterns_exist(family_sites: list[Site]) -> None:
    corpus = generate_corpus(family_sites, 2000, seed=5)
    patterns: dict[str, Counter[tuple[str, tuple[str, ...]]]] = defaultdict(Counter)
    for item in corpus:
        host, path, query = split_target(item.url)
        names = tuple(sorted({p.name for p in parse_query(query)}))
        site = next(s for s in family_sites if s.host == host)
        match = match_route(site, path)
        assert match is not None
        patterns[host][(match[0].hint, names)] += 1
    for site in family_sites:
        counts = patterns[site.host]
        assert len(counts) >= 80
        assert sum(1 for n in counts.values() if n <= 3) >= len(counts) // 2
        for route in site.routes:
            if route.rare:
                rare = [n for (hint, _), n in counts.items() if hint == route.hint]
                assert sum(rare) == route.rare


def test_defaults_orders_and_popularity(family_sites: list[Site]) -> None:
    corpus = generate_corpus(family_sites, 2000, seed=9)
    sites = _by_host(family_sites)
    defaults: Counter[str] = Counter()
    others: Counter[str] = Counter()
    orders: defaultdict[frozenset[str], set[tuple[str, ...]]] = defaultdict(set)
    keys: Counter[str] = Counter()
    for item in corpus:
        host, path, query = split_target(item.url)
        site = sites[host]
        match = match_route(site, path)
        assert match is not None
        pairs = parse_query(query)
        for p in pairs:
            param = match[0].param(p.name)
            if param is not None and param.role is Role.DEFAULTED:
                (defaults if p.value == param.default else others)[param.name] += 1
        orders[frozenset(p.name for p in pairs)].add(tuple(p.name for p in pairs))
        keys[item.content_key] += 1
    assert defaults
    for name, n in defaults.items():
        assert n > 3 * others[name] > 0, name
    assert any(len(v) > 1 for v in orders.values())
    top = sum(n for _, n in keys.most_common(len(keys) // 100))
    assert top > 0.15 * len(corpus)
