"""The per-URL profile runs on the front as it is: its steps and whole batch path."""

from __future__ import annotations

import re

import pytest

from bench.front_profile import main
from miqps.canonical import Canonicalizer


def test_the_profile_times_every_step_and_the_whole_batch_path(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--urls", "2000", "--domains", "50", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
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
    # The whole batch path includes the decision: the compiled step's, or decide's.
    part = next(iter(compiled)) if compiled <= set(rows) else "decide"
    assert float(rows["_process, whole batch path"]) > float(rows[part]) > 0
