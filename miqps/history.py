"""An operator's changes to a domain's map, and what changed between two versions.

Every published version of a map is kept (the stream keeps them on ``miqps.map-history``);
:func:`rollback` makes an old version's content the next version, :func:`with_frozen`
freezes or unfreezes a map (a frozen map is not changed by learning: see
:func:`miqps.update.update_map`), and :func:`diff_maps` says, per pattern, what one version
changed of the one before.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from miqps.maps import DomainMap, GateVerdict, anomaly_gate, utc_now


class Change(StrEnum):
    ADDED = "added"
    REMOVED = "removed"
    CHANGED = "changed"


@dataclass(frozen=True, slots=True)
class PatternChange:
    """How one pattern differs between two versions; ``before`` and ``after`` are its
    (kept, dropped) parameter names, None where the version lacks the pattern."""

    pattern: str
    change: Change
    before: tuple[frozenset[str], frozenset[str]] | None
    after: tuple[frozenset[str], frozenset[str]] | None

    def newly_kept(self) -> frozenset[str]:
        return (self.after or NOTHING)[0] - (self.before or NOTHING)[0]

    def newly_dropped(self) -> frozenset[str]:
        return (self.after or NOTHING)[1] - (self.before or NOTHING)[1]

    def describe(self) -> str:
        if self.change is Change.CHANGED:
            parts = [
                f"{verb} {_names(names)}"
                for verb, names in (
                    ("now keeps", self.newly_kept()),
                    ("now drops", self.newly_dropped()),
                )
                if names
            ]
            return f"{self.pattern}: {'; '.join(parts)}"
        kept, dropped = self.after or self.before or NOTHING
        return f"{self.pattern}: {self.change} (keeps {_names(kept)}; drops {_names(dropped)})"


NOTHING: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())


def _names(names: frozenset[str]) -> str:
    return ", ".join(sorted(names)) or "nothing"


def diff_maps(before: DomainMap | None, after: DomainMap) -> list[PatternChange]:
    """Per pattern, sorted: patterns added, removed, or whose kept or dropped names changed
    (new evidence for the same decision is no change)."""
    old = before.patterns if before is not None else {}
    changes: list[PatternChange] = []
    for pattern in sorted(old.keys() | after.patterns.keys()):
        was = (old[pattern].kept, old[pattern].dropped) if pattern in old else None
        now = after.patterns.get(pattern)
        is_ = (now.kept, now.dropped) if now is not None else None
        if was == is_:
            continue
        change = Change.ADDED if was is None else Change.REMOVED if is_ is None else Change.CHANGED
        changes.append(PatternChange(pattern, change, was, is_))
    return changes


def rollback(
    current: DomainMap, target: DomainMap, *, freeze: bool, max_flip_share: float
) -> tuple[DomainMap, GateVerdict]:
    """The next version of ``current`` with the patterns of ``target`` (an older version),
    frozen if ``freeze`` or if ``current`` was; and the verdict to audit it with: accepted,
    an operator's decision, with what the anomaly gate would have said."""
    if target.domain != current.domain:
        raise ValueError(f"a map of {target.domain} cannot roll back {current.domain}")
    candidate = DomainMap(
        current.domain,
        current.version + 1,
        utc_now(),
        dict(target.patterns),
        frozen=freeze or current.frozen,
    )
    gate = anomaly_gate(current, candidate, max_flip_share)
    opinion = "would have rejected it" if not gate.accepted else "passes it"
    reason = (
        f"operator's rollback to version {target.version}, not subject to the anomaly "
        f"gate (which {opinion}: {gate.reason})"
    )
    return candidate, GateVerdict(True, reason, gate.flipped, gate.kept_before)


def with_frozen(current: DomainMap, frozen: bool) -> DomainMap:
    """The next version of ``current``, the same patterns, frozen or not."""
    return DomainMap(
        current.domain, current.version + 1, utc_now(), dict(current.patterns), frozen=frozen
    )
