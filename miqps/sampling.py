"""Which URLs of a path shape to keep as probe samples, and when a pattern has the evidence
the learner wants.

Evidence is pooled per path shape, as the learner pools it: tracking parameters appear in
every combination, so patterns multiply while each holds few URLs. The learner decides a
parameter on distinct *items* (:func:`miqps.learner.item_key`: the path and the values of
the other parameters), so a :class:`SamplePool` keeps, per parameter, the digests of the
distinct items its samples bring, up to what the learner wants (``LearnConfig.items_needed``:
more for a parameter whose values look like a choice among a few options), a few of its
distinct values (enough to tell such a parameter), and a bounded list of sample URLs that
bring them, a few per pattern. A pattern is *ready* once every parameter that is not
allowlisted has the items the learner wants, or has been seen in so many URLs of the shape,
for the items it showed, that it has shown all the items it has.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import xxhash

from miqps.learner import LearnConfig, item_key
from miqps.urls import NormalizedURL, split_pattern


@dataclass(frozen=True, slots=True)
class SamplingRule:
    """How much evidence a pattern waits for, and how many sample URLs a shape keeps.

    A parameter waits for as many distinct items as the learner wants before it drops it
    (``LearnConfig.items_needed``), so fewer would leave it short and more would never be
    fetched: ``min_distinct_values`` (the learner's ``samples``), or ``learn.choice_items``
    when its values look like a choice among a few options (``LearnConfig.choice_like``).
    It has shown all its items once it was seen in ``saturation_urls`` URLs of the shape,
    and in ``urls_per_item`` times as many URLs as it showed items. ``max_pool_urls``
    bounds the sample URLs of a shape, ``urls_per_pattern`` those of a pattern that bring
    no new item.
    """

    min_distinct_values: int = LearnConfig().samples
    saturation_urls: int = 24
    max_pool_urls: int = 64
    urls_per_pattern: int = 3
    urls_per_item: int = 4
    learn: LearnConfig = field(default_factory=LearnConfig)

    def items_wanted(self, values: int, carriers: int | None = None) -> int:
        """The distinct items a parameter with ``values`` distinct values (over ``carriers``
        URLs, when known) waits for: a choice-like one's, while it may be one."""
        choice = values <= self.learn.choice_values
        if carriers is not None:
            choice = self.learn.choice_like(values, carriers)
        return self.learn.choice_items if choice else self.min_distinct_values


def value_digest(value: str) -> int:
    return xxhash.xxh3_64_intdigest(value.encode("utf-8", "surrogatepass"))


def item_digest(url: NormalizedURL, name: str) -> int:
    """The digest of the item ``url`` shows for ``name`` (:func:`miqps.learner.item_key`,
    before any name is known to be neutral)."""
    path, others = item_key(url, name)
    # A normalized URL carries no NUL: it is percent-encoded.
    return value_digest("\0".join((path, *others)))


def urls_per_name(urls_per_pattern: Iterable[tuple[str, int]]) -> dict[str, int]:
    """URLs seen per parameter name, from the URLs seen per pattern of one shape."""
    counts: dict[str, int] = {}
    for pattern, urls in urls_per_pattern:
        for name in split_pattern(pattern)[1]:
            counts[name] = counts.get(name, 0) + urls
    return counts


@dataclass(slots=True)
class SamplePool:
    """The sample URLs of one path shape and the distinct values and items they brought."""

    # Parameter name -> digests of its distinct values, at most the learner's
    # ``choice_values`` + 1 (enough to tell whether they look like a choice).
    values: dict[str, list[int]] = field(default_factory=dict)
    # (pattern, URL), oldest first.
    samples: list[tuple[str, str]] = field(default_factory=list)
    # Parameter name -> digests of the distinct items it was sampled on, at most the items
    # the learner wants of it. A record written before items were kept has none.
    items: dict[str, list[int]] = field(default_factory=dict)

    def consider(
        self, pattern: str, url: NormalizedURL, rule: SamplingRule, allowlist: frozenset[str]
    ) -> None:
        """Keep ``url`` as a sample of ``pattern`` if it brings a new item or value of a
        parameter, or if the pattern has fewer than ``urls_per_pattern`` samples. When the
        pool is full, a pattern without a sample takes the place of one of the richest
        pattern's."""
        text = url.url
        if any(sample == text for _, sample in self.samples):
            return
        own = self.samples_of(pattern)
        value_limit = rule.learn.choice_values + 1
        fresh_values: list[tuple[str, int]] = []
        fresh_items: list[tuple[str, int]] = []
        for name in url.names:
            if name in allowlist:
                continue
            seen = self.values.get(name, ())
            values = len(seen)
            if values < value_limit:
                digest = value_digest(url.value_of(name))
                if digest not in seen:
                    fresh_values.append((name, digest))
                    values += 1
            known = self.items.get(name, ())
            if len(known) < rule.items_wanted(values):
                digest = item_digest(url, name)
                if digest not in known:
                    fresh_items.append((name, digest))
        if own >= rule.urls_per_pattern and not fresh_values and not fresh_items:
            return
        if len(self.samples) >= rule.max_pool_urls:
            if own:
                return
            self._make_room()
        self.samples.append((pattern, text))
        for name, digest in fresh_values:
            self.values.setdefault(name, []).append(digest)
        for name, digest in fresh_items:
            self.items.setdefault(name, []).append(digest)

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
        the items the learner wants, or so many URLs of the shape (``urls_per_name``, see
        :func:`urls_per_name`) for the items it showed that there are no more."""
        if not self.samples_of(pattern):
            return False
        return all(
            name in allowlist or self._has_enough(name, urls_per_name.get(name, 0), rule)
            for name in split_pattern(pattern)[1]
        )

    def _has_enough(self, name: str, carriers: int, rule: SamplingRule) -> bool:
        items = len(self.items.get(name, ()))
        if items >= rule.items_wanted(len(self.values.get(name, ())), carriers):
            return True
        return carriers >= max(rule.saturation_urls, rule.urls_per_item * items)
