"""The compiled per-URL path of miqps (``native/src/lib.rs``): its interface, for mypy.

maturin ships this file in the wheel with ``py.typed``; ``pyproject.toml`` puts ``native/``
on mypy's path, so ``mypy --strict`` checks every call into the module with or without it
built. A plan table is numbered ``table`` on both sides (``Canonicalizer`` hands the
numbers out); a plan is given as its spec ``(kept indexes or None, size, defaults, then)``.
"""

from collections.abc import Sequence
from typing import Any, final

__all__ = ["Core", "Miss", "may_hold_fraction", "pattern_facts", "pattern_with_wrong_names"]

_PlanSpec = tuple[tuple[int, ...] | None, int, tuple[str, ...], str | None]
_Decided = tuple[str, str, tuple[str, ...], tuple[str, ...], int]
"""``decide_text``'s answer: canonical URL, pattern, kept names, dropped names, and the
number of the plan table that answered (0: the URL has no parameter)."""

@final
class Miss:
    """No plan is known yet for ``key`` in the plan table numbered ``table`` (of
    ``domain``, None for the unmapped table): compute it, ``add_plan`` it, ask again.
    With maps loaded on demand, table 0 means ``domain`` has no table yet: ``install`` its
    map or ``mark_absent`` it, ask again; ``key`` is then the URL's pattern (empty without
    parameters)."""

    @property
    def domain(self) -> str | None: ...
    @property
    def table(self) -> int: ...
    @property
    def key(self) -> str: ...
    @property
    def names(self) -> list[str]: ...

@final
class Core:
    def __init__(self) -> None: ...
    def install(
        self,
        domain: str,
        table: int,
        version: int,
        learned: Sequence[tuple[str, Sequence[str] | None]],
        oldest_decision: float,
    ) -> None: ...
    def forget(self, domain: str) -> None: ...
    def set_on_demand(self, on: bool) -> None:
        """Load maps on demand: a host without a table is a miss of table 0 until it is
        installed or marked absent."""
    def mark_absent(self, domain: str) -> None: ...
    def take_touched(self, domains: list[str]) -> list[bool]:
        """Whether each domain's table answered a URL since the last look; clears the marks."""
    def reset(self, table: int) -> None: ...
    def add_plan(self, domain: str | None, table: int, key: str, spec: _PlanSpec) -> None: ...
    def canonical_texts(self, texts: list[str]) -> tuple[list[str | Miss | None], list[int]]:
        """The answers for ``texts``, in order: a canonical URL, None (out of the common
        case) or a ``Miss``; and the indexes of those that are not a canonical URL."""
    def canonical_lines(
        self, block: str
    ) -> tuple[list[bytes], list[int], list[str], list[Miss | None]] | None:
        """For the lines of ``block``: the output cut where a line is not answered, and
        those lines' indexes, texts and answers; None when ``block`` is not valid UTF-8."""
    def front_batch(
        self,
        values: list[bytes | None],
        max_bytes: int,
        due_before: float,
        audit_below: int,
        seed: str,
    ) -> tuple[list[bytes | Miss | None], list[bytes | None], list[int], int]:
        """Each value's ``urls.canonical`` record, None or a ``Miss``; the records' keys;
        the indexes of the answers that are not records; how many are of learned patterns."""
    def decide_text(self, text: str) -> _Decided | Miss | None: ...

def pattern_facts(patterns: dict[str, Any]) -> tuple[bytes, list[str], dict[str, str]]:
    """Of each pattern of a map document's ``patterns`` (the schema checked), its facts
    record entry (kept, dropped and without-evidence names sorted, default values, decided
    at, URLs seen), all as the JSON object orjson writes of them; the names some pattern
    learned to keep, sorted; when each was decided."""

def pattern_with_wrong_names(patterns: dict[str, Any]) -> str | None:
    """The first pattern whose kept and dropped names are not its key's names, or None."""

def may_hold_fraction(raw: bytes) -> bool:
    """Whether the JSON text may hold a number with a fraction or an exponent."""
