"""A benchmark's command run as its own process: its wall time and peak RSS (from ``wait4``)."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Run:
    peak_mib: float
    seconds: float


def measured(
    command: list[str],
    what: str,
    *,
    stdin: Path | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> Run:
    """Run ``command`` (its input from ``stdin``, its output discarded); raise SystemExit
    naming ``what`` with the end of its stderr if it fails. Its stderr goes to a file, so a
    chatty command cannot block on a full pipe."""
    with (
        open(stdin or os.devnull, "rb") as source,
        tempfile.TemporaryFile() as errors,
    ):
        started = time.perf_counter()
        process = subprocess.Popen(
            command, stdin=source, stdout=subprocess.DEVNULL, stderr=errors, env=env, cwd=cwd
        )
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - started
        if os.waitstatus_to_exitcode(status) != 0:
            errors.seek(0)
            said = errors.read().decode("utf-8", "replace")
            raise SystemExit(f"{what} failed: {said[-2000:]}")
    return Run(usage.ru_maxrss / 1024, seconds)
