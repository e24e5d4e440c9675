"""Audits: dropped parameters re-tested on new items, so that no drop is final.

A map drops a parameter on the evidence of the items it was tested on; an item it was not
tested on may still change with it (a ``size`` that only apparel has). So a share of the
new *items* that come with a dropped parameter is tested again: an item is the path and the
values of the pattern's kept parameters, the page the canonical URL names. Which items are
chosen is decided by a hash of the item, so every item is chosen or not whatever URL brings
it and however often, and a chosen item is audited once (:class:`ItemMemory`).

An audit fetches the item with its dropped parameters and without them, through the
learner's :class:`~miqps.prober.PageProber` and its noise handling. A change is split into
the parameters that make it, and each is confirmed by :data:`CONFIRMATIONS` more
comparisons on fresh fetches (new probers sharing the learned noise) that each show the
same change: a block holding, with the parameter and without it, what it held the first
time. A block rotating by itself can repeat on the refetches meant to show it moving, and
repeat both pages' variants on one comparison (one time in nine among three variants,
where a domain's noise is little known), but not on three.
A confirmed change restores the parameter as the learner keeps it: in every pattern of the
path shape, and in every pattern of the domain that dropped it on the domain's evidence
(layer ``learned-domain``). Pages that are evidence of nothing (unreachable, refused, interstitial,
inconclusive) do not count. A restore only adds kept parameters, so the anomaly gate, which
stops updates that drop too much, lets it through.

``miqps learn`` on an existing map and the stream's probing worker both audit through
:func:`audit_map`; the stream's front chooses its items with :meth:`AuditRule.chooses`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from math import ceil
from typing import Protocol

import xxhash

from miqps.content import Snapshot
from miqps.maps import (
    DomainMap,
    Layer,
    ParamEvidence,
    PatternDecision,
    anomaly_gate,
    merge_update,
    utc_now,
)
from miqps.prober import STATUS_KEY, Comparison, Outcome, PageProber
from miqps.update import DEFAULT_MAX_FLIP_SHARE, Decided, MapUpdate, Why
from miqps.urls import NormalizedURL, path_shape, split_pattern

DEFAULT_AUDIT_SHARE = 0.05
"""One new item in twenty: a parameter that changes 5% of items is restored after about
400 new items (20 audits), and at least 1,840 new items among 20,000 URLs restore it with
probability 99%; each audit costs two fetches."""

CONFIRMATIONS = 3
"""Fresh comparisons that must each show a change before it restores a parameter: a block
rotating among three variants fools all three once in 729 times, a real change never."""
DEFAULT_ITEM_MEMORY = 100_000
_HASH_RANGE = 2**64


def item_digest(url: NormalizedURL, kept: frozenset[str], seed: str = "") -> int:
    """The 64-bit digest of the item ``url`` shows under a decision keeping ``kept``: its
    host, path and the values of its kept parameters (the URL with only those)."""
    text = f"{seed}\t{url.with_only(kept)}"
    return xxhash.xxh3_64_intdigest(text.encode("utf-8", "surrogatepass"))


class KeptAndDropped(Protocol):
    """What choosing an item needs of a pattern's decision."""

    @property
    def kept(self) -> frozenset[str]: ...

    @property
    def dropped(self) -> frozenset[str]: ...


@dataclass(frozen=True, slots=True)
class AuditRule:
    """Which items of a dropped parameter are audited: a ``share`` of the distinct items,
    chosen by their digest (``seed`` changes which)."""

    share: float = DEFAULT_AUDIT_SHARE
    seed: str = ""

    def __post_init__(self) -> None:
        if not 0.0 <= self.share <= 1.0:
            raise ValueError(f"audit share must be between 0 and 1, not {self.share!r}")

    def decision_for(
        self, domain_map: DomainMap, url: NormalizedURL, pattern: str | None = None
    ) -> PatternDecision | None:
        """The decision of ``url``'s pattern (``pattern``, if the caller knows it) in
        ``domain_map`` if it drops a parameter."""
        decision = domain_map.patterns.get(pattern or url.pattern)
        if decision is None or not decision.dropped:
            return None
        return decision

    def chooses(self, url: NormalizedURL, decision: KeptAndDropped) -> int | None:
        """The item's digest if the item of ``url`` is to be audited, else None."""
        if not decision.dropped or self.share <= 0.0:
            return None
        digest = item_digest(url, decision.kept, self.seed)
        return digest if digest < self.chosen_below else None

    @property
    def chosen_below(self) -> int:
        """The digests of the items audited are those below this (``share`` of the range;
        an integer, so that a compiled step compares them exactly as this rule does)."""
        return ceil(self.share * _HASH_RANGE)


class ItemMemory:
    """The digests of the items audited lately, at most ``limit``, oldest forgotten first
    (a forgotten item may be audited once more)."""

    def __init__(self, limit: int = DEFAULT_ITEM_MEMORY) -> None:
        self.limit = limit
        self._seen: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._seen)

    def __contains__(self, digest: int) -> bool:
        return digest in self._seen

    def add(self, digest: int) -> bool:
        """Remember ``digest``; False if it was remembered already."""
        if digest in self._seen:
            self._seen.move_to_end(digest)
            return False
        self._seen[digest] = None
        if len(self._seen) > self.limit:
            self._seen.popitem(last=False)
        return True


@dataclass(frozen=True, slots=True)
class Restore:
    """A dropped parameter that changed an item, confirmed."""

    pattern: str
    name: str
    url: str


@dataclass(slots=True)
class Audit:
    """What :func:`audit_map` did for one domain. ``update`` holds the restored patterns
    (``why`` is audit), the next map and the gate's verdict, as any update does."""

    domain: str
    update: MapUpdate
    audited: int = 0
    """Items compared conclusively."""
    inconclusive: int = 0
    """Items whose comparison was evidence of nothing: they do not count."""
    unconfirmed: int = 0
    """Changes that the confirming comparison did not show again."""
    restores: list[Restore] = field(default_factory=list)

    @property
    def published(self) -> DomainMap | None:
        return self.update.published

    @property
    def restored(self) -> list[tuple[str, str]]:
        """(path shape, name) of every parameter restored."""
        return sorted({(split_pattern(r.pattern)[0], r.name) for r in self.restores})


async def audit_map(
    prober: PageProber,
    current: DomainMap,
    urls: Sequence[NormalizedURL],
    rule: AuditRule,
    memory: ItemMemory | None = None,
    *,
    max_flip_share: float = DEFAULT_MAX_FLIP_SHARE,
) -> Audit:
    """Audit the items of ``urls`` that ``rule`` chooses and ``memory`` has not seen, against
    ``current``; restore what a confirmed change shows to matter."""
    domain = current.domain
    audit = Audit(domain, MapUpdate(domain, current))
    if current.frozen:
        return audit
    memory = memory if memory is not None else ItemMemory()
    stats = prober.fetcher.stats
    fetches_before = stats.by_host[domain]
    working = dict(current.patterns)
    restored_in_shape: set[tuple[str, str]] = set()
    for url in urls:
        if url.host != domain:
            continue
        decision = working.get(url.pattern)
        if decision is None:
            continue
        shape = path_shape(url.path)
        suspects = frozenset(
            name for name in decision.dropped if (shape, name) not in restored_in_shape
        )
        if not suspects:
            continue
        digest = rule.chooses(url, decision)
        if digest is None or not memory.add(digest):
            continue
        outcome = await _audit_item(prober, f"{domain}{shape}", url, decision.kept, suspects)
        if outcome is None:
            audit.inconclusive += 1
            continue
        audit.audited += 1
        changed, unconfirmed = outcome
        audit.unconfirmed += unconfirmed
        for name in sorted(changed):
            audit.restores.append(Restore(url.pattern, name, url.url))
            restored_in_shape.add((shape, name))
            working.update(_restored(working, shape, name))
    changed_patterns = {
        pattern: decision
        for pattern, decision in working.items()
        if decision is not current.patterns.get(pattern)
    }
    audit.update.fetches = stats.by_host[domain] - fetches_before
    if changed_patterns:
        audit.update.decided = {
            pattern: Decided(changed_patterns[pattern], Why.AUDIT)
            for pattern in sorted(changed_patterns)
        }
        audit.update.candidate = merge_update(
            current, DomainMap(domain, 0, utc_now(), changed_patterns)
        )
        audit.update.verdict = anomaly_gate(current, audit.update.candidate, max_flip_share)
    return audit


async def _audit_item(
    prober: PageProber,
    template: str,
    url: NormalizedURL,
    kept: frozenset[str],
    suspects: frozenset[str],
) -> tuple[set[str], int] | None:
    """The suspects whose change on this item is confirmed, and how many changes were not;
    None when the item showed nothing conclusive."""
    canonical = url.with_only(kept)
    whole = await prober.compare_detail(template, url.with_only(kept | suspects), canonical)
    if whole.outcome is Outcome.INCONCLUSIVE:
        return None
    if whole.outcome is Outcome.UNCHANGED:
        return set(), 0
    changers: list[str] = []
    if len(suspects) == 1:
        changers = list(suspects)
    else:
        for name in sorted(suspects):
            alone = await prober.compare_detail(template, url.with_only(kept | {name}), canonical)
            if _changed(prober, template, alone):
                changers.append(name)
    # Only together did they change the page: confirmed, all of them are kept.
    groups = [frozenset({name}) for name in changers] or [suspects]
    confirmed: set[str] = set()
    unconfirmed = 0
    for group in groups:
        original = url.with_only(kept | group)
        first = (prober.fetched(original), prober.fetched(canonical))
        if await _confirmed(prober, template, original, canonical, first):
            confirmed |= group
        else:
            unconfirmed += 1
    return confirmed, unconfirmed


async def _confirmed(
    prober: PageProber,
    template: str,
    original: str,
    canonical: str,
    first: tuple[Snapshot | None, Snapshot | None],
) -> bool:
    """Whether :data:`CONFIRMATIONS` comparisons on fresh fetches each show the change
    first seen (:func:`_same_change`). One is not enough where the noise of a template is
    little known (a domain audited rarely): a block rotating among three variants repeats
    both pages' variants once in nine, and a restore keeps a parameter in a whole path
    shape."""
    for _ in range(CONFIRMATIONS):
        fresh = PageProber(prober.fetcher, prober.volatility, journal=prober.journal)
        again = await fresh.compare_detail(template, original, canonical)
        if not (
            _changed(fresh, template, again)
            and _same_change(again, first, (fresh.fetched(original), fresh.fetched(canonical)))
        ):
            return False
    return True


def _changed(prober: PageProber, template: str, comparison: Comparison) -> bool:
    return comparison.outcome is Outcome.CHANGED and prober.still_changed(template, comparison)


def _same_change(
    comparison: Comparison,
    before: tuple[Snapshot | None, Snapshot | None],
    after: tuple[Snapshot | None, Snapshot | None],
) -> bool:
    """Whether the confirming comparison shows the change seen first: a block that differs
    now and holds, with the parameters and without them, what it held the first time. A
    parameter changes an item the same way each time; a block rotating by itself (a promo
    among three) may differ on both comparisons, and repeat on the refetches that should
    have shown it moving, but rarely repeats both pages' variants as well."""
    if STATUS_KEY in comparison.differences:
        return True
    pairs = list(zip(before, after, strict=True))
    for key in comparison.differences:
        if all(
            old is not None and new is not None and old.blocks.get(key) == new.blocks.get(key)
            for old, new in pairs
        ):
            return True
    return False


def _restored(
    patterns: dict[str, PatternDecision], shape: str, name: str
) -> dict[str, PatternDecision]:
    """The patterns that keep ``name`` again: those of ``shape`` that drop it, and those
    anywhere that drop it on the domain's evidence, which this change refutes."""
    now = utc_now()
    restored: dict[str, PatternDecision] = {}
    for pattern, decision in patterns.items():
        if name not in decision.dropped:
            continue
        evidence = decision.params.get(name, ParamEvidence("drop", Layer.LEARNED))
        if split_pattern(pattern)[0] != shape and evidence.layer != Layer.DOMAIN:
            continue
        params = dict(decision.params)
        params[name] = replace(
            evidence,
            decision="keep",
            layer=Layer.LEARNED,
            samples=evidence.samples + 1,
            changed=evidence.changed + 1,
            default_values=[],
        )
        restored[pattern] = replace(
            decision,
            kept=decision.kept | {name},
            dropped=decision.dropped - {name},
            params=params,
            decided_at=now,
        )
    return restored
