"""Which URLs of a path shape to keep as probe samples, and when a pattern has the evidence
the learner wants.

Evidence is pooled per path shape, as the learner pools it: tracking parameters appear in
every combination, so patterns multiply while each holds few URLs. A :class:`SamplePool`
keeps, per parameter, the digests of up to ``min_distinct_values`` distinct values, and a
bounded list of sample URLs that bring those values, a few per pattern. A pattern is
*ready* once every parameter that is not allowlisted has that many distinct values, or has
been seen in so many URLs of the shape that it has shown all the values it has.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import xxhash

from miqps.learner import LearnConfig
from miqps.urls import NormalizedURL, split_pattern


@dataclass(frozen=True, slots=True)
class SamplingRule:
    """How much evidence a pattern waits for, and how many sample URLs a shape keeps.

    ``min_distinct_values`` defaults to the learner's ``LearnConfig.samples``: the learner
    tries that many distinct values of a parameter before it settles the parameter, so
    fewer would leave it short and more would never be fetched. ``saturation_urls`` is how
    many URLs of the shape show that a parameter has no more values than it has shown.
    ``max_pool_urls`` bounds the sample URLs of a shape, ``urls_per_pattern`` those of a
    pattern that bring no new value.
    """

    min_distinct_values: int = LearnConfig().samples
    saturation_urls: int = 24
    max_pool_urls: int = 64
    urls_per_pattern: int = 3


def value_digest(value: str) -> int:
    return xxhash.xxh3_64_intdigest(value.encode("utf-8", "surrogatepass"))


def urls_per_name(urls_per_pattern: Iterable[tuple[str, int]]) -> dict[str, int]:
    """URLs seen per parameter name, from the URLs seen per pattern of one shape."""
    counts: dict[str, int] = {}
    for pattern, urls in urls_per_pattern:
        for name in split_pattern(pattern)[1]:
            counts[name] = counts.get(name, 0) + urls
    return counts


@dataclass(slots=True)
class SamplePool:
    """The sample URLs of one path shape and the distinct values they brought."""

    # Parameter name -> digests of its distinct values, at most ``min_distinct_values``.
    values: dict[str, list[int]] = field(default_factory=dict)
    # (pattern, URL), oldest first.
    samples: list[tuple[str, str]] = field(default_factory=list)

    def consider(
        self, pattern: str, url: NormalizedURL, rule: SamplingRule, allowlist: frozenset[str]
    ) -> None:
        """Keep ``url`` as a sample of ``pattern`` if it brings a new value of a parameter,
        or if the pattern has fewer than ``urls_per_pattern`` samples. When the pool is
        full, a pattern without a sample takes the place of one of the richest pattern's."""
        text = url.url
        if any(sample == text for _, sample in self.samples):
            return
        own = self.samples_of(pattern)
        fresh: list[tuple[str, int]] = []
        for name in url.names:
            if name in allowlist:
                continue
            seen = self.values.get(name, ())
            digest = value_digest(url.value_of(name))
            if len(seen) < rule.min_distinct_values and digest not in seen:
                fresh.append((name, digest))
        if own >= rule.urls_per_pattern and not fresh:
            return
        if len(self.samples) >= rule.max_pool_urls:
            if own:
                return
            self._make_room()
        self.samples.append((pattern, text))
        for name, digest in fresh:
            seen_list = self.values.setdefault(name, [])
            if digest not in seen_list:
                seen_list.append(digest)

    def _make_room(self) -> None:
        """Drop one sample of the pattern with the most samples, keeping its first."""
        counts: dict[str, int] = {}
        for key, _ in self.samples:
            counts[key] = counts.get(key, 0) + 1
        richest = max(counts, key=lambda key: counts[key])
        for index in range(len(self.samples) - 1, -1, -1):
            if self.samples[index][0] == richest:
                del self.samples[index]
                return

    def samples_of(self, pattern: str) -> int:
        return sum(1 for key, _ in self.samples if key == pattern)

    def patterns(self) -> set[str]:
        """The patterns that have a sample."""
        return {pattern for pattern, _ in self.samples}

    def urls(self) -> tuple[str, ...]:
        return tuple(url for _, url in self.samples)

    def ready(
        self,
        pattern: str,
        urls_per_name: Mapping[str, int],
        rule: SamplingRule,
        allowlist: frozenset[str],
    ) -> bool:
        """Whether ``pattern`` has a sample and, for every parameter not in ``allowlist``,
        enough distinct values or so many URLs of the shape (``urls_per_name``, see
        :func:`urls_per_name`) that there are no more."""
        if not self.samples_of(pattern):
            return False
        return all(
            name in allowlist
            or len(self.values.get(name, ())) >= rule.min_distinct_values
            or urls_per_name.get(name, 0) >= rule.saturation_urls
            for name in split_pattern(pattern)[1]
        )
