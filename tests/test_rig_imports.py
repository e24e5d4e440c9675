"""The rig's layers stay apart: tests never import a benchmark (what a test checks cannot
change with a benchmark's edit) and benchmarks never import tests; what both need is in
``testkit/`` or ``simweb/``. ``tests/bench/`` tests the benchmarks by running them, as a
user does."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _imported(path: Path) -> set[str]:
    """The top-level packages ``path`` imports, wherever in the file."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.partition(".")[0])
    return names


def test_tests_import_no_benchmark() -> None:
    tests = list((ROOT / "tests").rglob("*.py"))
    offenders = sorted(str(p.relative_to(ROOT)) for p in tests if "bench" in _imported(p))
    assert offenders == []


def test_benchmarks_and_the_rig_import_no_test() -> None:
    files = [*(ROOT / "bench").rglob("*.py"), *(ROOT / "testkit").rglob("*.py")]
    files += (ROOT / "simweb").rglob("*.py")
    offenders = sorted(str(p.relative_to(ROOT)) for p in files if "tests" in _imported(p))
    assert offenders == []
