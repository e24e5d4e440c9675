"""The suite cannot hang: a test frozen in a native call that holds the GIL (where
pytest-timeout cannot fire) is ended by the hard deadline of tests/conftest.py, with every
thread's stack in the report."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_a_test_frozen_holding_the_gil_ends_the_run_with_every_stack(tmp_path: Path) -> None:
    frozen = tmp_path / "test_frozen.py"
    frozen.write_text(
        textwrap.dedent("""
            import threading
            import pytest
            from tests.streams.worker.freezehook.sitecustomize import freeze_holding_the_gil

            @pytest.mark.timeout(1)
            def test_frozen():
                threading.Thread(target=lambda: threading.Event().wait(), name="bystander").start()
                freeze_holding_the_gil()
        """)
    )
    report = tmp_path / "deadline.txt"
    env = {
        **os.environ,
        "MIQPS_TEST_DEADLINE_REPORT": str(report),
        "MIQPS_TEST_DEADLINE_GRACE": "2",
        "PYTHONPATH": str(REPO),
    }
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-q", str(frozen)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        timeout=120,
    )
    took = time.monotonic() - started
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    text = report.read_text()
    assert "test_frozen.py::test_frozen passed its hard deadline of 3s" in text
    assert "freeze_holding_the_gil" in text, text
    assert text.count("Thread 0x") >= 2, f"every thread's stack: {text}"
    assert took < 60, f"ended after {took:.0f}s"
