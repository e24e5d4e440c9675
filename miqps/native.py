"""Which per-URL path a :class:`~miqps.canonical.Canonicalizer` runs, and why: the compiled
``miqps_native`` (``native/``, built by ``scripts/setup`` where cargo is) or pure Python.

Both give the same output (a differential test holds them to the same bytes); the compiled
one is faster. ``MIQPS_NATIVE=0`` forces pure Python. :func:`canonicalizer_path` is the one
rule: the canonicalizer follows it, and ``miqps --version``, the worker's start-up log and
its ``miqps_build_info`` metric report it. The walks over a whole map document that storing
a map makes (:func:`compiled_map_walks`: its facts record, the check of its patterns' names,
the look for fractions) follow the same rule.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, Final, Literal, NamedTuple

if TYPE_CHECKING:
    from miqps_native import Core, Miss

ENVIRONMENT: Final = "MIQPS_NATIVE"
COMPILED: Final = "compiled"
PYTHON: Final = "python"


@dataclass(frozen=True, slots=True)
class CanonicalizerPath:
    """The path (``compiled`` or ``python``) and why it is that one."""

    name: Literal["compiled", "python"]
    reason: str

    def __str__(self) -> str:
        return f"{self.name} ({self.reason})"


class MapWalks(NamedTuple):
    """The walks over a map document that :mod:`miqps.maps` and :mod:`miqps.canonical`
    make in Python, compiled (``native/src/facts.rs``)."""

    pattern_facts: Callable[[dict[str, Any]], tuple[bytes, list[str], dict[str, str]]]
    pattern_with_wrong_names: Callable[[dict[str, Any]], str | None]
    may_hold_fraction: Callable[[bytes], bool]


class Compiled(NamedTuple):
    """The classes of ``miqps_native``: its core, and the answer that is a miss; and its
    walks over a map document."""

    core: type[Core]
    miss: type[Miss]
    walks: MapWalks


@cache
def _imported() -> tuple[Compiled | None, str]:
    """The compiled module's classes, or None with the import's error."""
    try:
        from miqps_native import (
            Core,
            Miss,
            may_hold_fraction,
            pattern_facts,
            pattern_with_wrong_names,
        )
    except ImportError as error:
        return None, f"miqps_native failed to import: {error}"
    walks = MapWalks(pattern_facts, pattern_with_wrong_names, may_hold_fraction)
    return Compiled(Core, Miss, walks), ""


def compiled_classes() -> Compiled | None:
    """The compiled path's classes, None when ``miqps_native`` cannot be imported
    (whatever ``MIQPS_NATIVE`` says)."""
    return _imported()[0]


def canonicalizer_path(native: bool | None = None) -> CanonicalizerPath:
    """The path a canonicalizer made now with ``native`` takes: the compiled one unless
    ``native`` is false, ``MIQPS_NATIVE=0`` is set (when ``native`` is None), or
    ``miqps_native`` fails to import."""
    if native is None and os.environ.get(ENVIRONMENT, "1") == "0":
        return CanonicalizerPath(PYTHON, f"{ENVIRONMENT}=0")
    if native is False:
        return CanonicalizerPath(PYTHON, "native=False")
    classes, error = _imported()
    if classes is None:
        return CanonicalizerPath(PYTHON, error)
    return CanonicalizerPath(COMPILED, "miqps_native imported")


def compiled_map_walks() -> MapWalks | None:
    """The compiled walks over a map document, None where the canonicalizer takes the
    pure-Python path (:func:`canonicalizer_path` with no argument: the same rule)."""
    if canonicalizer_path().name != COMPILED:
        return None
    classes = compiled_classes()
    return classes.walks if classes is not None else None
