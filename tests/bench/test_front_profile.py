"""The per-URL profile runs on the front as it is: its steps and whole batch path."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from miqps.canonical import Canonicalizer

REPO = Path(__file__).resolve().parents[2]


def test_the_profile_times_every_step_and_the_whole_batch_path() -> None:
    """The benchmark runs as a user runs it (a test imports no benchmark)."""
    profile = ["bench.front_profile", "--urls", "2000", "--domains", "50", "--repeat", "1"]
    done = subprocess.run(
        [sys.executable, "-m", *profile],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    rows = dict(re.findall(r"^\| ([^|]+) \| ([\d.]+) \|", out, re.MULTILINE))
    compiled = {"the compiled batch step (Canonicalizer.stream_records)"}
    assert set(rows) == {
        "can_ada.parse (floor)",
        "miqps.urls.parse",
        "decode_input (parse included)",
        "decide",
        "encode the output",
        "due for re-verification",
        "_process, whole batch path",
    } | (compiled if Canonicalizer().native else set())
    assert re.search(r"^_process on its first pass .*: [\d.]+ µs per URL$", out, re.MULTILINE)
    # Every step was timed. (Which step costs more is the benchmark's figure, measured
    # separately: comparing two timings here would fail on a loaded machine.)
    assert all(float(value) > 0 for value in rows.values())
