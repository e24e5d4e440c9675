"""The stream demo and the local broker: a broker the demo starts is stopped when it ends,
one that was running is left running, and the demo says which. Each test runs a private
broker of ``scripts/kafka-local`` (its own home and ports): the shared one is never touched.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from testkit.demo import KAFKA_LOCAL, local_broker
from testkit.localbroker import LocalBroker, maven_cache, port_is_free

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(420)]


def kafka_local_env(broker: LocalBroker) -> dict[str, str]:
    """The environment that points ``scripts/kafka-local`` at ``broker``'s home and ports."""
    return dict(
        os.environ,
        KAFKA_LOCAL_PORT=str(broker.port),
        KAFKA_LOCAL_CONTROLLER_PORT=str(broker.controller_port),
        KAFKA_LOCAL_HOME=str(broker.home),
        KAFKA_LOCAL_M2=str(maven_cache()),
    )


def is_running(env: dict[str, str]) -> bool:
    done = subprocess.run(
        [str(KAFKA_LOCAL), "status"], env=env, capture_output=True, timeout=60, check=False
    )
    return done.returncode == 0


def test_the_demo_stops_the_broker_it_started_and_says_so(tmp_path: Path) -> None:
    broker = LocalBroker(tmp_path / "kafka")  # its home and ports; not started here
    env = kafka_local_env(broker)
    assert not is_running(env)
    try:
        done = subprocess.run(
            [
                *(sys.executable, "-m", "testkit.demo", "--local-broker"),
                *("--sites", "1", "--urls-per-site", "20", "--passes", "1"),
                *("--rate", "200", "--dashboard-port", "-1", "--timeout", "240"),
                *("--state-dir", str(tmp_path / "state")),
            ],
            env={key: value for key, value in env.items() if key != "KAFKA_BOOTSTRAP_SERVERS"},
            capture_output=True,
            text=True,
            timeout=400,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert f"demo: started the local Kafka broker at {broker.bootstrap}" in done.stdout
        assert "URLs in" in done.stdout or "summary" in done.stdout  # the demo itself ran
        assert f"demo: stopped the Kafka broker it started at {broker.bootstrap}" in done.stdout
        assert not is_running(env) and port_is_free(broker.port)
    finally:
        if is_running(env):
            broker.stop()


def test_a_broker_that_was_running_is_left_running_and_the_demo_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broker = LocalBroker(tmp_path / "kafka").start()
    env = kafka_local_env(broker)
    try:
        with local_broker(env=env) as bootstrap:
            assert bootstrap == broker.bootstrap
        out = capsys.readouterr().out
        assert f"using the Kafka broker already running at {bootstrap}" in out
        assert "left running (scripts/kafka-local stop stops it)" in out
        assert is_running(env)
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        assert admin.list_topics(timeout=30).brokers
    finally:
        broker.stop()
