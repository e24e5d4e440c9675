"""Which URLs a path shape keeps as probe samples, and when a pattern is ready to learn."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from miqps.learner import LearnConfig
from miqps.sampling import SamplePool, SamplingRule, urls_per_name
from miqps.urls import parse

LEARN = LearnConfig(samples=3, choice_sampled=5, choice_items=5, choice_values=3)
RULE = SamplingRule(
    min_distinct_values=3, saturation_urls=10, max_pool_urls=8, urls_per_pattern=2, learn=LEARN
)
ALLOWLIST = frozenset({"variant"})


def consider(pool: SamplePool, *texts: str) -> None:
    for text in texts:
        url = parse(text)
        pool.consider(url.pattern, url, RULE, ALLOWLIST)


def test_the_default_waits_for_as_many_items_as_the_learner_wants() -> None:
    rule, learn = SamplingRule(), LearnConfig()
    assert rule.learn == learn
    assert rule.items_wanted(values=40, carriers=40) == learn.items_needed(choice=False)
    assert rule.items_wanted(values=3, carriers=40) == learn.items_needed(choice=True)
    assert rule.items_wanted(values=3) == learn.items_needed(choice=True), "while it may be one"


def test_a_pattern_is_ready_once_every_parameter_has_enough_distinct_items() -> None:
    pool = SamplePool()
    pattern = "/p/*?id&utm_source"
    assert not pool.ready(pattern, {}, RULE, ALLOWLIST), "no sample, not ready"
    consider(
        pool,
        "http://a.example/p/1?id=1&utm_source=x",
        "http://a.example/p/2?id=2&utm_source=y",
        "http://a.example/p/2?id=2&utm_source=z",
    )
    assert len(pool.items["id"]) == 3, "an item of id is its path and the other values"
    assert len(pool.items["utm_source"]) == 2, "/p/2?id=2 is one item for utm_source"
    seen = {"id": 4, "utm_source": 4}
    assert not pool.ready(pattern, seen, RULE, ALLOWLIST)
    consider(pool, "http://a.example/p/3?id=3&utm_source=x")
    assert pool.ready(pattern, seen, RULE, ALLOWLIST)
    assert not pool.ready("/p/*?id", seen, RULE, ALLOWLIST), "items are pooled, samples not"
    assert pool.samples_of(pattern) == 4
    assert pool.patterns() == {pattern}


def test_a_single_valued_parameter_is_sampled_on_distinct_items() -> None:
    pool = SamplePool()
    consider(pool, *(f"http://a.example/a/{n}?print=1" for n in range(8)))
    assert pool.samples_of("/a/*?print") == LEARN.choice_items, "one value, many items"
    seen = {"print": LEARN.choice_items}
    assert pool.ready("/a/*?print", seen, RULE, ALLOWLIST)


def test_a_choice_like_parameter_waits_for_the_items_a_choice_needs() -> None:
    pool = SamplePool()
    sizes = ("s", "m", "l")
    consider(pool, *(f"http://a.example/p?id={n}&size={sizes[n % 3]}" for n in range(3)))
    seen = {"id": 9, "size": 9}
    assert not pool.ready("/p?id&size", seen, RULE, ALLOWLIST), "three values, three items"
    consider(pool, *(f"http://a.example/p?id={n}&size={sizes[n % 3]}" for n in range(3, 6)))
    assert len(pool.items["size"]) == LEARN.choice_items
    assert pool.ready("/p?id&size", seen, RULE, ALLOWLIST)


def test_a_parameter_seen_in_enough_urls_for_its_items_has_no_more_and_allowlisted_need_none() -> (
    None
):
    pool = SamplePool()
    consider(pool, *(f"http://a.example/p?id={n}&sort=asc&variant={n}" for n in range(3)))
    assert "variant" not in pool.values and "variant" not in pool.items
    pattern = "/p?id&sort&variant"
    assert len(pool.items["sort"]) == 3
    many = {"id": 100}
    assert not pool.ready(pattern, many | {"sort": RULE.saturation_urls}, RULE, ALLOWLIST)
    assert pool.ready(pattern, many | {"sort": RULE.urls_per_item * 3}, RULE, ALLOWLIST)
    home = SamplePool()
    consider(home, *(f"http://a.example/?gclid={n}" for n in range(3)))
    assert len(home.items["gclid"]) == 1, "a home page is one item"
    assert not home.ready("/?gclid", {"gclid": RULE.saturation_urls - 1}, RULE, ALLOWLIST)
    assert home.ready("/?gclid", {"gclid": RULE.saturation_urls}, RULE, ALLOWLIST)


def test_urls_are_counted_per_parameter_over_the_patterns_of_a_shape() -> None:
    seen = urls_per_name([("/p?id&sort", 3), ("/p?id&ref", 1), ("/p?sort&variant", 9)])
    assert seen == {"id": 4, "sort": 12, "ref": 1, "variant": 9}


def test_a_pattern_keeps_a_few_samples_and_more_only_for_new_items_or_values() -> None:
    pool = SamplePool()
    consider(pool, "http://a.example/p?id=1", "http://a.example/p?id=1", "http://a.example/p?id=2")
    assert pool.urls() == ("http://a.example/p?id=1", "http://a.example/p?id=2")
    consider(pool, "http://a.example/p?id=2&variant=1")
    assert pool.samples_of("/p?id&variant") == 1, "a new pattern always gets a sample"
    consider(pool, "http://a.example/p?id=3&variant=2")
    assert pool.samples_of("/p?id&variant") == 2
    consider(pool, "http://a.example/p?id=3&variant=3")
    assert pool.samples_of("/p?id&variant") == 3, "another variant is another item for id"
    consider(pool, "http://a.example/p?id=4&variant=3")
    assert pool.samples_of("/p?id&variant") == 4, "a fourth value of id on an item"
    consider(pool, *(f"http://a.example/p?variant={n}" for n in range(4)))
    assert pool.samples_of("/p?variant") == 2, "an allowlisted value is not new evidence"


def test_the_pool_is_bounded_but_every_pattern_keeps_a_sample() -> None:
    pool = SamplePool()
    consider(pool, *(f"http://a.example/p?id={n}&q{n}={n}" for n in range(20)))
    assert len(pool.samples) == RULE.max_pool_urls
    consider(pool, "http://a.example/p?id=1&page=2")
    assert len(pool.samples) == RULE.max_pool_urls
    assert pool.samples_of("/p?id&page") == 1
    assert len(pool.values["id"]) == LEARN.choice_values + 1, "enough to tell it is no choice"
    consider(pool, *(f"http://a.example/p?id={n}&q0={n}" for n in range(5)))
    assert pool.samples_of("/p?id&q0") == 1, "a pattern with a sample gets no more when full"


def test_a_full_pool_drops_the_newest_sample_of_its_richest_pattern() -> None:
    pool = SamplePool()
    rich = [f"http://a.example/p?id={n}" for n in range(3)]
    consider(pool, *rich, *(f"http://a.example/p?k{n}={n}" for n in range(5)))
    consider(pool, "http://a.example/p?new=1")
    assert len(pool.samples) == RULE.max_pool_urls
    assert [url for pattern, url in pool.samples if pattern == "/p?id"] == rich[:2]
    assert pool.samples_of("/p?new") == 1


URL_TEXTS = st.lists(
    st.builds(
        "http://a.example/p?{}={}&{}={}".format,
        st.sampled_from(["id", "ref", "variant"]),
        st.integers(0, 9),
        st.sampled_from(["q", "page", "sort"]),
        st.integers(0, 9),
    ),
    max_size=60,
)


@given(URL_TEXTS)
def test_the_pool_never_exceeds_its_bounds_nor_repeats_a_url(texts: list[str]) -> None:
    pool = SamplePool()
    consider(pool, *texts)
    assert len(pool.samples) <= RULE.max_pool_urls
    assert len(set(pool.urls())) == len(pool.samples)
    assert all(len(set(d)) == len(d) <= LEARN.choice_values + 1 for d in pool.values.values())
    assert all(len(set(d)) == len(d) <= LEARN.choice_items for d in pool.items.values())
    assert not ALLOWLIST & (pool.values.keys() | pool.items.keys())
    considered = {parse(text).pattern for text in texts}
    assert pool.patterns() <= considered
    if len(considered) <= RULE.max_pool_urls:
        assert pool.patterns() == considered, "room is made without dropping a pattern"
