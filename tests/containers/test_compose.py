"""The deployment of docker-compose.yml, started: Kafka, topic creation, 2 canonicalizers and a
prober on the images ``scripts/test-containers`` builds, with the simulated web as a service of
the same network (tests/containers/compose.test.yml). The test reaches Kafka from the host.

Runs only under ``scripts/test-containers`` (which sets ``MIQPS_CONTAINER_TEST=1`` once the
images exist); skipped anywhere else. The tests run in order on one deployment.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from simweb.corpus import generate_corpus
from simweb.sites import build_sites
from streams.settings import Settings

REPO = Path(__file__).resolve().parents[2]
PROJECT = "miqps-containers-test"
IMAGE = os.environ.get("MIQPS_TEST_IMAGE", "miqps:containers-test")
KAFKA_PORT = int(os.environ.get("MIQPS_TEST_KAFKA_PORT", "39092"))
COMPOSE = [
    "docker",
    "compose",
    "-p",
    PROJECT,
    "-f",
    str(REPO / "docker-compose.yml"),
    "-f",
    str(REPO / "tests" / "containers" / "compose.test.yml"),
]
# What the test starts: Prometheus and Grafana stay out (no registry to pull them from).
SERVICES = ["kafka", "topics", "canonicalizer", "prober", "simweb"]
SITES = 3  # as compose.test.yml's simweb serves them: family "tuning", seed 0
URLS_PER_SITE = 100
STEADY_SECONDS = 15  # how long the workers must stay up after the deployment has started

pytestmark = [
    pytest.mark.containers,
    pytest.mark.timeout(900),
    pytest.mark.skipif(
        os.environ.get("MIQPS_CONTAINER_TEST") != "1",
        reason="needs the images of scripts/test-containers, which runs this test",
    ),
]


def run(command: list[str], timeout: float, what: str) -> str:
    """``command``'s stdout; an AssertionError naming ``what`` if it fails or takes longer."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        message = f"{what}: no answer within {timeout:g}s ({' '.join(command)})"
        raise AssertionError(message) from None
    if done.returncode != 0:
        raise AssertionError(
            f"{what} failed (exit {done.returncode}): {' '.join(command)}\n"
            f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        )
    return done.stdout


def logs(tail: int = 40) -> str:
    """The deployment's last log lines, for a failure's message."""
    try:
        done = subprocess.run(
            [*COMPOSE, "logs", "--no-color", "--tail", str(tail)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except subprocess.TimeoutExpired:
        return "(docker compose logs did not answer)"
    return done.stdout[-6000:] + done.stderr[-1000:]


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}\n{logs()}")
        time.sleep(1.0)


def containers(service: str) -> list[dict[str, Any]]:
    """``docker compose ps`` of one service, every container, running or not."""
    out = run([*COMPOSE, "ps", "--all", "--format", "json", service], 60, "docker compose ps")
    found = [json.loads(line) for line in out.splitlines() if line.strip()]
    return [c for c in found if isinstance(c, dict)]


def leftovers() -> dict[str, list[str]]:
    """The project's containers, networks and volumes that still exist."""
    label = f"label=com.docker.compose.project={PROJECT}"
    found = {}
    for kind, command in {
        "containers": ["docker", "ps", "--all", "--quiet", "--filter", label],
        "networks": ["docker", "network", "ls", "--quiet", "--filter", label],
        "volumes": ["docker", "volume", "ls", "--quiet", "--filter", label],
    }.items():
        found[kind] = run(command, 60, f"listing {kind}").split()
    return found


def assert_workers_steady() -> None:
    """Every worker container runs and has not been restarted: a worker that dies at start
    is running now and then between the restarts of its policy."""
    for service in ("canonicalizer", "prober"):
        for container in containers(service):
            name = container["Name"]
            restarts = run(
                ["docker", "inspect", "--format", "{{.RestartCount}}", name],
                60,
                f"docker inspect {name}",
            ).strip()
            assert container["State"] == "running" and restarts == "0", (
                f"{name} does not stay up ({container['State']}, {restarts} restarts)\n{logs()}"
            )


def down() -> None:
    run([*COMPOSE, "down", "--volumes", "--timeout", "30"], 300, "docker compose down -v")


@dataclass
class Deployment:
    settings: Settings
    stopped: bool = False
    killed: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def deployment() -> Iterator[Deployment]:
    run([*COMPOSE, "version"], 60, "docker compose (scripts/test-containers installs it)")
    if any(leftovers().values()):
        down()
    started = Deployment(Settings.from_env({"KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{KAFKA_PORT}"}))
    try:
        try:
            # Waits for Kafka's healthcheck and the topics job before it starts the workers.
            run([*COMPOSE, "up", "--detach", "--no-build", *SERVICES], 600, "docker compose up")
        except AssertionError as error:
            raise AssertionError(f"{error}\n{logs()}") from None
        [topics] = containers("topics")
        assert topics["State"] == "exited" and topics["ExitCode"] == 0, (topics, logs())
        wait_until(
            lambda: sum(c["State"] == "running" for c in containers("canonicalizer")) == 2,
            120,
            "2 canonicalizers to run",
        )
        time.sleep(STEADY_SECONDS)
        assert_workers_steady()
        yield started
    finally:
        if not started.stopped:
            down()


def produce(settings: Settings, run_number: int, start: int = 0) -> list[bytes]:
    """Send the corpus as run ``run_number``, numbered from ``start``; return what was sent."""
    from testkit.tools import produce as send

    sites = build_sites("tuning", SITES, 0)
    corpus = generate_corpus(sites, URLS_PER_SITE, run_number)
    values = [
        json.dumps({"url": item.url, "run": run_number, "seq": start + number}).encode()
        for number, item in enumerate(corpus)
    ]
    send(settings, settings.topics.raw, values)
    return values


class Outputs:
    """The canonical URLs of one run so far, read from the deployment's output topic."""

    def __init__(self, settings: Settings, run_number: int) -> None:
        from testkit.tools import TopicReader

        self.reader = TopicReader(settings, settings.topics.canonical)
        self.run = run_number
        self.documents: list[dict[str, Any]] = []
        self._read = 0

    def update(self) -> set[int]:
        self.reader.poll(0.5)
        for _, value, _ in self.reader.records[self._read :]:
            if value is not None:
                document = json.loads(value)
                if document.get("meta", {}).get("run") == self.run:
                    self.documents.append(document)
        self._read = len(self.reader.records)
        return {document["meta"]["seq"] for document in self.documents}

    def close(self) -> None:
        self.reader.close()


def accepted_updates(settings: Settings) -> list[dict[str, Any]]:
    from testkit.tools import TopicReader

    with TopicReader(settings, settings.topics.map_updates) as reader:
        reader.poll(2.0)
        documents = [json.loads(value) for _, value, _ in reader.records if value is not None]
    return [document for document in documents if document.get("accepted")]


def test_the_image_runs_the_compiled_path_and_carries_no_compiler() -> None:
    version = run(["docker", "run", "--rm", IMAGE, "miqps", "--version"], 120, "miqps --version")
    assert "canonicalizer path: compiled (miqps_native imported)" in version, (
        f"the image {IMAGE} does not run the compiled per-URL path:\n{version}"
    )
    script = "for c in cargo rustc gcc cc g++ c++ clang; do command -v $c || true; done"
    found = run(
        ["docker", "run", "--rm", "--entrypoint", "sh", IMAGE, "-c", script],
        120,
        "looking for compilers in the image",
    )
    assert not found.split(), f"the image {IMAGE} carries a compiler: {found.split()}"


def test_every_input_gets_a_canonical_url_and_the_maps_are_learned(
    deployment: Deployment,
) -> None:
    settings = deployment.settings
    first = Outputs(settings, 1)
    sent = produce(settings, 1)
    try:
        wait_until(
            lambda: first.update() == set(range(len(sent))),
            300,
            f"a canonical URL for each of the {len(sent)} inputs of the first run",
        )
    finally:
        first.close()
    for document in first.documents:
        assert document["canonical_url"].startswith("http"), document

    # The prober learns the sites' patterns through the simulated web, and the workers apply
    # the maps it publishes: the same URLs sent again come out as learned.
    wait_until(lambda: len(accepted_updates(settings)) >= 3, 300, "map updates")
    second = Outputs(settings, 2)
    try:
        sent = produce(settings, 2)
        wait_until(
            lambda: second.update() == set(range(len(sent))),
            300,
            "a canonical URL for each input of the second run",
        )
    finally:
        second.close()
    learned = [d for d in second.documents if d["status"] == "learned"]
    assert learned, f"no output of the second run used a learned map\n{logs()}"
    assert all(d["map_version"] >= 1 for d in learned)


def test_a_killed_canonicalizer_is_replaced_and_loses_nothing(deployment: Deployment) -> None:
    settings = deployment.settings
    outputs = Outputs(settings, 3)
    sent: list[bytes] = []
    errors: list[BaseException] = []

    def send_slowly() -> None:
        try:
            for _ in range(20):
                sent.extend(produce(settings, 3, start=len(sent)))
                time.sleep(1.5)
        except BaseException as error:  # reported by the test, not lost in the thread
            errors.append(error)

    victim = containers("canonicalizer")[0]["Name"]
    producer = threading.Thread(target=send_slowly, daemon=True)
    producer.start()
    try:
        wait_until(lambda: len(outputs.update()) >= 200, 300, "the third run's outputs to flow")
        run(["docker", "kill", victim], 60, f"docker kill {victim}")
        deployment.killed.append(victim)
        # The other replica takes the killed one's partitions over while it is gone.
        flowing = len(outputs.update())
        wait_until(
            lambda: len(outputs.update()) > flowing + 100,
            300,
            "the surviving canonicalizer to take over",
        )
        # Docker does not restart a killed container (a kill counts as stopped by hand), so
        # it is replaced as an operator would: `up` brings the service back to its replicas.
        run(
            [*COMPOSE, "up", "--detach", "--no-build", "--no-deps", "canonicalizer"],
            300,
            "docker compose up canonicalizer (the replacement)",
        )
        wait_until(
            lambda: sum(c["State"] == "running" for c in containers("canonicalizer")) == 2,
            120,
            "2 canonicalizers to run again",
        )
        producer.join(300)
        assert not producer.is_alive(), "producing the third run took more than 300s"
        assert not errors, errors
        wait_until(
            lambda: outputs.update() == set(range(len(sent))),
            420,
            f"a canonical URL for each of the {len(sent)} inputs sent around the kill",
        )
    finally:
        outputs.close()
    assert len(outputs.documents) >= len(sent)


def test_down_removes_every_container_network_and_volume(deployment: Deployment) -> None:
    down()
    deployment.stopped = True
    left = leftovers()
    assert not any(left.values()), f"docker compose down -v left {left}"
