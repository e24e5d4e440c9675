"""The crawl the stream-observations benchmark sends (:mod:`testkit.observations`) and its
per-pass figures (:func:`testkit.quality.stream_pass_figures`), without a broker: the
observations are what the stream reads, and a canonical URL of two pages is a false merge."""

from __future__ import annotations

from typing import Any

import orjson

from miqps.observations import read_observation
from simweb.corpus import generate_corpus
from simweb.server import SimWeb
from simweb.sites import build_sites
from testkit.observations import crawl_observations
from testkit.quality import stream_pass_figures
from tests.streams.support import assert_valid


def test_crawl_sends_each_page_as_an_observation_keyed_by_its_domain() -> None:
    sites = build_sites("tuning", 2, seed=3)
    corpus = generate_corpus(sites, 40, seed=3)
    urls = sorted({item.url for item in corpus})[:30]
    with SimWeb(sites, seed=3, rate_limit_per_second=0, flaky_rate=0) as web:
        records = crawl_observations(web, urls)
        assert web.requests_total() >= len(urls)
    assert len(records) == len(urls)
    redirected = 0
    for (key, value), url in zip(records, urls, strict=True):
        record = orjson.loads(value)
        assert_valid("observation", record)
        assert record["url"] == url
        assert key.decode() == url.split("/")[2]
        redirected += record["redirects"] > 0
        read_observation(value, max_bytes=4 << 20)
    assert redirected, "the tuning shop's tracking redirect is followed and said"


def test_pass_figures_count_learned_urls_and_canonical_urls_of_two_pages() -> None:
    def output(url: str, canonical: str, status: str, dropped: list[str]) -> dict[str, Any]:
        return {
            "url": url,
            "canonical_url": canonical,
            "status": status,
            "kept": ["id"],
            "dropped": dropped,
        }

    docs = [
        output("http://s/p?id=1&ref=a", "http://s/p?id=1", "learned", ["ref"]),
        output("http://s/p?id=1&size=l", "http://s/p?id=1", "learned", ["size"]),
        output("http://s/p?id=2&ref=b", "http://s/p?id=2&ref=b", "provisional", []),
        output("http://s/p?id=2", "http://s/p?id=2", "provisional", []),
    ]
    truth = {
        "http://s/p?id=1&ref=a": "item1",
        "http://s/p?id=1&size=l": "item1 size l",
        "http://s/p?id=2&ref=b": "item2",
        "http://s/p?id=2": "item2",
    }
    figures, merged = stream_pass_figures(docs, truth)
    assert figures.learned == 2 / 4
    assert (figures.raw, figures.canonical, figures.ideal) == (4, 3, 3)
    assert figures.false_merges == 1
    assert merged == ["http://s/p?id=1"]
