"""Which per-URL path runs, and why, is said where an operator looks: ``miqps --version``,
the worker's start-up log and its ``miqps_build_info`` metric (tests/streams), all from
:func:`miqps.native.canonicalizer_path`, the rule the canonicalizer follows."""

from __future__ import annotations

import os
import subprocess
from importlib.metadata import version
from pathlib import Path

import pytest

from miqps.canonical import Canonicalizer
from miqps.native import canonicalizer_path, compiled_classes
from tests.miqps.cli.support import MIQPS


def _version_output(**environment: str) -> str:
    result = subprocess.run(
        [MIQPS, "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **environment},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_version_says_the_python_path_runs_under_miqps_native_0() -> None:
    assert _version_output(MIQPS_NATIVE="0") == (
        f"miqps {version('miqps')}\ncanonicalizer path: python (MIQPS_NATIVE=0)\n"
    )


def test_version_says_why_the_compiled_module_did_not_import(tmp_path: Path) -> None:
    broken = tmp_path / "miqps_native"
    broken.mkdir()
    (broken / "__init__.py").write_text('raise ImportError("built for another Python")\n')
    output = _version_output(PYTHONPATH=str(tmp_path))
    assert output.splitlines()[1] == (
        "canonicalizer path: python (miqps_native failed to import: built for another Python)"
    )


def test_version_says_the_compiled_path_runs_when_it_is_built() -> None:
    if compiled_classes() is None:
        if os.environ.get("MIQPS_REQUIRE_NATIVE") == "1":
            raise ImportError("miqps_native is not built, and MIQPS_REQUIRE_NATIVE=1 needs it")
        pytest.skip("miqps_native is not built (scripts/setup builds it with cargo)")
    output = _version_output(MIQPS_NATIVE="1")
    assert output.splitlines()[1] == "canonicalizer path: compiled (miqps_native imported)"


def test_the_canonicalizer_runs_the_path_the_rule_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIQPS_NATIVE", "0")
    assert not Canonicalizer().native
    assert Canonicalizer().path == canonicalizer_path() == canonicalizer_path(None)
    assert canonicalizer_path().reason == "MIQPS_NATIVE=0"
    monkeypatch.delenv("MIQPS_NATIVE")
    canonicalizer = Canonicalizer()
    assert canonicalizer.native is (canonicalizer.path.name == "compiled")
    assert canonicalizer.path == canonicalizer_path()
    assert Canonicalizer(native=False).path.reason == "native=False"
