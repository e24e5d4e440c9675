"""Which URLs a path shape keeps as probe samples, and when a pattern is ready to learn."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from miqps.learner import LearnConfig
from miqps.sampling import SamplePool, SamplingRule, urls_per_name
from miqps.urls import parse

RULE = SamplingRule(min_distinct_values=3, saturation_urls=10, max_pool_urls=8, urls_per_pattern=2)
ALLOWLIST = frozenset({"variant"})


def consider(pool: SamplePool, *texts: str) -> None:
    for text in texts:
        url = parse(text)
        pool.consider(url.pattern, url, RULE, ALLOWLIST)


def test_the_default_waits_for_as_many_values_as_the_learner_samples() -> None:
    assert SamplingRule().min_distinct_values == LearnConfig().samples


def test_a_pattern_is_ready_once_every_parameter_has_enough_distinct_values() -> None:
    pool = SamplePool()
    pattern = "/p?id&utm_source"
    assert not pool.ready(pattern, {}, RULE, ALLOWLIST), "no sample, not ready"
    consider(
        pool,
        "http://a.example/p?id=1&utm_source=x",
        "http://a.example/p?id=2&utm_source=y",
        "http://a.example/p?id=3&utm_source=y",
    )
    assert len(pool.values["id"]) == 3 and len(pool.values["utm_source"]) == 2
    assert not pool.ready(pattern, {}, RULE, ALLOWLIST)
    consider(pool, "http://a.example/p?id=4&utm_source=z")
    assert pool.ready(pattern, {}, RULE, ALLOWLIST)
    assert not pool.ready("/p?id", {}, RULE, ALLOWLIST), "the values are pooled, the samples not"
    assert pool.samples_of(pattern) == 4
    assert pool.patterns() == {pattern}


def test_a_parameter_seen_in_enough_urls_has_no_more_values_and_allowlisted_ones_need_none() -> (
    None
):
    pool = SamplePool()
    consider(pool, *(f"http://a.example/p?id={n}&sort=asc&variant={n}" for n in range(3)))
    assert "variant" not in pool.values
    pattern = "/p?id&sort&variant"
    assert not pool.ready(pattern, {"sort": RULE.saturation_urls - 1}, RULE, ALLOWLIST)
    assert pool.ready(pattern, {"sort": RULE.saturation_urls}, RULE, ALLOWLIST)


def test_urls_are_counted_per_parameter_over_the_patterns_of_a_shape() -> None:
    seen = urls_per_name([("/p?id&sort", 3), ("/p?id&ref", 1), ("/p?sort&variant", 9)])
    assert seen == {"id": 4, "sort": 12, "ref": 1, "variant": 9}


def test_a_pattern_keeps_a_few_samples_and_more_only_for_new_values() -> None:
    pool = SamplePool()
    consider(pool, "http://a.example/p?id=1", "http://a.example/p?id=1", "http://a.example/p?id=2")
    assert pool.urls() == ("http://a.example/p?id=1", "http://a.example/p?id=2")
    consider(pool, "http://a.example/p?id=3", "http://a.example/p?id=4")
    assert pool.samples_of("/p?id") == 3, "a third value is kept, a fourth is not wanted"
    consider(pool, "http://a.example/p?id=2&variant=1")
    assert pool.samples_of("/p?id&variant") == 1, "a new pattern always gets a sample"
    consider(pool, "http://a.example/p?id=3&variant=2")
    assert pool.samples_of("/p?id&variant") == 2
    consider(pool, "http://a.example/p?id=5&variant=3")
    assert pool.samples_of("/p?id&variant") == 2, "an allowlisted value is not new evidence"


def test_the_pool_is_bounded_but_every_pattern_keeps_a_sample() -> None:
    pool = SamplePool()
    consider(pool, *(f"http://a.example/p?id={n}&q{n}={n}" for n in range(20)))
    assert len(pool.samples) == RULE.max_pool_urls
    consider(pool, "http://a.example/p?id=1&page=2")
    assert len(pool.samples) == RULE.max_pool_urls
    assert pool.samples_of("/p?id&page") == 1
    assert len(pool.values["id"]) == RULE.min_distinct_values
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
    assert all(len(set(d)) == len(d) <= RULE.min_distinct_values for d in pool.values.values())
    assert not ALLOWLIST & pool.values.keys()
    considered = {parse(text).pattern for text in texts}
    assert pool.patterns() <= considered
    if len(considered) <= RULE.max_pool_urls:
        assert pool.patterns() == considered, "room is made without dropping a pattern"
