"""Running the installed ``miqps`` command as external tools do: a real process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

MIQPS = str(Path(sys.executable).with_name("miqps"))


def run(*args: str, stdin: str = "", timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [MIQPS, *args], input=stdin, capture_output=True, text=True, timeout=timeout, check=False
    )
