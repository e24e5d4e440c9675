"""docker-compose.yml and the Dockerfile, checked without a Docker engine: structure, and
that every command they run exists in this project and accepts its arguments."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from streams.cli.worker import worker_parser
from streams.settings import Settings, Topics
from streams.worker.runtime import ROLES

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document = yaml.safe_load((REPO / "docker-compose.yml").read_text("utf-8"))
    assert isinstance(document, dict)
    return document


def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found = compose["services"]
    assert isinstance(found, dict)
    return found


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    assert isinstance(env, dict), "environment as a mapping"
    return {str(key): str(value) for key, value in env.items()}


def worker_args(command: list[str]) -> list[str]:
    """The arguments after ``miqps worker`` or ``python -m streams worker``."""
    if command[:2] == ["miqps", "worker"]:
        return command[2:]
    if command[:4] == ["python", "-m", "streams", "worker"]:
        return command[4:]
    raise AssertionError(f"not a worker command: {command}")


def test_kafka_runs_in_kraft_mode_without_zookeeper(compose: dict[str, Any]) -> None:
    found = services(compose)
    assert not any(
        "zookeeper" in name or "zookeeper" in str(s.get("image", "")) for name, s in found.items()
    )
    kafka = found["kafka"]
    assert str(kafka["image"]).startswith("apache/kafka:")
    env = environment(kafka)
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"].startswith(f"{env['KAFKA_NODE_ID']}@kafka:")
    assert "CONTROLLER" in env["KAFKA_CONTROLLER_LISTENER_NAMES"]
    assert env["CLUSTER_ID"], "KRaft storage needs a cluster id"
    assert "healthcheck" in kafka


def test_topics_are_created_once_kafka_is_healthy(compose: dict[str, Any]) -> None:
    topics = services(compose)["topics"]
    args = worker_parser().parse_args(worker_args(topics["command"]))
    assert args.create_topics_only
    assert topics["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert environment(topics)["KAFKA_BOOTSTRAP_SERVERS"] == "kafka:9092"


@pytest.mark.parametrize(("name", "role"), [("canonicalizer", "canonicalize"), ("prober", "probe")])
def test_workers_run_one_role_each_after_the_topics(
    compose: dict[str, Any], name: str, role: str
) -> None:
    service = services(compose)[name]
    args = worker_parser().parse_args(worker_args(service["command"]))
    assert not args.create_topics_only
    env = environment(service)
    assert env["MIQPS_AGENTS"] == role and role in ROLES
    assert env["KAFKA_BOOTSTRAP_SERVERS"] == "kafka:9092"
    assert env["MIQPS_STATE_DIR"]
    assert service["depends_on"]["topics"]["condition"] == "service_completed_successfully"
    assert service["deploy"]["replicas"] >= 1
    assert service.get("build") == "." or service.get("image")
    for key in env:
        if key.startswith("MIQPS_TOPIC_"):
            assert key in Topics.ENV.values() or key == "MIQPS_TOPIC_PREFIX"


def test_the_commands_exist_in_the_project(compose: dict[str, Any]) -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))
    assert project["project"]["scripts"]["miqps"] == "miqps.cli:main"
    commands = project["project"]["entry-points"]["miqps.commands"]
    assert commands["worker"] == "streams.cli.worker", "`miqps worker` is registered"
    assert (REPO / "streams" / "__main__.py").exists()
    assert "streams" in project["project"]["optional-dependencies"]
    for service in services(compose).values():
        command = service.get("command")
        if command is not None:
            worker_args(command)


def copied_sources(dockerfile: str) -> list[str]:
    """The build context's paths the Dockerfile copies (not what it copies between stages)."""
    return [
        source
        for line in dockerfile.splitlines()
        if line.startswith("COPY ") and not line.startswith("COPY --from=")
        for source in line.split()[1:-1]
    ]


def test_the_dockerfile_installs_the_stream_extra_from_files_that_exist() -> None:
    dockerfile = (REPO / "Dockerfile").read_text("utf-8")
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.1[1-9]", dockerfile, re.M)
    assert '".[streams]"' in dockerfile
    for source in copied_sources(dockerfile):
        assert (REPO / source).exists(), source
    assert re.search(r'^CMD \["miqps", "worker"\]', dockerfile, re.M)


def test_the_dockerfile_compiles_native_in_a_stage_the_image_does_not_keep() -> None:
    dockerfile = (REPO / "Dockerfile").read_text("utf-8")
    stages = re.split(r"^FROM ", dockerfile, flags=re.M)[1:]
    assert len(stages) >= 2, "a builder stage and the final one"
    assert all(stage.startswith("${PYTHON_IMAGE}") for stage in stages), "one base, an argument"
    builder, final = stages[0], stages[-1]
    assert "native" in copied_sources(builder) and "maturin build" in builder
    assert re.search(r"\bcargo\b", builder) and re.search(r"\bg\+\+", builder)
    assert "COPY --from=builder" in final
    assert not re.search(r"apt-get|\bcargo\b|rustc|\bgcc\b|g\+\+", final), "no compiler"
    assert "canonicalizer path: compiled" in final, "the build fails without the compiled path"


def shipped_packages() -> set[str]:
    """The top-level packages the wheel is built from, as ``pyproject.toml`` selects them."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))
    include = project["tool"]["setuptools"]["packages"]["find"]["include"]
    return {pattern.removesuffix("*") for pattern in include}


def test_the_image_holds_the_shipped_packages_and_no_rig(compose: dict[str, Any]) -> None:
    dockerfile = (REPO / "Dockerfile").read_text("utf-8")
    copied = {source.rstrip("/") for source in copied_sources(dockerfile)}
    python_packages = {source for source in copied if (REPO / source / "__init__.py").exists()}
    assert python_packages == shipped_packages() == {"miqps", "streams"}
    for service in services(compose).values():
        command = service.get("command") or []
        if service.get("build") and command[:2] == ["python", "-m"]:
            assert command[2].split(".")[0] in shipped_packages(), command


def mounts(service: dict[str, Any]) -> dict[str, Path]:
    """Container path -> the repository path bound there (named volumes left out)."""
    found = {}
    for volume in service.get("volumes", []):
        source, target = str(volume).split(":")[:2]
        if source.startswith("./"):
            found[target] = REPO / source
    return found


def worker_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The services that run a worker (not the one that only creates the topics)."""
    return {
        name: service
        for name, service in services(compose).items()
        if service.get("command")
        and service["command"][:2] == ["miqps", "worker"]
        and not worker_parser().parse_args(worker_args(service["command"])).create_topics_only
    }


def test_prometheus_scrapes_every_worker_service_on_its_metrics_port(
    compose: dict[str, Any],
) -> None:
    prometheus = services(compose)["prometheus"]
    assert str(prometheus["image"]).startswith("prom/prometheus:")
    assert "command" not in prometheus, "the image's own command reads the default path"
    config_path = mounts(prometheus)["/etc/prometheus/prometheus.yml"]
    config = yaml.safe_load(config_path.read_text("utf-8"))
    targets: dict[str, int] = {}
    for job in config["scrape_configs"]:
        for discovery in job["dns_sd_configs"]:
            assert discovery["type"] == "A"
            for name in discovery["names"]:
                targets[name] = int(discovery["port"])
    workers = worker_services(compose)
    assert set(workers) == {"canonicalizer", "prober"}
    assert set(targets) == set(workers), "one scrape job per worker service, no stale one"
    for name, service in workers.items():
        port = Settings.from_env(
            {"MIQPS_METRICS_PORT": environment(service).get("MIQPS_METRICS_PORT", "")}
        ).metrics_port
        assert port is not None and targets[name] == port, name


def test_grafana_is_provisioned_with_prometheus_and_the_dashboard(compose: dict[str, Any]) -> None:
    found = services(compose)
    grafana = found["grafana"]
    assert str(grafana["image"]).startswith("grafana/grafana:")
    bound = mounts(grafana)
    provisioning = bound["/etc/grafana/provisioning"]
    [source] = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text("utf-8"))[
        "datasources"
    ]
    prometheus_port = str(found["prometheus"]["ports"][0]).split(":")[-1]
    assert source["type"] == "prometheus"
    assert source["url"] == f"http://prometheus:{prometheus_port}"
    [provider] = yaml.safe_load((provisioning / "dashboards" / "miqps.yml").read_text("utf-8"))[
        "providers"
    ]
    dashboards = bound[provider["options"]["path"]]
    [dashboard_file] = dashboards.glob("*.json")
    dashboard = json.loads(dashboard_file.read_text("utf-8"))
    panels = dashboard["panels"]
    assert panels
    for panel in panels:
        assert panel["datasource"]["uid"] == source["uid"], panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == source["uid"]
            # tests/streams/ops/test_metrics.py checks these names against a real worker's scrape
            assert re.search(r"\bmiqps_[a-z_]+", target["expr"]), target["expr"]


def test_the_workers_state_tmpfs_belongs_to_the_images_user(compose: dict[str, Any]) -> None:
    """A tmpfs is root's unless told otherwise, and the image runs as its own user."""
    found = re.search(r"useradd .*--uid (\d+)", (REPO / "Dockerfile").read_text("utf-8"))
    assert found, "the image's user has a fixed uid"
    for name, service in worker_services(compose).items():
        state = environment(service)["MIQPS_STATE_DIR"]
        mounts = {str(entry).split(":")[0]: str(entry) for entry in service["tmpfs"]}
        assert f"uid={found.group(1)}" in mounts[state], name
