"""The parameter-sprawl report's view model: what a URL list and maps say, as numbers.

:class:`ReportBuilder` reads URLs one at a time (a list of a million streams through it:
it keeps a 64-bit hash per distinct URL and per distinct URL less one parameter, never the
URLs) and :meth:`ReportBuilder.view` gives a :class:`ReportView`, limited to what a page
can show, with a count of everything left out. Nothing here knows HTML:
:mod:`miqps.report_html` renders a view as one offline page, and a live dashboard can serve
the same views.

Every canonical URL and explanation comes from :meth:`Canonicalizer.decide`, the answer of
``miqps canonicalize --json``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import xxhash

from miqps.canonical import Canonicalizer, Decision
from miqps.maps import DomainMap, PatternDecision
from miqps.urls import InvalidURL, parse

MAX_INVALID_EXAMPLES = 20


@dataclass(frozen=True, slots=True)
class Limits:
    """How much of a report a page shows; the rest is counted as hidden."""

    domains: int = 100
    patterns_per_domain: int = 20
    params_per_domain: int = 30
    explained_urls: int = 2000
    plotted_bars: int = 20

    def __post_init__(self) -> None:
        for name in self.__slots__:
            if getattr(self, name) < 0:
                raise ValueError(f"the limit {name} must be 0 or more")


@dataclass(frozen=True, slots=True)
class ParamView:
    """One parameter of one pattern: what the map says and what the list's URLs got."""

    name: str
    map_decision: str
    map_layer: str
    samples: int
    changed: int
    unchanged: int
    inconclusive: int
    default_values: tuple[str, ...]
    applied: tuple[tuple[str, int], ...]
    """``("drop: prior", 12)``: how the canonicalizer decided it for the list's URLs."""


@dataclass(frozen=True, slots=True)
class PatternView:
    key: str
    learned: bool
    urls_in_list: int
    urls_seen: int
    decided_at: str
    verification_samples: int
    verification_changed: int
    verification_inconclusive: int
    restored: tuple[str, ...]
    params: tuple[ParamView, ...]


@dataclass(frozen=True, slots=True)
class SprawlRow:
    """One parameter of a domain: ``variants`` is how many distinct URLs of the list
    disappear once it alone is dropped (the URLs it creates); ``dropped_in`` how many
    distinct URLs lost it in their canonical form."""

    name: str
    urls_with: int
    variants: int
    dropped_in: int


@dataclass(frozen=True, slots=True)
class DomainView:
    domain: str
    map_version: int
    updated_at: str
    urls: int
    distinct_urls: int
    canonical_urls: int
    learned_urls: int
    fetches: int
    patterns: tuple[PatternView, ...]
    hidden_patterns: int
    sprawl: tuple[SprawlRow, ...]
    hidden_params: int

    @property
    def duplicates_saved(self) -> int:
        return self.distinct_urls - self.canonical_urls


@dataclass(frozen=True, slots=True)
class Bar:
    label: str
    value: int
    kind: str


@dataclass(frozen=True, slots=True)
class ReportView:
    lines: int
    blank: int
    invalid: int
    invalid_examples: tuple[str, ...]
    urls: int
    distinct_urls: int
    canonical_urls: int
    learned_urls: int
    fetches: int
    domain_count: int
    domains: tuple[DomainView, ...]
    hidden_domains: int
    explanations: tuple[dict[str, Any], ...]
    hidden_explanations: int
    variants_by_param: tuple[Bar, ...]
    saved_and_fetches: tuple[tuple[str, int, int], ...]

    @property
    def duplicates_saved(self) -> int:
        return self.distinct_urls - self.canonical_urls


def estimated_fetches(domain_map: DomainMap) -> int:
    """The fetches a map's evidence records: one per comparison of a parameter (counted
    once per path shape, as the learner pools a shape's evidence and copies it into each
    pattern) and one per verification sample. Group tests make it an upper bound for the
    comparisons; refetches to learn a page's noise are not recorded, so not counted."""
    per_shape: dict[tuple[str, str], int] = {}
    verification = 0
    for key, decision in domain_map.patterns.items():
        shape = key.partition("?")[0]
        for name, evidence in decision.params.items():
            comparisons = evidence.conclusive + evidence.inconclusive
            per_shape[shape, name] = max(per_shape.get((shape, name), 0), comparisons)
        verification += decision.verification.samples + decision.verification.inconclusive
    return sum(per_shape.values()) + verification


def _digest(text: str) -> int:
    return xxhash.xxh3_64_intdigest(text.encode("utf-8", "surrogatepass"))


@dataclass(slots=True)
class _DomainTally:
    lines: int = 0
    distinct: set[int] = field(default_factory=set)
    canonical: set[int] = field(default_factory=set)
    learned: int = 0
    urls_with: Counter[str] = field(default_factory=Counter)
    without: defaultdict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    dropped: Counter[str] = field(default_factory=Counter)
    pattern_urls: Counter[str] = field(default_factory=Counter)
    applied: defaultdict[tuple[str, str], Counter[str]] = field(
        default_factory=lambda: defaultdict(Counter)
    )

    def variants(self, name: str) -> int:
        """How many distinct URLs disappear when ``name`` is dropped from every URL: those
        holding it, less what they become that is not already a URL of the list."""
        distinct = self.distinct
        new = sum(1 for digest in self.without[name] if digest not in distinct)
        return self.urls_with[name] - new


class ReportBuilder:
    """Feed it URL texts with :meth:`add` (or :meth:`add_lines`), then take :meth:`view`."""

    def __init__(
        self,
        canonicalizer: Canonicalizer,
        maps: Mapping[str, DomainMap],
        limits: Limits | None = None,
    ) -> None:
        self._canonicalizer = canonicalizer
        self._maps = maps
        self._limits = limits or Limits()
        self._tallies: defaultdict[str, _DomainTally] = defaultdict(_DomainTally)
        self._lines = self._blank = self._invalid = 0
        self._invalid_examples: list[str] = []
        # Explained first: one URL per pattern, then others in list order, both capped.
        self._first_of_pattern: dict[str, dict[str, Any]] = {}
        self._more_explained: list[dict[str, Any]] = []
        self._unexplained = 0

    def add_lines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.add(line)

    def add(self, line: str) -> None:
        """One line of a URL list: blank and invalid lines are counted, not lost."""
        self._lines += 1
        text = line.strip()
        if not text:
            self._blank += 1
            return
        try:
            url = parse(text)
        except InvalidURL as error:
            self._invalid += 1
            if len(self._invalid_examples) < MAX_INVALID_EXAMPLES:
                self._invalid_examples.append(f"line {self._lines}: {error.reason}")
            return
        tally = self._tallies[url.host]
        tally.lines += 1
        normalized = url.url
        digest = _digest(normalized)
        if digest in tally.distinct:
            return
        tally.distinct.add(digest)
        decision = self._canonicalizer.decide(url, original=text)
        tally.canonical.add(_digest(decision.canonical_url))
        tally.pattern_urls[decision.pattern] += 1
        if decision.status == "learned":
            tally.learned += 1
        dropped = frozenset(decision.dropped)
        for name, layer in decision.layers.items():
            verdict = "drop" if name in dropped else "keep"
            tally.urls_with[name] += 1
            tally.without[name].add(_digest(url.without((name,))))
            tally.dropped[name] += name in dropped
            tally.applied[decision.pattern, name][f"{verdict}: {layer}"] += 1
        self._remember_explanation(decision)

    def _remember_explanation(self, decision: Decision) -> None:
        limit = self._limits.explained_urls
        pattern = decision.pattern
        if pattern not in self._first_of_pattern and len(self._first_of_pattern) < limit:
            self._first_of_pattern[pattern] = decision.to_json()
        elif len(self._more_explained) < limit:
            self._more_explained.append(decision.to_json())
        else:
            self._unexplained += 1

    def view(self) -> ReportView:
        """The report; full views only of the domains shown, sums over every domain."""
        limits = self._limits
        tallies = dict(self._tallies)
        for domain in self._maps.keys() - tallies.keys():
            tallies[domain] = _DomainTally()
        fetches = {
            domain: estimated_fetches(domain_map) for domain, domain_map in self._maps.items()
        }
        order = sorted(
            tallies,
            key=lambda domain: (-len(tallies[domain].distinct), -fetches.get(domain, 0), domain),
        )

        def saved(domain: str) -> int:
            return len(tallies[domain].distinct) - len(tallies[domain].canonical)

        by_saved = sorted(
            tallies, key=lambda domain: (-saved(domain), -fetches.get(domain, 0), domain)
        )
        firsts = list(self._first_of_pattern.values())
        more = self._more_explained[: max(limits.explained_urls - len(firsts), 0)]
        return ReportView(
            lines=self._lines,
            blank=self._blank,
            invalid=self._invalid,
            invalid_examples=tuple(self._invalid_examples),
            urls=sum(tally.lines for tally in tallies.values()),
            distinct_urls=sum(len(tally.distinct) for tally in tallies.values()),
            canonical_urls=sum(len(tally.canonical) for tally in tallies.values()),
            learned_urls=sum(tally.learned for tally in tallies.values()),
            fetches=sum(fetches.values()),
            domain_count=len(tallies),
            domains=tuple(
                self._domain_view(domain, tallies[domain], fetches.get(domain, 0))
                for domain in order[: limits.domains]
            ),
            hidden_domains=max(len(order) - limits.domains, 0),
            explanations=(*firsts, *more),
            hidden_explanations=self._unexplained + len(self._more_explained) - len(more),
            variants_by_param=self._variants_by_param(),
            saved_and_fetches=tuple(
                (domain, saved(domain), fetches.get(domain, 0))
                for domain in by_saved[: limits.plotted_bars]
            ),
        )

    def domain_view(self, domain: str) -> DomainView:
        """One domain's full view, whether or not :meth:`view` would list it: a page of one
        domain costs its own tally and map, not every domain's."""
        domain_map = self._maps.get(domain)
        return self._domain_view(
            domain,
            self._tallies.get(domain) or _DomainTally(),
            estimated_fetches(domain_map) if domain_map else 0,
        )

    def duplicates_saved(self) -> int:
        """Distinct URLs read less the canonical URLs they became, over every domain."""
        return sum(len(tally.distinct) - len(tally.canonical) for tally in self._tallies.values())

    def _variants_by_param(self) -> tuple[Bar, ...]:
        bars = [
            Bar(
                f"{domain} ?{name}",
                tally.variants(name),
                "dropped" if tally.dropped[name] else "kept",
            )
            for domain, tally in self._tallies.items()
            for name in tally.urls_with
        ]
        bars.sort(key=lambda bar: (-bar.value, bar.label))
        return tuple(bars[: self._limits.plotted_bars])

    def _domain_view(self, domain: str, tally: _DomainTally, fetches: int) -> DomainView:
        limits = self._limits
        domain_map = self._maps.get(domain)
        map_patterns = domain_map.patterns if domain_map else {}
        keys = sorted(
            tally.pattern_urls.keys() | map_patterns.keys(),
            key=lambda key: (-tally.pattern_urls[key], key),
        )
        sprawl = sorted(
            (
                SprawlRow(name, count, tally.variants(name), tally.dropped[name])
                for name, count in tally.urls_with.items()
            ),
            key=lambda row: (-row.variants, -row.urls_with, row.name),
        )
        return DomainView(
            domain=domain,
            map_version=domain_map.version if domain_map else 0,
            updated_at=domain_map.updated_at if domain_map else "",
            urls=tally.lines,
            distinct_urls=len(tally.distinct),
            canonical_urls=len(tally.canonical),
            learned_urls=tally.learned,
            fetches=fetches,
            patterns=tuple(
                _pattern_view(key, map_patterns.get(key), tally)
                for key in keys[: limits.patterns_per_domain]
            ),
            hidden_patterns=max(len(keys) - limits.patterns_per_domain, 0),
            sprawl=tuple(sprawl[: limits.params_per_domain]),
            hidden_params=max(len(sprawl) - limits.params_per_domain, 0),
        )


def _pattern_view(key: str, decision: PatternDecision | None, tally: _DomainTally) -> PatternView:
    names = sorted(key.partition("?")[2].split("&")) if "?" in key else []
    params = []
    for name in filter(None, names):
        evidence = decision.params.get(name) if decision else None
        applied = tally.applied.get((key, name), Counter())
        params.append(
            ParamView(
                name=name,
                map_decision=evidence.decision if evidence else "",
                map_layer=str(evidence.layer) if evidence else "",
                samples=evidence.samples if evidence else 0,
                changed=evidence.changed if evidence else 0,
                unchanged=evidence.unchanged if evidence else 0,
                inconclusive=evidence.inconclusive if evidence else 0,
                default_values=tuple(evidence.default_values) if evidence else (),
                applied=tuple(sorted(applied.items(), key=lambda item: (-item[1], item[0]))),
            )
        )
    verification = decision.verification if decision else None
    return PatternView(
        key=key,
        learned=decision is not None,
        urls_in_list=tally.pattern_urls[key],
        urls_seen=decision.urls_seen if decision else 0,
        decided_at=decision.decided_at if decision else "",
        verification_samples=verification.samples if verification else 0,
        verification_changed=verification.changed if verification else 0,
        verification_inconclusive=verification.inconclusive if verification else 0,
        restored=tuple(verification.restored) if verification else (),
        params=tuple(params),
    )
