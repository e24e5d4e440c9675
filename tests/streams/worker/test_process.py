"""The Faust worker of ``miqps worker``: what it does when the broker goes away as it starts."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path


def test_a_broker_lost_while_the_services_start_starts_the_worker_again(tmp_path: Path) -> None:
    """The broker answered the worker's first check, then went away while Faust's services
    started (creating a changelog topic, say): the worker starts again, to wait for the
    broker, rather than exiting."""
    script = textwrap.dedent("""
        import os, socket, sys
        from pathlib import Path
        if os.environ.get("STARTED_AGAIN"):
            print("started again", flush=True)
            raise SystemExit(0)
        os.environ["STARTED_AGAIN"] = "1"
        from streams.worker.app import create_app
        from streams.worker.runtime import Runtime
        from streams.settings import Settings
        from streams.worker.process import StreamWorker
        with socket.socket() as unused:
            unused.bind(("127.0.0.1", 0))
            gone = f"127.0.0.1:{unused.getsockname()[1]}"
        settings = Settings.from_env({"KAFKA_BOOTSTRAP_SERVERS": gone})
        settings = settings.with_overrides(state_dir=Path(sys.argv[1]))
        partitions = {name: 1 for name in settings.topics.all().values()}
        runtime = Runtime(settings, frozenset({"probe"}), partitions, 5.0)
        worker = StreamWorker(create_app(runtime), runtime=runtime, loglevel="INFO")
        raise SystemExit(worker.run())
    """)
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "state")],
        capture_output=True,
        timeout=120,
    )
    assert b"Unable to bootstrap" in done.stderr, done.stderr[-3000:]
    assert done.stdout == b"started again\n", done.stderr[-3000:]
    assert done.returncode == 0
    assert b"Kafka became unreachable (KafkaConnectionError" in done.stderr
