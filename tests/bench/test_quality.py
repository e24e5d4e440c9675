"""The quality benchmark's oracle and per-trap rows, on the simulated web's ground truth."""

from __future__ import annotations

from simweb.corpus import generate_corpus
from simweb.resolve import page_shown
from simweb.sites import TRAPS, Display, build_sites, route_traps
from testkit.quality import parameter_oracle, score, trap_rows
from tests.simweb.support import item_url


def test_oracle_drops_neutral_matrix_parameters_and_keeps_content_ones() -> None:
    sites = build_sites("tuning", 6)
    oracle = parameter_oracle(sites)
    forum = next(s for s in sites if any(n.matrix for n in s.noise))
    [session] = [n for n in forum.noise if n.matrix]
    thread = next(r for r in forum.routes if r.key and not r.hang)
    plain = item_url(forum, thread, 2)
    path, _, query = plain.partition("?")
    assert oracle(f"{path}{session.name}=ABCDEF0123?{query}") == oracle(plain)
    docs = next(s for s in sites if any(p.matrix for r in s.routes for p in r.params))
    route = next(r for r in docs.routes if any(p.matrix for p in r.params))
    param = next(p for p in route.params if p.matrix)
    page = item_url(docs, route, 2)
    chosen = oracle(page + f"{param.name}={param.values[0]}")
    assert chosen != oracle(page)
    assert f"{param.name}={param.values[0]}" in chosen


def test_oracle_keeps_image_only_variants_and_is_exact_on_the_corpus() -> None:
    sites = build_sites("validation", 6)
    oracle = parameter_oracle(sites)
    store = next(s for s in sites if any("image-variant" in route_traps(s, r) for r in s.routes))
    route = next(r for r in store.routes if "image-variant" in route_traps(store, r))
    colour = next(p for p in route.params if p.display is Display.IMAGE)
    base = item_url(store, route, 1)
    assert oracle(f"{base}&{colour.name}={colour.values[0]}") != oracle(
        f"{base}&{colour.name}={colour.values[1]}"
    )
    corpus = generate_corpus(sites, 400, seed=2)
    assert score("oracle", corpus, oracle).false_merges == 0
    rows = trap_rows(corpus, [("oracle", oracle), ("raw", lambda url: url)]).splitlines()
    assert len(rows) == 2 + len(TRAPS)
    matrix_row = next(r for r in rows if r.startswith("| matrix-session |"))
    oracle_missed, raw_missed = matrix_row.split("|")[4].split(" / ")
    assert int(oracle_missed.split()[0]) < int(raw_missed.split()[0])


def test_page_shown_counts_canonical_urls_that_show_another_page() -> None:
    sites = build_sites("validation", 6)
    corpus = generate_corpus(sites, 300, seed=2)
    shown = page_shown(sites)
    assert score("oracle", corpus, parameter_oracle(sites), shown=shown).another_page == 0
    assert score("raw", corpus, lambda url: url, shown=shown).another_page == 0
    bare = score("no query", corpus, lambda url: url.partition("?")[0], shown=shown)
    assert bare.another_page is not None and bare.another_page > len(corpus) // 10
