"""A private broker or cluster (``scripts/kafka-local``) that a test or benchmark may stop,
kill and start at will, on free ports in a home of its own: the shared broker on 9092 is
never touched. The Kafka jars come from the repository's Maven cache, so nothing is
downloaded twice."""

from __future__ import annotations

import contextlib
import os
import random
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

REPO_ROOT = Path(__file__).resolve().parents[1]
SCRIPT = REPO_ROOT / "scripts" / "kafka-local"
START_TIMEOUT = 180.0
HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
        return True


def free_port_block(count: int, attempts: int = 200) -> int:
    """The first of ``count`` consecutive free ports (below the usual ephemeral range)."""
    for _ in range(attempts):
        first = random.randrange(20_000, 32_000 - count)
        if all(port_is_free(port) for port in range(first, first + count)):
            return first
    raise RuntimeError(f"no {count} consecutive free ports found on {HOST}")


def maven_cache() -> Path:
    """``KAFKA_LOCAL_M2`` if set, else the repository's ``.cache/m2``."""
    return Path(os.environ.get("KAFKA_LOCAL_M2") or REPO_ROOT / ".cache" / "m2")


class LocalBroker:
    """One broker, or with ``brokers=N`` a cluster of N broker+controller nodes numbered
    1..N (replication factor min(N, 3), ``min.insync.replicas`` min(N, 2))."""

    def __init__(self, home: Path, brokers: int = 1) -> None:
        if brokers < 1:
            raise ValueError(f"a cluster needs at least one broker, not {brokers}")
        self.home = home
        self.brokers = brokers
        if brokers == 1:
            self.port = free_port()
            self.controller_port = free_port()
            while self.controller_port == self.port:
                self.controller_port = free_port()
        else:
            self.port = free_port_block(2 * brokers)
            self.controller_port = self.port + brokers

    @property
    def nodes(self) -> range:
        return range(1, self.brokers + 1)

    def node_bootstrap(self, node: int) -> str:
        return f"{HOST}:{self.port + node - 1}"

    @property
    def bootstrap(self) -> str:
        return ",".join(self.node_bootstrap(node) for node in self.nodes)

    def _run(self, *command: str) -> None:
        env = dict(
            os.environ,
            KAFKA_LOCAL_PORT=str(self.port),
            KAFKA_LOCAL_CONTROLLER_PORT=str(self.controller_port),
            KAFKA_LOCAL_HOME=str(self.home),
            KAFKA_LOCAL_M2=str(maven_cache()),
            KAFKA_LOCAL_BROKERS=str(self.brokers),
        )
        done = subprocess.run(
            [str(SCRIPT), *command], env=env, capture_output=True, timeout=START_TIMEOUT
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"kafka-local {' '.join(command)} failed ({done.returncode}): "
                f"{done.stderr.decode(errors='replace')[-2000:]}"
            )

    def start(self) -> LocalBroker:
        """Start every node; if that fails, stop the ones that did start, then raise."""
        try:
            self._run("start")
            self.wait_for_brokers(self.brokers)
        except BaseException:
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                self.stop()
            raise
        return self

    def stop(self) -> None:
        self._run("stop")

    def kill(self, node: int) -> None:
        """SIGKILL node ``node``, as a crash would."""
        self._run("kill", str(node))

    def start_node(self, node: int) -> None:
        self._run("start", str(node))
        self.wait_for_brokers(self.brokers)

    def wait_for_brokers(self, count: int, timeout: float = START_TIMEOUT) -> None:
        """Until the cluster's metadata lists ``count`` live brokers."""
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        deadline = time.monotonic() + timeout
        while True:
            try:
                live = len(admin.list_topics(timeout=5).brokers)
            except KafkaException:
                live = 0
            if live >= count:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{live} of {count} brokers live at {self.bootstrap} after {timeout:g}s"
                )
            time.sleep(0.5)

    def __enter__(self) -> LocalBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
