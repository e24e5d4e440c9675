"""The ``miqps dashboard`` command, run as a user runs it."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path


def test_the_command_says_when_it_cannot_listen() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [str(Path(sys.executable).with_name("miqps")), "dashboard", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
    for bad in ("70000", "web"):
        done = subprocess.run(
            [str(Path(sys.executable).with_name("miqps")), "dashboard", "--port", bad],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2
        assert "--port" in done.stderr and "Traceback" not in done.stderr
