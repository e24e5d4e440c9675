"""The revision a benchmark compares against: the one before a file's last change."""

from __future__ import annotations

import subprocess


def before_last_change(path: str) -> str:
    """The revision before the last commit that changed ``path``."""
    log = subprocess.run(
        ["git", "log", "-n", "1", "--format=%H", "--", path],
        check=True,
        capture_output=True,
        text=True,
    )
    return log.stdout.strip() + "~1"
