"""A private single-node broker (``scripts/kafka-local``) that a test or benchmark may stop
and start at will, on free ports in a home of its own: the shared broker on 9092 is never
touched. The Kafka jars come from the repository's Maven cache, so nothing is downloaded
twice."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path
from types import TracebackType

REPO_ROOT = Path(__file__).resolve().parents[1]
SCRIPT = REPO_ROOT / "scripts" / "kafka-local"
START_TIMEOUT = 180.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def maven_cache() -> Path:
    """``KAFKA_LOCAL_M2`` if set, else the repository's ``.cache/m2``."""
    return Path(os.environ.get("KAFKA_LOCAL_M2") or REPO_ROOT / ".cache" / "m2")


class LocalBroker:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.port = free_port()
        self.controller_port = free_port()
        while self.controller_port == self.port:
            self.controller_port = free_port()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _run(self, command: str) -> None:
        env = dict(os.environ, KAFKA_LOCAL_PORT=str(self.port),
                   KAFKA_LOCAL_CONTROLLER_PORT=str(self.controller_port),
                   KAFKA_LOCAL_HOME=str(self.home), KAFKA_LOCAL_M2=str(maven_cache()))
        done = subprocess.run([str(SCRIPT), command], env=env, capture_output=True,
                              timeout=START_TIMEOUT)
        if done.returncode != 0:
            raise RuntimeError(f"kafka-local {command} failed ({done.returncode}): "
                               f"{done.stderr.decode(errors='replace')[-2000:]}")

    def start(self) -> LocalBroker:
        self._run("start")
        return self

    def stop(self) -> None:
        self._run("stop")

    def __enter__(self) -> LocalBroker:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
