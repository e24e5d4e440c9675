"""The Faust worker of ``miqps worker``: what it does when the broker goes away as it starts,
and when an error it cannot classify stops it."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

WORKER = """
    import os, sys
    from pathlib import Path
    if os.environ.get("STARTED_AGAIN"):
        print("started again", flush=True)
        raise SystemExit(0)
    os.environ["STARTED_AGAIN"] = "1"
    import faust
    from streams.worker.app import create_app
    from streams.worker.runtime import Runtime
    from streams.settings import Settings
    from streams.worker.process import StreamWorker
    if sys.argv[3] == "unclassified":
        async def fail(app: faust.App) -> None:
            raise ValueError("an error no Kafka client classifies")
        faust.App.on_first_start = fail
    settings = Settings.from_env({"KAFKA_BOOTSTRAP_SERVERS": sys.argv[2]})
    settings = settings.with_overrides(state_dir=Path(sys.argv[1]))
    partitions = {name: 1 for name in settings.topics.all().values()}
    runtime = Runtime(settings, frozenset({"probe"}), partitions, 5.0)
    worker = StreamWorker(create_app(runtime), runtime=runtime, loglevel="INFO")
    raise SystemExit(worker.run())
"""


def run_worker(state: Path, bootstrap: str, failure: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(WORKER), str(state), bootstrap, failure],
        capture_output=True,
        timeout=120,
    )


def unused_address() -> str:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{unused.getsockname()[1]}"


def test_a_broker_lost_while_the_services_start_starts_the_worker_again(tmp_path: Path) -> None:
    """The broker answered the worker's first check, then went away while Faust's services
    started (creating a changelog topic, say): the worker starts again, to wait for the
    broker, rather than exiting."""
    done = run_worker(tmp_path / "state", unused_address(), "none")
    assert b"Unable to bootstrap" in done.stderr, done.stderr[-3000:]
    assert done.stdout == b"started again\n", done.stderr[-3000:]
    assert done.returncode == 0
    assert b"Kafka became unreachable (KafkaConnectionError" in done.stderr


def test_a_worker_stopped_by_an_unclassified_error_without_a_broker_starts_again(
    tmp_path: Path,
) -> None:
    done = run_worker(tmp_path / "state", unused_address(), "unclassified")
    assert done.stdout == b"started again\n", done.stderr[-3000:]
    assert (
        b"worker: stopped by ValueError: an error no Kafka client classifies, "
        b"and Kafka does not answer now" in done.stderr
    ), done.stderr[-3000:]


@pytest.mark.timeout(180)
def test_a_worker_stopped_by_an_unclassified_error_with_its_broker_up_exits_saying_why(
    tmp_path: Path, bootstrap: str
) -> None:
    done = run_worker(tmp_path / "state", bootstrap, "unclassified")
    assert done.stdout == b"", done.stderr[-3000:]
    assert done.returncode == 1, done.stderr[-3000:]
    last = done.stderr.decode().strip().splitlines()[-1]
    assert "worker: stopped by ValueError: an error no Kafka client classifies; " in last
    assert "exiting with code 1" in last
