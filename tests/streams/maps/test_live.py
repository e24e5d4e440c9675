import random

from miqps.canonical import Canonicalizer, DomainRules, Status, settle
from miqps.maps import (
    DomainMap,
    Layer,
    ParamEvidence,
    PatternDecision,
    Verification,
    timestamp_seconds,
)
from miqps.urls import parse, path_shape, pattern_key
from streams.maps.live import LiveMaps

NAMES = ("id", "page", "utm_source", "utm_medium", "gclid", "ref", "variant", "sid", "q")


def random_urls(rng: random.Random, count: int) -> list[str]:
    urls = []
    for _ in range(count):
        host = f"s{rng.randrange(4)}.example"
        path = rng.choice(
            ("/p/12", "/p/13", "/search", "/", "/p/12;jsessionid=AB", "/docs/x;v=2;sid=3", "/a;b")
        )
        names = rng.sample(NAMES, rng.randrange(0, 5))
        query = "&".join(f"{name}={rng.randrange(3)}" for name in names)
        urls.append(f"https://{host}{path}" + (f"?{query}" if query else ""))
    return urls


def random_maps(rng: random.Random, urls: list[str]) -> list[DomainMap]:
    patterns: dict[str, dict[str, frozenset[str]]] = {}
    for text in urls:
        url = parse(text)
        if url.has_params and rng.random() < 0.7:
            patterns.setdefault(url.host, {})[url.pattern] = url.names
            # Another pattern that dropping parameters may move the URL into.
            fewer = frozenset(name for name in url.names if rng.random() < 0.7)
            if fewer:
                patterns[url.host][pattern_key(path_shape(url.path), fewer)] = fewer
    maps = []
    for number, (domain, by_pattern) in enumerate(sorted(patterns.items())):
        decisions = {}
        for key, names in by_pattern.items():
            kept = frozenset(name for name in names if rng.random() < 0.5)
            params = {
                name: ParamEvidence(
                    "keep" if name in kept else "drop",
                    rng.choice((Layer.LEARNED, Layer.INSUFFICIENT)),
                    3,
                    1,
                    2,
                    0,
                    default_values=[f"{name}=0"] if rng.random() < 0.3 else [],
                )
                for name in names
            }
            decisions[key] = PatternDecision(
                kept, names - kept, params, Verification(), "2026-01-01T00:00:00Z", 1
            )
        maps.append(DomainMap(domain, number + 1, "2026-01-01T00:00:00Z", decisions))
    return maps


def test_the_stream_decides_exactly_like_the_core_paths() -> None:
    """The stream's decision (precomputed kept and dropped names per learned pattern)
    against the rounds of ``settle`` themselves and the core's plans path."""
    rng = random.Random(5)
    urls = random_urls(rng, 3000)
    maps = random_maps(rng, urls)
    core = Canonicalizer()
    live = LiveMaps(reverify_after=3600)
    for domain_map in maps:
        core.update(domain_map)
        live.apply(domain_map)
    rules = {domain_map.domain: DomainRules(domain_map, core.layers, True) for domain_map in maps}
    versions = {domain_map.domain: domain_map.version for domain_map in maps}
    statuses = set()
    matrix_dropped = 0
    for text in urls:
        url = parse(text)
        rounds = settle(url, rules.get(url.host), core.layers, True)
        final = rounds[-1].keep
        got = live.decide(url)
        assert got.canonical_url == url.with_only(final) == core.canonical_text(text), text
        assert got.pattern == rounds[0].pattern
        assert got.kept == tuple(sorted(final))
        assert got.dropped == tuple(sorted(url.names - final))
        assert got.layers == {}
        learned = any(rounds[0].pattern in m.patterns for m in maps if m.domain == url.host)
        assert got.status == (Status.LEARNED if learned else Status.PROVISIONAL)
        assert got.map_version == versions.get(url.host, 0)
        assert got == core.decide(url)._replace(layers={}, items={}, removed_as_default=())
        statuses.add(got.status)
        assert live.decide(parse(got.canonical_url)).canonical_url == got.canonical_url
        matrix_dropped += any(name.startswith(";") for name in got.dropped)
    assert statuses == {Status.LEARNED, Status.PROVISIONAL}
    assert matrix_dropped > 0


def test_a_learned_decision_is_due_for_reverification_once_its_time_has_come() -> None:
    rng = random.Random(3)
    urls = random_urls(rng, 300)
    domain_map = random_maps(rng, urls)[0]
    live = LiveMaps(reverify_after=10)
    live.apply(domain_map)
    pattern = next(iter(domain_map.patterns))
    decided = timestamp_seconds("2026-01-01T00:00:00Z")
    learned = next(d for d in (live.decide(parse(u)) for u in urls) if d.pattern == pattern)
    assert live.due_for_reverification(learned, decided + 9) is None
    assert live.due_for_reverification(learned, decided + 10) == "2026-01-01T00:00:00Z"
    unlearned = live.decide(parse("https://unmapped.example/p?id=1"))
    assert live.due_for_reverification(unlearned, decided + 10**9) is None


def test_older_versions_never_replace_newer_ones_and_the_map_round_trips() -> None:
    rng = random.Random(1)
    urls = random_urls(rng, 200)
    newer = random_maps(rng, urls)[0]
    older = DomainMap(
        newer.domain, newer.version - 1 if newer.version > 1 else 0, newer.updated_at, {}
    )
    live = LiveMaps(reverify_after=10)
    assert live.apply(newer)
    assert not live.apply(older)
    assert not live.apply(newer)
    assert live.map_for(newer.domain) == newer
    compiled = live.get(newer.domain)
    assert compiled is not None
    rule = compiled.rule(next(iter(newer.patterns)))
    assert rule is not None and rule.reverify_at == timestamp_seconds("2026-01-01T00:00:00Z") + 10
    live.remove(newer.domain)
    assert live.get(newer.domain) is None and live.map_for(newer.domain) is None


def test_of_two_maps_published_with_the_same_version_the_later_one_stays_live() -> None:
    rng = random.Random(2)
    urls = random_urls(rng, 200)
    first = random_maps(rng, urls)[0]
    second = DomainMap(first.domain, first.version, first.updated_at, {})
    for live in (LiveMaps(reverify_after=10), LiveMaps(10, canonicalizer=Canonicalizer())):
        assert live.apply(first, first.dumps().encode())
        assert live.apply(second)
        assert live.map_for(first.domain) == second
        assert not live.apply(second)
        assert not live.apply(DomainMap(first.domain, first.version, first.updated_at, {}))
        assert live.apply(first)
        assert live.map_for(first.domain) == first


def test_unreadable_timestamps_mean_due_at_once() -> None:
    assert timestamp_seconds("yesterday") == 0.0
    assert timestamp_seconds("1970-01-01T00:01:00Z") == 60.0
