"""The pattern-stats agent's hand-written sample reader (streams.messages.fastread) reads
what the typed reader reads, and rejects what it rejects."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from miqps.urls import split_pattern
from streams.messages import (
    BadInput,
    CountSample,
    DueSample,
    UrlSample,
    read_observation,
    read_sample,
    sample_to_bytes,
)

names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
counts = st.integers(min_value=0, max_value=2**40)
patterns = st.from_regex(r"/[a-z*/]{0,8}\?[a-z&]{0,12}", fullmatch=True)
domains = st.from_regex(r"[a-z]{1,10}\.example", fullmatch=True)


@pytest.mark.parametrize(
    ("item", "reason"),
    [
        ([], "pattern sample without a known kind"),
        ({"kind": "other", "domain": "a.example"}, "pattern sample without a known kind"),
        ({"kind": "due", "domain": "", "shape": "/p"}, "pattern sample with an empty domain"),
        (
            {"kind": "url", "domain": "a.example", "pattern": "/p?id", "count": 1, "basis": ""},
            "a url pattern sample without url",
        ),
        (
            {"kind": "count", "domain": "a.example", "pattern": "/p?id", "count": "1", "basis": ""},
            "a count pattern sample whose count is not of type int",
        ),
    ],
)
def test_bad_sample_is_bad_input(item: Any, reason: str) -> None:
    with pytest.raises(BadInput) as caught:
        read_sample(item)
    assert caught.value.reason == reason
    with pytest.raises(BadInput):
        read_observation(item)


sample_urls = st.from_regex(r"http://[a-z]{1,8}\.example/[a-z]{0,4}\?id=[0-9]{1,3}", fullmatch=True)
valid_samples = st.one_of(
    st.builds(
        UrlSample, domain=domains, pattern=patterns, url=sample_urls, count=counts, basis=names
    ),
    st.builds(CountSample, domain=domains, pattern=patterns, count=counts, basis=names),
    st.builds(DueSample, domain=domains, shape=st.from_regex(r"/[a-z*/]{0,8}", fullmatch=True)),
)


@given(valid_samples)
def test_the_agents_reader_of_a_sample_reads_what_the_typed_reader_reads(
    sample: UrlSample | CountSample | DueSample,
) -> None:
    item = orjson.loads(sample_to_bytes(sample))
    assert read_sample(item) == sample
    observation = read_observation(item)
    assert observation.domain == sample.domain
    if isinstance(sample, DueSample):
        assert (observation.shape, observation.pattern) == (sample.shape, "")
        return
    assert (observation.pattern, observation.shape) == (
        sample.pattern,
        split_pattern(sample.pattern)[0],
    )
    assert (observation.count, observation.basis) == (sample.count, sample.basis)
    url = observation.url.url if observation.url is not None else None
    assert url == (sample.url if isinstance(sample, UrlSample) else None)
