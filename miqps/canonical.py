"""Canonicalization with the static and learned layers.

A parameter is kept if any layer keeps it: a platform allowlist, the learned non-neutral
set, or the conservative default for anything unlearned. The cold-start prior may drop
``utm_*``, ``gclid``, ``fbclid``, ``msclkid``, ``dclid`` and the platform session ids
``;jsessionid``, ``jsessionid`` and ``PHPSESSID`` where nothing was learned about them: in
unlearned patterns, and in learned ones where they have no conclusive sample (layer
``insufficient-evidence``: a rare pattern, a route whose every fetch timed out). It never
drops a parameter that the domain's learned evidence keeps.

Dropping parameters can move a URL into another learned pattern, which may drop more; the
rules are re-applied until they stop changing the URL, so canonicalizing a canonical URL
changes nothing. Every path (the batched fast path, and :meth:`Canonicalizer.decide`, which
the stream's live maps call too) follows :func:`settle`, the one definition.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import partial, wraps
from importlib import resources
from itertools import count, islice, pairwise
from operator import itemgetter
from os import PathLike
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar, cast

import can_ada
import orjson

from miqps.maps import (
    SCHEMA_ID,
    DecisionSummary,
    DomainMap,
    Layer,
    dropping_summaries,
    timestamp_seconds,
)
from miqps.native import (
    CanonicalizerPath,
    canonicalizer_path,
    compiled_classes,
    compiled_map_walks,
)
from miqps.urls import (
    MAX_URL_BYTES,
    InvalidURL,
    NormalizedURL,
    components,
    normalize_percent_encoding,
    parse,
    path_shape,
    pattern_key,
    split_matrix,
    split_pairs,
    split_pattern,
)

if TYPE_CHECKING:
    from miqps_native import Core, Miss

    from miqps.mapstore import MapSource


@dataclass(frozen=True, slots=True)
class _Native:
    """The compiled path of one canonicalizer: its core, and the class of a miss."""

    core: Core
    miss: type[Miss]


@dataclass(frozen=True, slots=True)
class StaticLayers:
    allowlist: frozenset[str]
    prior_exact: frozenset[str]
    prior_prefixes: tuple[str, ...]

    @classmethod
    def default(cls) -> StaticLayers:
        text = resources.files("miqps").joinpath("data/static_layers.json").read_text("utf-8")
        data: dict[str, Any] = json.loads(text)
        allowlist = frozenset(name for names in data["allowlists"].values() for name in names)
        return cls(
            allowlist=allowlist,
            prior_exact=frozenset(data["prior_drop_exact"]),
            prior_prefixes=tuple(data["prior_drop_prefixes"]),
        )

    def prior_drops(self, name: str) -> bool:
        return name in self.prior_exact or name.startswith(self.prior_prefixes)


class Status(StrEnum):
    """Whether the domain's map has a decision for a URL's own pattern."""

    LEARNED = "learned"
    PROVISIONAL = "provisional"


class Decision(NamedTuple):
    """How a URL was canonicalized. ``layers`` says which layer decided each parameter;
    it is empty when the decision was made with ``with_layers=False`` (the stream's
    per-URL path, which does not publish it). A named tuple: the stream makes one per
    URL, and it is built several times faster than a frozen dataclass."""

    url: str
    canonical_url: str
    domain: str
    pattern: str
    kept: tuple[str, ...]
    dropped: tuple[str, ...]
    layers: dict[str, str]
    status: Status
    map_version: int
    items: Mapping[str, int] = MappingProxyType({})
    """Per parameter dropped on learned evidence: the distinct items it left unchanged
    (empty, like ``layers``, without ``with_layers``)."""
    undecided: str | None = None
    """For a provisional URL whose pattern the map records as undecided, the cause (an
    :class:`~miqps.update.Undecided` name such as ``disallowed``); None, like ``layers``,
    without ``with_layers``."""
    removed_as_default: tuple[str, ...] = ()
    """The dropped parameters left out for holding a confirmed default value
    (``currency=USD``), not for having no effect (empty, like ``layers``, without
    ``with_layers``)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "canonical_url": self.canonical_url,
            "domain": self.domain,
            "pattern": self.pattern,
            "kept": list(self.kept),
            "dropped": list(self.dropped),
            "layers": self.layers,
            "status": self.status,
            "map_version": self.map_version,
            "items": dict(self.items),
            "undecided": self.undecided,
            "removed_as_default": list(self.removed_as_default),
        }


_CACHE_SIZE = 1 << 16
_MAX_STARS = 16
_STARS = tuple("/*" * depth for depth in range(_MAX_STARS))

# A plan says which of a URL's pairs to keep, the pairs being sorted as plain strings: an
# ``operator.itemgetter`` of their indexes (one index gives the kept pair, several a tuple
# of them), or one of the markers below, told apart by identity. Plain string order is
# name order but for a name that repeats (the pairs must then keep their relative order)
# or one that is a prefix of another followed by a character below "=" (``a=1`` sorts
# after ``a.b=2``): for those the plan is _IRREGULAR and the URL takes the general path.
# A plan keeps what every round of :func:`settle` keeps, as far as names decide it. Where
# values do (confirmed defaults), an eliding plan (:func:`_eliding_plan`) returns the pairs
# left as a :class:`_Moved` list when the URL moves to another pattern, which the caller
# looks up in turn.
_Plan = Callable[[Sequence[str]], Any]
_IRREGULAR: _Plan = itemgetter(slice(0, 0))
_KEEP_ALL: _Plan = itemgetter(slice(None))
_KEEP_NONE: _Plan = itemgetter(slice(0, 0))


def _plan_for(kept: Sequence[int], count: int) -> _Plan:
    if not kept:
        return _KEEP_NONE
    if len(kept) == count:
        return _KEEP_ALL
    return itemgetter(*kept)


class _PlanSpec(NamedTuple):
    """A plan as data, for the compiled per-URL path as much as for this one: the indexes
    of the pairs to keep among ``size`` (None when the pairs' string order is not their
    name order), and for a pattern with confirmed default values, those ``name=value``
    pairs and the key (``then``) of the kept pairs' own plan when that is another one."""

    kept: tuple[int, ...] | None
    size: int
    defaults: frozenset[str] = frozenset()
    then: str | None = None
    then_names: tuple[str, ...] = ()


# Which table a compiled plan belongs to: a new number for every table started.
_TABLES = count(1)
# Misses one text may meet on the compiled path (its domain's map, a plan, then the plans
# it leads to).
_MAX_MISSES = 16
DEFAULT_CACHE_DOMAINS = 16384
"""Maps a canonicalizer that reads them on demand holds at most."""
# Domains remembered as having no map, before the set starts over.
_ABSENT_SIZE = 1 << 18


def _misses(
    native: _Native, answers: Sequence[bytes | str | Miss | None], others: list[int]
) -> list[tuple[int, Miss]]:
    """The misses among the compiled path's ``answers`` at ``others``, with their index."""
    miss = native.miss
    return [(index, answer) for index in others if isinstance(answer := answers[index], miss)]


class _PatternSplit(NamedTuple):
    """A learned pattern's names to keep, and its names sorted into kept and dropped."""

    keep: frozenset[str]
    kept: tuple[str, ...]
    dropped: tuple[str, ...]


class _CompiledDomain:
    """One domain's map reduced to what the per-URL path needs.

    ``plans`` maps ``shape?names`` (the names of the pairs in string order) to the indexes
    of the pairs to keep in that order, filled as keys are seen; all of it is rebuilt on
    every update. ``splits`` gives, per learned pattern, the kept and dropped names of a
    URL that the first round settles, made when a URL of the pattern first needs them.
    ``learned`` names the learned patterns.

    The map itself is held as an object, as its JSON ``document`` (a fraction of the memory
    of the object graph, decoded whenever :attr:`map` is read), or, for a map read on
    demand from a source that keeps facts records, as that record alone, the document
    being read again from the source (``read_document``) when :attr:`map` is.
    """

    __slots__ = (
        "_map",
        "_read_document",
        "document",
        "learned",
        "plans",
        "record",
        "rules",
        "splits",
        "table",
        "undecided",
        "version",
    )

    def __init__(
        self,
        facts: MapFacts,
        layers: StaticLayers,
        use_prior: bool,
        domain_map: DomainMap | None = None,
        document: bytes | None = None,
        *,
        record: bytes | None = None,
        read_document: Callable[[], bytes | None] | None = None,
    ) -> None:
        assert domain_map is not None or document is not None or record is not None
        self._map = domain_map if document is None and record is None else None
        self.document = document
        self.record = record
        self._read_document = read_document
        self.version = facts.version
        self.undecided = facts.undecided
        rules = self.rules = DomainRules.of_facts(facts, layers, use_prior)
        self.plans: dict[str, _Plan] = {}
        self.table = next(_TABLES)
        self.learned = rules.learned
        self.splits: Mapping[str, _PatternSplit] = _PerPattern(
            self.learned, partial(_split_of, facts.patterns, rules.keep)
        )

    @property
    def map(self) -> DomainMap:
        if self._map is not None:
            return self._map
        document = self.document
        if document is None:
            assert self._read_document is not None
            document = self._read_document()
            if document is None:
                raise LookupError("the map was removed from its source")
        return DomainMap.from_json(orjson.loads(document))

    @property
    def held_map(self) -> DomainMap | None:
        """The map, when it is held rather than its document."""
        return self._map

    def facts(self) -> MapFacts:
        if self._map is not None:
            return MapFacts.of_map(self._map)
        if self.record is not None:
            return MapFacts.of_record(self.record)
        assert self.document is not None
        return MapFacts.of_document(orjson.loads(self.document))


_Value = TypeVar("_Value")


class _PerPattern(Mapping[str, _Value]):
    """A value per pattern of ``keys``, made by ``make`` when first asked for and then
    remembered: a URL meets few of a map's patterns."""

    __slots__ = ("_made", "_make", "pattern_keys")

    def __init__(
        self,
        keys: frozenset[str],
        make: Callable[[str], _Value],
        made: dict[str, _Value] | None = None,
    ) -> None:
        self.pattern_keys = keys
        self._make = make
        self._made: dict[str, _Value] = made if made is not None else {}

    def __getitem__(self, key: str) -> _Value:
        made = self._made.get(key)
        if made is None:
            if key not in self.pattern_keys:
                raise KeyError(key)
            made = self._made[key] = self._make(key)
        return made

    def get(self, key: str, default: Any = None) -> Any:
        made = self._made.get(key)
        if made is not None:
            return made
        return self[key] if key in self.pattern_keys else default

    def __contains__(self, key: object) -> bool:
        return key in self.pattern_keys

    def __iter__(self) -> Iterator[str]:
        return iter(self.pattern_keys)

    def __len__(self) -> int:
        return len(self.pattern_keys)


def _split_of(
    patterns: Mapping[str, PatternFacts], keep: Mapping[str, frozenset[str]], key: str
) -> _PatternSplit:
    kept = keep[key]
    pattern = patterns[key]
    names = pattern.kept | pattern.dropped
    return _PatternSplit(kept, tuple(sorted(kept)), tuple(sorted(names - kept)))


_Method = TypeVar("_Method", bound=Callable[..., Any])


def _then_make_room(method: _Method) -> _Method:
    """``method``, then, with maps read on demand, back to ``cache_domains`` of them: a
    call may hold up to a quarter more while it answers (see :meth:`Canonicalizer._miss_parts`),
    so that it does not read a map it met again before it is done with it."""

    @wraps(method)
    def call(self: Canonicalizer, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        finally:
            domains = self._domains
            if isinstance(domains, _DomainsOnDemand) and len(domains) > self._cache_domains:
                self._make_room(domains)

    return cast("_Method", call)


class Closable(Protocol):
    def close(self) -> None: ...


class _DomainsOnDemand(dict[str, _CompiledDomain]):
    """The maps a canonicalizer holds when it reads them from a :class:`MapSource`:
    :meth:`get` of a domain it does not hold loads the domain's map (``load``, told the
    pattern ``wanted`` of the URL that needs it when known). ``used`` names the domains
    looked up since the last eviction (the compiled path marks its own)."""

    __slots__ = ("_load", "used")

    def __init__(self, load: Callable[[str, str | None], _CompiledDomain | None]) -> None:
        super().__init__()
        self._load = load
        self.used: set[str] = set()

    def get(  # type: ignore[override]
        self, domain: str, default: None = None, *, wanted: str | None = None
    ) -> _CompiledDomain | None:
        compiled = dict.get(self, domain)
        if compiled is not None:
            self.used.add(domain)
            return compiled
        return self._load(domain, wanted)


class DomainRules:
    """What a domain's map says per pattern, once the static layers are applied: the
    names to keep (the map's kept ones and allowlisted ones, minus what the cold-start
    prior drops for lack of evidence) and the ``name=value`` pairs to leave out as
    confirmed defaults (empty for a pattern without any). The one definition of the
    canonical form, for the command line and for the stream workers alike. Each pattern's
    is made when first asked for."""

    __slots__ = ("default_pairs", "keep", "learned", "learned_keep")

    def __init__(self, domain_map: DomainMap, layers: StaticLayers, use_prior: bool) -> None:
        self._apply(MapFacts.of_map(domain_map), layers, use_prior)

    @classmethod
    def of_facts(cls, facts: MapFacts, layers: StaticLayers, use_prior: bool) -> DomainRules:
        rules = cls.__new__(cls)
        rules._apply(facts, layers, use_prior)
        return rules

    def _apply(self, facts: MapFacts, layers: StaticLayers, use_prior: bool) -> None:
        self.learned_keep = facts.learned_keep
        patterns = facts.patterns
        keys = self.learned = (
            patterns.pattern_keys if isinstance(patterns, _PerPattern) else frozenset(patterns)
        )
        self.keep: Mapping[str, frozenset[str]] = _PerPattern(
            keys, partial(_keep_of, facts.patterns, layers, use_prior, facts.learned_keep)
        )
        self.default_pairs: Mapping[str, frozenset[str]] = _PerPattern(
            keys, partial(_default_pairs_of, facts.patterns, self.keep)
        )


def _keep_of(
    patterns: Mapping[str, PatternFacts],
    layers: StaticLayers,
    use_prior: bool,
    learned_keep: frozenset[str],
    key: str,
) -> frozenset[str]:
    pattern = patterns[key]
    keep = pattern.kept | (layers.allowlist & (pattern.kept | pattern.dropped))
    unsure = keep & pattern.without_evidence
    return keep - (unsure - unlearned_keep(unsure, layers, use_prior, learned_keep))


def _default_pairs_of(
    patterns: Mapping[str, PatternFacts], keep: Mapping[str, frozenset[str]], key: str
) -> frozenset[str]:
    kept = keep[key]
    return frozenset(
        value for name, values in patterns[key].defaults.items() if name in kept for value in values
    )


class PatternFacts(NamedTuple):
    """What the canonical form reads of one pattern's decision: its kept and dropped
    names, the names whose evidence was too thin to decide on, each name's confirmed
    default values (only names that have some), when it was decided, and the URLs seen
    of it then (what an audit request says of the decision)."""

    kept: frozenset[str]
    dropped: frozenset[str]
    without_evidence: frozenset[str]
    defaults: dict[str, Sequence[str]]
    decided_at: str
    urls_seen: int = 0


class MapFacts(NamedTuple):
    """What the canonical form reads of a domain's map, without its evidence: read from
    a :class:`DomainMap`, or straight from its JSON document, which spares a map read on
    demand the building of an object per parameter (most of what reading one costs)."""

    version: int
    undecided: dict[str, str]
    patterns: Mapping[str, PatternFacts]
    learned_keep: frozenset[str]
    """The names the domain learned keep pages apart somewhere."""
    compiled_summary: CompiledSummary | None = None
    """What the compiled path needs of every pattern, when it was read with the facts
    (:meth:`of_record`); else made from :attr:`patterns`."""

    def summary(self) -> CompiledSummary:
        if self.compiled_summary is not None:
            return self.compiled_summary
        return _compiled_summary(
            (key, pattern.kept, pattern.dropped, pattern.decided_at)
            for key, pattern in self.patterns.items()
        )

    def record(self) -> bytes:
        """These facts as a facts record (:meth:`of_record`): a few hundred bytes a map,
        where its document holds kilobytes of evidence."""
        return orjson.dumps(
            [
                _RECORD_FORMAT,
                self.version,
                self.undecided,
                sorted(self.learned_keep),
                _finite_or_none(self.summary().oldest_decided),
                {
                    key: [
                        sorted(pattern.kept),
                        sorted(pattern.dropped),
                        sorted(pattern.without_evidence),
                        pattern.defaults,
                        pattern.decided_at,
                        pattern.urls_seen,
                    ]
                    for key, pattern in self.patterns.items()
                },
            ]
        )

    @classmethod
    def of_record(cls, record: bytes, wanted: str | None = None) -> MapFacts:
        """The facts of a facts record (:meth:`record`). A pattern's facts are read from
        the record when first asked for: a map read on demand holds the record alone.
        Those of pattern ``wanted`` (the one the URL that needs the map is in) are read
        now, from the record decoded here: reading the record again for them was a third
        of the cost of a cold domain, and holding it decoded until then costs more."""
        form, version, undecided, learned_keep, oldest_decided, patterns = orjson.loads(record)
        if form != _RECORD_FORMAT:
            raise ValueError(f"a facts record of format {form!r}, not {_RECORD_FORMAT}")
        summary = CompiledSummary(
            [(key, tuple(facts[0]) if facts[1] else None) for key, facts in patterns.items()],
            float("inf") if oldest_decided is None else oldest_decided,
        )
        return cls(
            version,
            undecided,
            _PerPattern(
                frozenset(patterns),
                partial(_pattern_in_record, record),
                (
                    {wanted: _pattern_of_record(patterns[wanted])}
                    if wanted is not None and wanted in patterns
                    else None
                ),
            ),
            frozenset(learned_keep),
            summary,
        )

    @classmethod
    def of_map(cls, domain_map: DomainMap) -> MapFacts:
        learned: set[str] = set()
        patterns = {
            key: _pattern_facts(
                decision.kept,
                decision.dropped,
                decision.decided_at,
                decision.urls_seen,
                (
                    (name, evidence.decision, evidence.layer, evidence.default_values)
                    for name, evidence in decision.params.items()
                ),
                learned,
            )
            for key, decision in domain_map.patterns.items()
        }
        return cls(domain_map.version, domain_map.undecided, patterns, frozenset(learned))

    @classmethod
    def of_document(cls, data: Mapping[str, Any]) -> MapFacts:
        """The facts of a map document this program wrote (as :meth:`DomainMap.from_json`
        reads one)."""
        _check_schema(data)
        learned: set[str] = set()
        patterns = {}
        for key, decision in data["patterns"].items():
            without_evidence, defaults = _params_in_document(decision["params"], learned)
            patterns[key] = PatternFacts(
                frozenset(decision["kept"]),
                frozenset(decision["dropped"]),
                frozenset(without_evidence),
                defaults,
                str(decision["decided_at"]),
                int(decision.get("urls_seen", 0)),
            )
        return cls(int(data["version"]), _undecided_in_document(data), patterns, frozenset(learned))


def facts_record_of_document(data: Mapping[str, Any]) -> tuple[bytes, dict[str, str]]:
    """The facts record (:meth:`MapFacts.record`) of a map document this program wrote, and
    when each of its patterns was decided: what storing a map needs, in one pass over the
    document, without the facts' objects (a third of what restoring a map cost)."""
    _check_schema(data)
    walks = compiled_map_walks()
    if walks is None:
        facts, learned, decided = _pattern_facts_in_document(data["patterns"])
        patterns = orjson.dumps(facts)
    else:
        patterns, learned, decided = walks.pattern_facts(data["patterns"])
    oldest = min(map(timestamp_seconds, set(decided.values())), default=float("inf"))
    # orjson.dumps of the record's list, its last item written already.
    record = b"[%d,%d,%b,%b,%b,%b]" % (
        _RECORD_FORMAT,
        int(data["version"]),
        orjson.dumps(_undecided_in_document(data)),
        orjson.dumps(learned),
        orjson.dumps(_finite_or_none(oldest)),
        patterns,
    )
    return record, decided


def _pattern_facts_in_document(
    patterns: Mapping[str, Any],
) -> tuple[dict[str, list[Any]], list[str], dict[str, str]]:
    """Of each of a map document's ``patterns``, its entry in the facts record; the names
    some pattern learned to keep, sorted; and when each pattern was decided."""
    learned: set[str] = set()
    facts = {}
    decided = {}
    for key, decision in patterns.items():
        without_evidence, defaults = _params_in_document(decision["params"], learned)
        decided_at = decided[key] = str(decision["decided_at"])
        facts[key] = [
            sorted(set(decision["kept"])),
            sorted(set(decision["dropped"])),
            sorted(without_evidence),
            defaults,
            decided_at,
            int(decision.get("urls_seen", 0)),
        ]
    return facts, sorted(learned), decided


def _check_schema(data: Mapping[str, Any]) -> None:
    if data.get("schema") != SCHEMA_ID:
        raise ValueError(f"not a {SCHEMA_ID} document")


def _params_in_document(
    params: Mapping[str, Any], learned: set[str]
) -> tuple[list[str], dict[str, Sequence[str]]]:
    """Of a pattern's parameters in a map document: the names without enough evidence to
    decide on, and the confirmed default values of those that have some; adds to
    ``learned`` the names it learned to keep (what :func:`_pattern_facts` reads of a map's
    objects)."""
    without_evidence = []
    defaults = {}
    for name, evidence in params.items():
        layer = evidence["layer"]
        if layer == Layer.INSUFFICIENT:
            without_evidence.append(name)
        elif layer == Layer.LEARNED and evidence["decision"] == "keep":
            learned.add(name)
        default_values = evidence.get("default_values")
        if default_values:
            defaults[name] = default_values
    return without_evidence, defaults


def _undecided_in_document(data: Mapping[str, Any]) -> dict[str, str]:
    return {key: str(cause) for key, cause in data.get("undecided", {}).items()}


_RECORD_FORMAT = 1


class CompiledSummary(NamedTuple):
    """What the compiled path holds of a map beside its plans: its learned patterns, each
    with its kept names, sorted, when it drops one (an audit hashes those); and when its
    oldest decision was made (seconds since the epoch; infinity without one)."""

    learned: list[tuple[str, tuple[str, ...] | None]]
    oldest_decided: float


def _compiled_summary(
    patterns: Iterable[tuple[str, Iterable[str], Collection[str], str]],
) -> CompiledSummary:
    learned = []
    decided = set()
    for key, kept, dropped, decided_at in patterns:
        learned.append((key, tuple(sorted(kept)) if dropped else None))
        decided.add(decided_at)
    return CompiledSummary(learned, min(map(timestamp_seconds, decided), default=float("inf")))


def _dropping_in_record(record: bytes) -> dict[str, DecisionSummary]:
    """:func:`~miqps.maps.dropping_summaries` of the map whose facts record is ``record``."""
    return {
        key: DecisionSummary(frozenset(kept), frozenset(dropped), decided_at, urls_seen)
        for key, (kept, dropped, _, _, decided_at, urls_seen) in orjson.loads(record)[5].items()
        if dropped
    }


def _finite_or_none(seconds: float) -> float | None:
    """``seconds`` as JSON can hold it: infinity (no decision) as null."""
    return seconds if seconds != float("inf") else None


def _pattern_in_record(record: bytes, key: str) -> PatternFacts:
    """The facts of pattern ``key`` in the facts record ``record``, read from the record (a
    few µs): a map read on demand holds its record as bytes, which are no work for the cyclic
    garbage collector, where decoded it would be a hundred objects to walk."""
    return _pattern_of_record(orjson.loads(record)[5][key])


def _pattern_of_record(entry: list[Any]) -> PatternFacts:
    kept, dropped, without, defaults, at, seen = entry
    return PatternFacts(frozenset(kept), frozenset(dropped), frozenset(without), defaults, at, seen)


def _pattern_facts(
    kept: frozenset[str],
    dropped: frozenset[str],
    decided_at: str,
    urls_seen: int,
    evidence: Iterable[tuple[str, str, str, Sequence[str] | None]],
    learned: set[str],
) -> PatternFacts:
    """One pattern's facts from its evidence (name, decision, layer, default values);
    adds to ``learned`` the names it learned to keep."""
    without_evidence: list[str] = []
    defaults: dict[str, Sequence[str]] = {}
    for name, decision, layer, default_values in evidence:
        if layer == Layer.INSUFFICIENT:
            without_evidence.append(name)
        elif layer == Layer.LEARNED and decision == "keep":
            learned.add(name)
        if default_values:
            defaults[name] = default_values
    return PatternFacts(kept, dropped, frozenset(without_evidence), defaults, decided_at, urls_seen)


def unlearned_keep(
    names: frozenset[str], layers: StaticLayers, use_prior: bool, learned_keep: frozenset[str]
) -> frozenset[str]:
    """Everything but what the cold-start prior drops, unless the domain learned it keeps
    pages apart somewhere (``learned_keep``)."""
    if not use_prior:
        return names
    return frozenset(
        name
        for name in names
        if not layers.prior_drops(name) or name in learned_keep or name in layers.allowlist
    )


class _Moved(list[str]):
    """The pairs a plan left after leaving out default values: they form another pattern."""

    __slots__ = ()


def _eliding_plan(kept: Sequence[int], defaults: frozenset[str], then: _Plan) -> _Plan:
    """A plan for a pattern with confirmed default values (``page=1``): the kept pairs
    with the plan ``then`` of their pattern applied (:data:`_KEEP_ALL` when it is this
    one), or a :class:`_Moved` list of them without those holding a default value."""

    settled = then is _KEEP_ALL

    def plan(pairs: Sequence[str]) -> Any:
        chosen = [pairs[i] for i in kept]
        if defaults.isdisjoint(chosen):
            return chosen if settled else then(chosen)
        return _Moved([pair for pair in chosen if pair not in defaults])

    return plan


def keep_in_pattern(
    rules: DomainRules | None,
    layers: StaticLayers,
    use_prior: bool,
    pattern: str,
    names: frozenset[str],
) -> frozenset[str]:
    """The parameters ``pattern`` keeps among ``names``: the learned ones, or the default."""
    if rules is not None:
        keep = rules.keep.get(pattern)
        if keep is not None:
            return keep & names
    learned_keep = rules.learned_keep if rules is not None else frozenset()
    return unlearned_keep(names, layers, use_prior, learned_keep)


@dataclass(frozen=True, slots=True)
class Round:
    """One application of the rules: the pattern the URL was in, what it kept there, and
    what it left out only for holding a confirmed default value (``page=1``)."""

    pattern: str
    names: frozenset[str]
    keep: frozenset[str]
    defaults: frozenset[str] = frozenset()


def settle(
    url: NormalizedURL, rules: DomainRules | None, layers: StaticLayers, use_prior: bool
) -> list[Round]:
    """The rules applied to ``url`` until they stop changing it: the last round's ``keep``
    is the canonical URL's parameters, the first round's ``pattern`` the URL's own.

    Each round keeps what its pattern keeps, less confirmed default values (a name whose
    every value, joined as :meth:`~miqps.urls.NormalizedURL.value_of`, is a default); a
    round that leaves something out moves the URL to the pattern of what is left.
    """
    shape = path_shape(url.path)
    names = url.names
    rounds: list[Round] = []
    while True:
        pattern = pattern_key(shape, names)
        keep = keep_in_pattern(rules, layers, use_prior, pattern, names)
        defaults = rules.default_pairs.get(pattern) if rules is not None else None
        if defaults:
            at_default = frozenset(name for name in keep if url.value_of(name) in defaults)
            keep -= at_default
            rounds.append(Round(pattern, names, keep, at_default))
        else:
            rounds.append(Round(pattern, names, keep))
        if keep == names:
            return rounds
        names = keep


def _strictly_increasing(names: Sequence[str]) -> bool:
    return all(a < b for a, b in pairwise(names))


class Canonicalizer:
    """Turns normalized URLs into canonical ones, given the current maps.

    Maps can be replaced at any time with :meth:`update`. The per-URL path sorts the pairs
    as plain strings, which almost always sorts them by name, and looks up a *plan* (which
    of them to keep, all rounds of :func:`settle` included) by path shape and the names in
    that order, computed once per key and remembered.
    :meth:`canonical_texts` goes from text to canonical text in batches without building
    objects; it is what the CLI and the stream workers should call.
    """

    def __init__(
        self,
        layers: StaticLayers | None = None,
        *,
        use_prior: bool = True,
        native: bool | None = None,
        maps: MapSource | None = None,
        cache_domains: int = DEFAULT_CACHE_DOMAINS,
    ) -> None:
        self._layers = layers or StaticLayers.default()
        self._use_prior = use_prior
        self._source = maps
        self._read_facts: Callable[[str], bytes | None] | None = getattr(maps, "facts", None)
        self._cache_domains = max(1, cache_domains)
        self._absent: set[str] = set()
        self._forgotten = 0  # how many times forget() was called
        self.maps_read = 0
        """Maps read from the source (on demand) since this was made."""
        self._domains: dict[str, _CompiledDomain] = (
            {} if maps is None else _DomainsOnDemand(self._load_on_demand)
        )
        # Maps under a key no URL's hostname can equal (a port, userinfo): kept for map_for.
        self._unreachable: dict[str, _CompiledDomain] = {}
        # Plans for domains without a map: they depend on the parameter names alone.
        self._unmapped_plans: dict[str, _Plan] = {}
        self._unmapped_table = next(_TABLES)
        self._heads: dict[str, str] = {}
        self._path = canonicalizer_path(native)
        self._native: _Native | None = None
        classes = compiled_classes()
        if self._path.name == "compiled" and classes is not None:
            self._native = _Native(classes.core(), classes.miss)
            self._native.core.reset(self._unmapped_table)
            self._native.core.set_on_demand(maps is not None)
        self._owned: Closable | None = None

    @property
    def native(self) -> bool:
        """Whether the compiled path (``miqps_native``) runs the common case of
        :meth:`canonical_texts`, :meth:`canonical_block`, :meth:`canonicalize` and
        :meth:`decide` without layers."""
        return self._native is not None

    @property
    def path(self) -> CanonicalizerPath:
        """Which per-URL path runs (:attr:`native`), and why."""
        return self._path

    @property
    def layers(self) -> StaticLayers:
        return self._layers

    @property
    def use_prior(self) -> bool:
        return self._use_prior

    @use_prior.setter
    def use_prior(self, use_prior: bool) -> None:
        self._use_prior = use_prior
        self._forget_plans()

    def _forget_plans(self) -> None:
        self._unmapped_plans = {}
        self._unmapped_table = next(_TABLES)
        self._absent.clear()
        if self._native is not None:
            self._native.core.reset(self._unmapped_table)
        for domain, compiled in list(self._domains.items()):
            self._install(
                domain,
                compiled.facts(),
                compiled.held_map,
                compiled.document,
                record=compiled.record,
            )

    def _install_native(
        self, native: _Native, domain: str, compiled: _CompiledDomain, facts: MapFacts
    ) -> None:
        """Start the compiled path's plan table for ``domain``, with what its stream step
        (:meth:`stream_records`) needs of the map: its version, its learned patterns (with
        the names kept of each that drops one, as an audit hashes its items), and when its
        oldest decision was made."""
        summary = facts.summary()
        table = compiled.table
        native.core.install(
            domain, table, compiled.version, summary.learned, summary.oldest_decided
        )
        if self._source is not None:
            return  # read on demand for a URL, most of a map's patterns will not be met
        # The plans of the keys URLs of the learned patterns have, made now rather than
        # on each one's first URL.
        for key in facts.patterns:
            names = split_pattern(key)[1]
            if names:
                self._add_native_plan(native, domain, table, key, compiled, names)

    def update(self, domain_map: DomainMap, document: bytes | None = None) -> None:
        """Install ``domain_map``. Given its JSON ``document`` (as ``miqps learn`` and the
        maps topic hold it), that is kept instead of the map: far less memory, but
        :meth:`map_for` and :meth:`explain` then decode it on every call, which suits the
        stream workers (they hold every domain's map and explain nothing)."""
        self._install(domain_map.domain, MapFacts.of_map(domain_map), domain_map, document)

    def _install(
        self,
        domain: str,
        facts: MapFacts,
        domain_map: DomainMap | None,
        document: bytes | None,
        *,
        record: bytes | None = None,
    ) -> None:
        """Compile and hold ``domain``'s map: the map itself, its ``document``, or, read
        from the source, its facts ``record`` alone (see :class:`_CompiledDomain`)."""
        source = self._source
        compiled = _CompiledDomain(
            facts,
            self._layers,
            self._use_prior,
            domain_map,
            document,
            record=record,
            read_document=partial(source.document, domain) if record and source else None,
        )
        # The per-URL path looks hosts up as they appear in the URL, port and userinfo
        # included, so it must never find a key holding either.
        if "@" in domain or (":" in domain and not domain.endswith("]")):
            self._unreachable[domain] = compiled
        else:
            self._domains[domain] = compiled
            if self._native is not None:
                self._install_native(self._native, domain, compiled, facts)

    def load(self, maps: Mapping[str, DomainMap]) -> None:
        for domain_map in maps.values():
            self.update(domain_map)

    @property
    def on_demand(self) -> bool:
        """Whether maps are read from a :class:`~miqps.mapstore.MapSource` when a URL of
        their domain comes, and at most ``cache_domains`` of them held."""
        return self._source is not None

    @property
    def maps_held(self) -> int:
        """How many domains' maps are in memory."""
        return len(self._domains) + len(self._unreachable)

    def _load_on_demand(self, domain: str, wanted: str | None = None) -> _CompiledDomain | None:
        """Install the source's map of ``domain``, if it has one (else remember that it
        has none), and make room for it. ``wanted``: the pattern the URL that needs the
        map is in, when known (see :meth:`MapFacts.of_record`).

        Another thread may store a new map and :meth:`forget` the domain while this one
        reads the old map: a map read while any domain was forgotten is read again, so an
        old map is never installed after its replacement was announced."""
        assert self._source is not None
        native = self._native
        if domain in self._absent:
            if native is not None:
                native.core.mark_absent(domain)  # its own set may have started over
            return None
        if "@" in domain or (":" in domain and not domain.endswith("]")):
            return None
        domains = self._domains
        assert isinstance(domains, _DomainsOnDemand)
        read_facts = self._read_facts
        while True:
            forgotten = self._forgotten
            # A source that keeps facts records keeps one for every map it holds.
            record = read_facts(domain) if read_facts is not None else None
            document = self._source.document(domain) if read_facts is None else None
            if record is None and document is None:
                if len(self._absent) >= _ABSENT_SIZE:
                    self._absent.clear()
                self._absent.add(domain)
                if native is not None:
                    native.core.mark_absent(domain)
                if self._forgotten == forgotten:
                    return None
                self._absent.discard(domain)
                if native is not None:
                    native.core.forget(domain)
                continue
            if len(domains) >= self._cache_domains + max(1, self._cache_domains // 4):
                self._make_room(domains)  # the pure-Python path answers one text at a time
            self.maps_read += 1
            if record is not None:
                facts = MapFacts.of_record(record, wanted)
                self._install(domain, facts, None, None, record=record)
            else:  # the document is held, not its map: decoded only if the map is asked for
                assert document is not None
                self._install(domain, MapFacts.of_document(orjson.loads(document)), None, document)
            if self._forgotten == forgotten:
                break
        domains.used.add(domain)  # not yet asked again for the URL that brought it
        return dict.get(domains, domain)

    def _make_room(self, domains: _DomainsOnDemand) -> None:
        """Drop the oldest maps down to 7/8 of ``cache_domains``, but give one used
        since the last time a second chance (to the back of the line)."""
        excess = len(domains) - max(1, self._cache_domains * 7 // 8)
        used = domains.used
        for domain in list(domains):
            if excess == 0:
                break
            touched = self._native is not None and self._native.core.take_touched([domain])[0]
            compiled = dict.pop(domains, domain)
            if touched or domain in used:
                dict.__setitem__(domains, domain, compiled)
            else:
                self._drop_native(domain)
                excess -= 1
        for domain in list(islice(domains, excess)):  # every one was used: the oldest go
            dict.pop(domains, domain)
            self._drop_native(domain)
        used.clear()

    def _drop_native(self, domain: str) -> None:
        if self._native is not None:
            self._native.core.forget(domain)

    @_then_make_room
    def map_for(self, domain: str) -> DomainMap | None:
        compiled = self._domains.get(domain) or self._unreachable.get(domain)
        if compiled is None and self._source is not None:
            document = self._source.document(domain)  # a key no URL's host equals
            return DomainMap.from_json(orjson.loads(document)) if document else None
        return compiled.map if compiled else None

    @_then_make_room
    def dropping_decisions(self, domain: str) -> tuple[int, dict[str, DecisionSummary]] | None:
        """The version of ``domain``'s map and the summary of each of its decisions that
        drops a parameter; None without a map. A map kept as its JSON document is read
        without decoding its evidence."""
        compiled = self._domains.get(domain) or self._unreachable.get(domain)
        if compiled is None:
            return None
        if compiled.record is not None:
            return compiled.version, _dropping_in_record(compiled.record)
        if compiled.document is not None:
            patterns = orjson.loads(compiled.document)["patterns"]
        else:
            patterns = compiled.map.patterns
        return compiled.version, dropping_summaries(patterns)

    @_then_make_room
    def canonical_url(self, url: NormalizedURL) -> str:
        return self._canonical_url(url)

    @_then_make_room
    def canonical_text(self, text: str) -> str:
        """``canonical_url(parse(text))``, through the remembered plans when it can.

        Raises :class:`InvalidURL` exactly as :func:`~miqps.urls.parse` does.
        """
        return self._canonical_text(text)

    def _canonical_url(self, url: NormalizedURL) -> str:
        if not url.has_params:
            return url.url
        return url.with_only(self._settle(url, self._domains.get(url.host))[-1].keep)

    def _canonical_text(self, text: str) -> str:
        """:meth:`canonical_text` within a call that makes room when it ends."""
        origin, host, path, query, route = components(text)
        pairs = split_pairs(query) if query else []
        return self._canonical_parts(text, origin, host, path, pairs, route)

    def _canonical_parts(
        self, text: str, origin: str, host: str, path: str, pairs: list[str], route: str
    ) -> str:
        """The canonical form of ``text``, given its normalized parts (``pairs`` without
        empty ones), through the remembered plans when it can."""
        matrix_at = -1
        if ";" in path:
            path, matrix = split_matrix(path)
            if matrix:
                # The plans take the parameters of one segment, named apart from the query's.
                matrix_at = matrix[0][0]
                if any(end != matrix_at for end, _ in matrix) or any(
                    pair.startswith(";") for pair in pairs
                ):
                    return self._canonical_url(parse(text))
                pairs += [";" + param for _, param in matrix]
        if not pairs:
            return origin + path + route
        pairs.sort()
        compiled = self._domains.get(host)
        shape = path_shape(path) if compiled is not None else ""
        kept = self._kept_by_plans(pairs, compiled, shape)
        if kept is None:
            return self._canonical_url(parse(text))
        if isinstance(kept, str):
            kept = [kept]
        if matrix_at >= 0:
            path = path[:matrix_at] + "".join(p for p in kept if p[0] == ";") + path[matrix_at:]
            kept = [pair for pair in kept if pair[0] != ";"]
        return f"{origin}{path}?{'&'.join(kept)}{route}" if kept else origin + path + route

    def _settle(self, url: NormalizedURL, compiled: _CompiledDomain | None) -> list[Round]:
        rules = compiled.rules if compiled is not None else None
        return settle(url, rules, self._layers, self._use_prior)

    @_then_make_room
    def canonical_texts(
        self,
        texts: Iterable[str],
        errors: list[tuple[int, InvalidURL]] | None = None,
        *,
        control_free: bool = False,
    ) -> list[str]:
        """:meth:`canonical_text` of each text, in order: the fast path for streams of URLs.

        An invalid text gives ``""`` and, when ``errors`` is given, ``(index, error)`` is
        appended to it. ``control_free=True`` is the caller's word that no text holds a C0
        control character or DEL (the CLI checks whole blocks of input at once), which
        skips that check per text. Anything out of the common case (userinfo, a port, IPv6,
        non-ASCII, repeated names, a ``;`` in the path, bad input) goes through
        :meth:`canonical_text`, and tests hold the two paths to the same output.

        With :attr:`native`, the compiled path takes the common case instead, executing
        the same plans; a differential test holds it to this path's output.
        """
        if self._native is not None:
            texts = texts if isinstance(texts, list) else list(texts)
            return self._native_texts(self._native, texts, errors)
        out: list[str] = []
        append = out.append
        ada_parse = can_ada.parse
        domain_of = self._domains.get
        heads = self._heads
        normalize = normalize_percent_encoding
        for text in texts:
            if not (
                text.isascii()
                and (control_free or text.isprintable())
                and 0 < len(text) <= MAX_URL_BYTES
            ):
                self._append_slow(text, out, errors)
                continue
            try:
                href: str = ada_parse(text).href
            except Exception:
                self._append_slow(text, out, errors)
                continue
            if href.startswith("https://"):
                start = 8
            elif href.startswith("http://"):
                start = 7
            else:
                self._append_slow(text, out, errors)
                continue
            route = ""
            if "#" in href:  # the first "#" starts the fragment
                href, _, fragment = href.partition("#")
                if fragment.startswith("!"):
                    route = normalize("#" + fragment)
            base, _, query = href.partition("?")  # the first "?" starts the query
            slash = base.find("/", start)
            host = base[start:slash]
            compiled = domain_of(host)
            # A mapped host is a plain hostname; anything else may hide userinfo or a port.
            if compiled is None and (slash <= start or "@" in host or ":" in host):
                self._append_slow(text, out, errors)
                continue
            if "%" in base:  # only in the path: no userinfo here, and hosts hold no "%"
                base = normalize(base)
            if ";" in base:  # maybe matrix parameters
                query = normalize(query) if "%" in query else query
                pairs = [pair for pair in query.split("&") if pair] if query else []
                append(self._canonical_parts(text, base[:slash], host, base[slash:], pairs, route))
                continue
            if not query:
                append(base + route)
                continue
            if "%" in query:
                query = normalize(query)
            pairs = query.split("&")
            if "" in pairs:
                pairs = [pair for pair in pairs if pair]
                if not pairs:
                    append(base + route)
                    continue
            pairs.sort()
            if compiled is None:
                shape = ""
            else:
                head_end = base.find("/", slash + 1)
                if head_end < 0:
                    first = base[slash + 1 :]
                    stars = ""
                else:
                    first = base[slash + 1 : head_end]
                    depth = base.count("/", head_end)
                    stars = _STARS[depth] if depth < _MAX_STARS else "/*" * depth
                head = heads.get(first)
                if head is None:
                    head = self._head(first)
                shape = head + stars
            kept = self._kept_by_plans(pairs, compiled, shape)
            if kept is None:
                self._append_slow(text, out, errors)
            elif kept.__class__ is str:
                append(f"{base}?{kept}{route}")
            elif kept:
                append(f"{base}?{'&'.join(kept)}{route}")
            else:
                append(base + route)
        return out

    @_then_make_room
    def canonical_block(
        self,
        block: str,
        errors: list[tuple[int, InvalidURL]] | None = None,
        *,
        control_free: bool = False,
    ) -> bytes:
        """:meth:`canonical_texts` of the lines of ``block`` (``"\\n"`` between them),
        as UTF-8 lines, each ended by ``"\\n"``: what the CLI writes for a block it read.
        The compiled path makes no string per line but for the lines it cannot answer."""
        native = self._native
        answered = native.core.canonical_lines(block) if native is not None else None
        if native is None or answered is None:
            lines = block.split("\n")
            outputs = self.canonical_texts(lines, errors, control_free=control_free)
            return ("\n".join(outputs) + "\n").encode()
        parts, others, texts, answers = answered
        if not others:
            return bytes(parts[0])
        local: list[tuple[int, InvalidURL]] = []
        resolved = self._resolve_native(native, texts, answers, list(range(len(texts))), local)
        if errors is not None:
            errors.extend((others[at], error) for at, error in local)
        pieces = [parts[0]]
        for answer, part in zip(resolved, parts[1:], strict=True):
            pieces += (answer.encode(), b"\n", part)
        return b"".join(pieces)

    @_then_make_room
    def stream_records(
        self,
        values: list[bytes | None],
        max_bytes: int,
        due_before: float,
        audit_below: int,
        seed: str,
    ) -> tuple[list[bytes | None], list[bytes | None], int] | None:
        """The compiled path's part of a stream front's batch (:mod:`streams.front.loop`),
        None without it: for each ``urls.raw`` value, its ``urls.canonical`` record, or
        None where the front must take the message itself; the records' keys; how many
        records are of learned patterns.

        The compiled path takes a plain URL whose decision needs nothing else of the front:
        a learned pattern none of whose decisions was made at or before ``due_before``
        (none is due for re-verification), and whose item's audit digest (``seed``) is
        not below ``audit_below``; or a URL without parameters."""
        native = self._native
        if native is None:
            return None
        batch = native.core.front_batch
        records, keys, others, learned = batch(values, max_bytes, due_before, audit_below, seed)
        for part in self._miss_parts(native, records, others):
            others = part
            for _ in range(_MAX_MISSES):
                misses = _misses(native, records, others)
                if not misses:
                    break  # every answer is a record or None: the misses were asked again
                missed = [index for index, _ in misses]
                self._teach_misses(native, [miss for _, miss in misses])
                again = [values[index] for index in missed]
                answers, answer_keys, others, more = batch(
                    again, max_bytes, due_before, audit_below, seed
                )
                learned += more
                for index, record, key in zip(missed, answers, answer_keys, strict=True):
                    records[index] = record
                    keys[index] = key
                others = [missed[at] for at in others]
            else:
                for index in others:
                    records[index] = None  # misses left: the front takes these
            self._make_room_between_parts()
        return cast("list[bytes | None]", records), keys, learned

    def _miss_parts(
        self, native: _Native, answers: Sequence[object], others: list[int]
    ) -> list[list[int]]:
        """``others`` in parts, each naming at most a quarter of ``cache_domains`` domains
        whose maps are not held (all of it in one part without maps read on demand): each
        part's maps are read, its texts answered, and room made before the next part, so a
        batch of many domains holds at most about 1.25x the cache."""
        if self._source is None:
            return [others]
        limit = max(1, self._cache_domains // 4)
        parts: list[list[int]] = [[]]
        unheld: set[str] = set()
        for index in others:
            answer = answers[index]
            if (
                isinstance(answer, native.miss)
                and answer.table == 0
                and answer.domain
                and answer.domain not in unheld
            ):
                if len(unheld) == limit:
                    parts.append([])
                    unheld.clear()
                unheld.add(answer.domain)
            parts[-1].append(index)
        return parts

    def _make_room_between_parts(self) -> None:
        domains = self._domains
        if isinstance(domains, _DomainsOnDemand) and len(domains) > self._cache_domains:
            self._make_room(domains)

    def _native_texts(
        self, native: _Native, texts: list[str], errors: list[tuple[int, InvalidURL]] | None
    ) -> list[str]:
        out, others = native.core.canonical_texts(texts)
        return self._resolve_native(native, texts, out, others, errors)

    def _resolve_native(
        self,
        native: _Native,
        texts: list[str],
        out: Sequence[str | Miss | None],
        others: list[int],
        errors: list[tuple[int, InvalidURL]] | None,
    ) -> list[str]:
        """``out`` with the compiled path's other answers (at ``others``) turned into
        canonical URLs, in place: misses are taught and asked again (each round may lead to
        the plan of another pattern), the rest takes :meth:`canonical_text`."""
        answered = cast("list[str | Miss | None]", out)
        for part in self._miss_parts(native, answered, others):
            self._resolve_part(native, texts, answered, part, errors)
            self._make_room_between_parts()
        # Every answer is now a canonical URL, or "" for an invalid text.
        return cast("list[str]", answered)

    def _resolve_part(
        self,
        native: _Native,
        texts: list[str],
        answered: list[str | Miss | None],
        others: list[int],
        errors: list[tuple[int, InvalidURL]] | None,
    ) -> None:
        slow: list[int] = []
        for _ in range(_MAX_MISSES):
            misses = _misses(native, answered, others)
            slow.extend(index for index in others if answered[index] is None)
            self._teach_misses(native, [miss for _, miss in misses])
            others = []
            if not misses:
                break
            missed = [index for index, _ in misses]
            answers, others = native.core.canonical_texts([texts[index] for index in missed])
            for index, answer in zip(missed, answers, strict=True):
                answered[index] = answer
            others = [missed[at] for at in others]
        slow.extend(others)
        for index in sorted(slow):
            try:
                answered[index] = self._canonical_text(texts[index])
            except InvalidURL as error:
                if errors is not None:
                    errors.append((index, error))
                answered[index] = ""

    def _teach_misses(self, native: _Native, misses: list[Miss]) -> None:
        """Teach the compiled path the plan of each key its ``misses`` name, once a key."""
        taught: set[tuple[str | None, int, str]] = set()
        for miss in misses:
            if (miss.domain, miss.table, miss.key) not in taught:
                taught.add((miss.domain, miss.table, miss.key))
                self._teach_native(native, miss)

    def _teach_native(self, native: _Native, miss: Miss) -> None:
        """Hand the compiled path the plan for the key of ``miss`` in the table it named,
        unless that table was replaced since (it then asks again, for the new one)."""
        domain, table, key = miss.domain, miss.table, miss.key
        if table == 0 and domain is not None:  # a domain whose map is not loaded yet
            domains = self._domains
            assert isinstance(domains, _DomainsOnDemand)  # table 0 is only for maps on demand
            domains.get(domain, wanted=key)
            return
        if domain is None:
            compiled = None
            if table != self._unmapped_table:
                return
        else:
            compiled = self._domains.get(domain)
            if compiled is None or compiled.table != table:
                return
        self._add_native_plan(native, domain, table, key, compiled, miss.names)

    def _add_native_plan(
        self,
        native: _Native,
        domain: str | None,
        table: int,
        key: str,
        compiled: _CompiledDomain | None,
        names: Sequence[str],
    ) -> None:
        spec = self._plan_spec(key, compiled, names)
        native.core.add_plan(
            domain, table, key, (spec.kept, spec.size, tuple(spec.defaults), spec.then)
        )

    def _kept_by_plans(
        self, pairs: list[str], compiled: _CompiledDomain | None, shape: str
    ) -> str | Sequence[str] | None:
        """The pairs the remembered plans keep (a string when one), or None when the pairs'
        string order is not their name order."""
        if compiled is None:
            plans = self._unmapped_plans
            prefix = ""
        else:
            plans = compiled.plans
            prefix = shape + "?"
        names = [pair.partition("=")[0] for pair in pairs]
        while True:
            key = prefix + "&".join(names)
            plan = plans.get(key)
            if plan is None:
                plan = self._plan(plans, key, compiled, names)
            if plan is _KEEP_ALL:
                return pairs
            if plan is _KEEP_NONE:
                return ()
            if plan is _IRREGULAR:
                return None
            kept: str | Sequence[str] = plan(pairs)
            if not isinstance(kept, _Moved):
                return kept
            pairs = kept  # default values left out: the URL moved to another pattern
            if not pairs:
                return ()
            names = [pair.partition("=")[0] for pair in pairs]

    def _append_slow(
        self, text: str, out: list[str], errors: list[tuple[int, InvalidURL]] | None
    ) -> None:
        try:
            out.append(self._canonical_text(text))
        except InvalidURL as error:
            if errors is not None:
                errors.append((len(out), error))
            out.append("")

    def _head(self, segment: str) -> str:
        """The first element of a path shape, for a path's first segment (remembered)."""
        head = path_shape("/" + segment)
        if len(self._heads) >= _CACHE_SIZE:
            self._heads.clear()
        self._heads[segment] = head
        return head

    def _plan(
        self,
        plans: dict[str, _Plan],
        key: str,
        compiled: _CompiledDomain | None,
        names: Sequence[str],
    ) -> _Plan:
        """The plan of :meth:`_plan_spec` as a callable; remembered under ``key``."""
        spec = self._plan_spec(key, compiled, names)
        plan: _Plan
        if spec.kept is None:
            plan = _IRREGULAR
        elif spec.defaults:
            then = _KEEP_ALL
            if spec.then is not None:
                then = plans.get(spec.then) or self._plan(
                    plans, spec.then, compiled, spec.then_names
                )
            plan = _eliding_plan(spec.kept, spec.defaults, then)
        else:
            plan = _plan_for(spec.kept, spec.size)
        if len(plans) >= _CACHE_SIZE:
            plans.clear()
        plans[key] = plan
        return plan

    def _plan_spec(
        self, key: str, compiled: _CompiledDomain | None, names: Sequence[str]
    ) -> _PlanSpec:
        """Which pairs to keep, by index in string order, for the pairs under ``key``.

        ``names`` are those of the pairs sorted as strings. Unless that is not their name
        order (``kept`` None), the kept pairs in that order are the canonical order.
        The rounds of :func:`settle` that depend on names alone are followed here, once
        per key; a round that may leave out default values ends the plan with them.
        """
        if not _strictly_increasing(names):
            return _PlanSpec(None, len(names))
        rules = compiled.rules if compiled is not None else None
        shape = key.partition("?")[0] if compiled is not None else ""
        prefix = shape + "?" if compiled is not None else ""
        current = list(names)
        while True:
            pattern = pattern_key(shape, current)
            keep = keep_in_pattern(
                rules, self._layers, self._use_prior, pattern, frozenset(current)
            )
            kept = [name for name in current if name in keep]
            defaults = rules.default_pairs.get(pattern) if rules is not None else None
            indexes = tuple(i for i, name in enumerate(names) if name in keep)
            if defaults and kept:
                if len(kept) == len(current):
                    return _PlanSpec(indexes, len(names), defaults)
                then = prefix + "&".join(kept)
                return _PlanSpec(indexes, len(names), defaults, then, tuple(kept))
            if len(kept) == len(current):
                return _PlanSpec(indexes, len(names))
            current = kept

    @_then_make_room
    def decide(
        self, url: NormalizedURL, original: str | None = None, *, with_layers: bool = True
    ) -> Decision:
        """The canonical URL with the layer that decided each parameter (unless
        ``with_layers`` is false): for a dropped one in the pattern it was dropped in, for
        a kept one in the URL's own pattern. Safe while another thread updates the maps:
        the decision is made with the map that was live when it started."""
        if not with_layers and original is not None and self._native is not None:
            decided = self._native_decision(self._native, url, original)
            if decided is not None:
                return decided
        compiled = self._domains.get(url.host)
        rounds = settle(
            url, compiled.rules if compiled is not None else None, self._layers, self._use_prior
        )
        first = rounds[0]
        final = rounds[-1].keep
        split = compiled.splits.get(first.pattern) if compiled is not None else None
        # The split's names are its pattern's: a URL without parameters shares the pattern
        # of one whose only parameter has an empty name (``/p?``), not its names.
        if (
            split is not None
            and split.keep == final
            and len(first.names) == len(split.kept) + len(split.dropped)
        ):
            kept, dropped = split.kept, split.dropped
        else:
            kept, dropped = tuple(sorted(final)), tuple(sorted(first.names - final))
        undecided = (
            compiled.undecided.get(first.pattern)
            if with_layers and split is None and compiled is not None
            else None
        )
        return Decision(  # by position: several times faster than by keyword
            original if original is not None else url.url,
            url.with_only(final),
            url.host,
            first.pattern,
            kept,
            dropped,
            self._layers_of(compiled, rounds) if with_layers else {},
            Status.PROVISIONAL if split is None else Status.LEARNED,
            compiled.version if compiled else 0,
            self._items_of(compiled, rounds) if with_layers else {},
            undecided,
            tuple(sorted({n for r in rounds for n in r.defaults})) if with_layers else (),
        )

    def _native_decision(
        self, native: _Native, url: NormalizedURL, original: str
    ) -> Decision | None:
        """:meth:`decide` without layers through the compiled path (``url`` being
        ``parse(original)``); None when that path cannot answer, or answered with a map
        replaced since.

        The compiled path gives the canonical URL, the URL's own pattern and the kept and
        dropped names, sorted: what ``decide`` gives, since a learned pattern's split names
        the same sets in the same order when its keep is the final one."""
        answer = native.core.decide_text(original)
        misses = 0
        while isinstance(answer, native.miss):  # teach it, ask again
            if misses == _MAX_MISSES:
                return None
            misses += 1
            self._teach_native(native, answer)
            answer = native.core.decide_text(original)
        if answer is None:
            return None
        canonical, pattern, kept, dropped, table = answer
        compiled = self._domains.get(url.host)
        if table and table != (compiled.table if compiled is not None else self._unmapped_table):
            return None
        learned = compiled is not None and pattern in compiled.splits
        return Decision(
            original,
            canonical,
            url.host,
            pattern,
            kept,
            dropped,
            {},
            Status.LEARNED if learned else Status.PROVISIONAL,
            compiled.version if compiled else 0,
            {},
            None,
        )

    @staticmethod
    def _items_of(compiled: _CompiledDomain | None, rounds: list[Round]) -> dict[str, int]:
        """The distinct items each parameter was tested on, in the pattern it was dropped in."""
        items: dict[str, int] = {}
        if compiled is None:
            return items
        for round_ in rounds:
            decision = compiled.map.patterns.get(round_.pattern)
            if decision is None:
                continue
            for name in round_.names - round_.keep:
                evidence = decision.params.get(name)
                if evidence is not None and evidence.decision == "drop":
                    items[name] = evidence.items
        return dict(sorted(items.items()))

    def _layers_of(self, compiled: _CompiledDomain | None, rounds: list[Round]) -> dict[str, str]:
        first = rounds[0]
        names = first.names
        layers = {name: str(self._layer(compiled, first, name)) for name in rounds[-1].keep}
        for round_ in rounds:
            for name in round_.names - round_.keep:
                layers[name] = str(self._layer(compiled, round_, name))
        return {name: layers[name] for name in sorted(names)}

    def _layer(self, compiled: _CompiledDomain | None, round_: Round, name: str) -> Layer:
        if name in self._layers.allowlist:
            return Layer.ALLOWLIST
        decision = compiled.map.patterns.get(round_.pattern) if compiled else None
        if decision is None:
            return Layer.UNLEARNED if name in round_.keep else Layer.PRIOR
        evidence = decision.params.get(name)
        if evidence is None:
            return Layer.UNLEARNED
        learned_keep = compiled.rules.keep[round_.pattern] if compiled else frozenset()
        if evidence.layer == Layer.INSUFFICIENT and name not in learned_keep:
            return Layer.PRIOR
        return evidence.layer

    # --- The public API (``from miqps import Canonicalizer``) --------------------------

    BATCH_SIZE = 1024
    """URLs per batch of :meth:`canonicalize_many`."""

    @classmethod
    def from_file(
        cls,
        path: str | PathLike[str],
        *,
        use_prior: bool = True,
        index: str | PathLike[str] | None = None,
        cache_domains: int = DEFAULT_CACHE_DOMAINS,
    ) -> Canonicalizer:
        """A canonicalizer with the maps of a file written by ``miqps learn``.

        A file larger than :data:`~miqps.mapstore.IN_MEMORY_MAX_BYTES` (64 MiB), or any
        file when ``index`` is given, is indexed on disk once (at ``index``, by default in
        the user's cache folder: :func:`~miqps.mapstore.index_maps_file`), and its maps
        are read on demand, at most ``cache_domains`` held at a time; :meth:`close`
        closes the index. The canonical URLs are the same either way.

        Raises :class:`~miqps.maps.InvalidMap` (naming ``file:line``) for a line that
        breaks a rule, and :class:`OSError` when the file cannot be read.
        """
        from pathlib import Path

        from miqps.maps import read_maps
        from miqps.mapstore import IN_MEMORY_MAX_BYTES, index_maps_file

        file = Path(path)
        if index is None and file.stat().st_size <= IN_MEMORY_MAX_BYTES:
            canonicalizer = cls(use_prior=use_prior)
            canonicalizer.load(read_maps(file))
            return canonicalizer
        store = index_maps_file(file, Path(index) if index is not None else None)
        canonicalizer = cls(use_prior=use_prior, maps=store, cache_domains=cache_domains)
        canonicalizer.adopt(store)
        return canonicalizer

    def adopt(self, resource: Closable) -> None:
        """Close ``resource`` (the store its maps come from) when this is closed."""
        self._owned = resource

    def close(self) -> None:
        """Release what the canonicalizer holds: the index of a large maps file; one from
        ``streams.from_kafka`` stops following the maps topic."""
        if self._owned is not None:
            self._owned.close()
            self._owned = None

    def forget(self, domain: str) -> None:
        """Drop the map of ``domain``: its URLs get the conservative default again, or,
        with maps read on demand, the source's map, read anew on the domain's next URL."""
        self._forgotten += 1
        self._domains.pop(domain, None)
        self._unreachable.pop(domain, None)
        self._absent.discard(domain)
        if self._native is not None:
            self._native.core.forget(domain)

    @_then_make_room
    def canonicalize(self, url: str) -> str:
        """The canonical form of ``url``; raises :class:`~miqps.urls.InvalidURL` (with a
        ``reason``) for a URL that cannot be canonicalized."""
        if self._native is None:
            return self._canonical_text(url)
        errors: list[tuple[int, InvalidURL]] = []
        canonical = self._native_texts(self._native, [url], errors)[0]
        if errors:
            raise errors[0][1]
        return canonical

    @_then_make_room
    def explain(self, url: str) -> Decision:
        """The canonical form of ``url`` with, per parameter, whether it was kept and which
        layer decided; raises :class:`~miqps.urls.InvalidURL` like :meth:`canonicalize`."""
        return self.decide(parse(url), original=url)

    def canonicalize_many(
        self, urls: Iterable[str], errors: list[tuple[int, InvalidURL]] | None = None
    ) -> Iterable[str]:
        """The canonical form of each URL, in order, lazily (in batches of
        :attr:`BATCH_SIZE`, so an endless stream works). An invalid URL gives ``""`` and,
        with ``errors``, appends ``(index, error)`` there."""
        iterator = iter(urls)
        start = 0
        batch_errors: list[tuple[int, InvalidURL]] = []
        while batch := list(islice(iterator, self.BATCH_SIZE)):
            yield from self.canonical_texts(batch, batch_errors)
            if errors is not None:
                errors.extend((start + at, error) for at, error in batch_errors)
            batch_errors.clear()
            start += len(batch)
