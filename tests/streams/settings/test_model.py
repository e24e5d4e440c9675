"""The settings model: every variable declared once, read, written back and documented."""

from __future__ import annotations

import re
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import pytest
import yaml

from miqps.fetch import FetchConfig
from miqps.learner import LearnConfig
from streams.front.loop import CanonicalizerFront
from streams.kafka.tables import changelog_topics
from streams.maps.feed import MapFeed
from streams.maps.live import LiveMaps
from streams.settings import (
    LearningPolicy,
    Settings,
    SettingsError,
    Topics,
    Variable,
    documentation_table,
    variables,
)
from testkit.tools import worker_env

REPO = Path(__file__).resolve().parents[3]


def leaf_paths(instance: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths = []
    for item in fields(instance):
        value = getattr(instance, item.name)
        if is_dataclass(value):
            paths += leaf_paths(value, (*prefix, item.name))
        else:
            paths.append((*prefix, item.name))
    return paths


def value_at(settings: Settings, path: tuple[str, ...]) -> Any:
    value: Any = settings
    for name in path:
        value = getattr(value, name)
    return value


def other_value(variable: Variable) -> Any:
    """A valid value of the variable that is not its default."""
    default, annotation = variable.default, variable.annotation
    if get_origin(annotation) is Literal:
        return next(choice for choice in get_args(annotation) if choice != default)
    if get_origin(annotation) is tuple:
        return default[-1:]
    if isinstance(default, bool):
        return not default
    if isinstance(default, int | float):
        smaller = default / 2 if isinstance(default, float) else default - 1
        minimum = variable.env.minimum
        return smaller if minimum is None or smaller >= minimum else default + 1
    if isinstance(default, Path):
        return default / "elsewhere"
    if default is None and Path in get_args(annotation):
        return Path("elsewhere.txt")
    if default is None:
        return 9100 if int in get_args(annotation) else "http://proxy.test:3128"
    return f"{default}-other"


def test_every_setting_has_exactly_one_variable() -> None:
    declared = variables()
    assert sorted(variable.path for variable in declared) == sorted(leaf_paths(Settings()))
    names = [variable.name for variable in declared]
    assert len(names) == len(set(names)) and Topics.PREFIX.name not in names
    assert all(re.fullmatch(r"(MIQPS|KAFKA)_[A-Z_]+", name) for name in names)


@pytest.mark.parametrize("variable", variables(), ids=lambda variable: variable.name)
def test_each_variable_sets_its_field(variable: Variable) -> None:
    value = other_value(variable)
    settings = Settings.from_env({variable.name: variable.format(value)})
    assert value_at(settings, variable.path) == value
    assert settings.with_values({variable.path: variable.default}) == Settings()


def test_settings_survive_the_trip_through_a_child_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MIQPS_PROXY", "http://inherited.test:1")
    monkeypatch.setenv("MIQPS_TOPIC_PREFIX", "inherited.")
    changed = Settings().with_values(
        {
            variable.path: other_value(variable)
            for variable in variables()
            # The proxy is inherited; the repartition hop excludes input keyed by domain.
            if variable.name not in ("MIQPS_PROXY", "MIQPS_REPARTITION_INPUT")
        }
    )
    assert changed.proxy is None
    env = worker_env(changed, {"MIQPS_AGENTS": "probe"})
    assert "MIQPS_PROXY" not in env and env["PYTHONUNBUFFERED"] == "1"
    assert Settings.from_env(env) == changed.with_overrides(agents=("probe",))


def test_core_configs_are_the_cores_own_and_built_from_the_environment() -> None:
    settings = Settings.from_env(
        {
            "MIQPS_LEARN_SAMPLES": "8",
            "MIQPS_LEARN_MIN_CONCLUSIVE": "4",
            "MIQPS_PROBE_RATE": "2.5",
            "MIQPS_PROXY": "http://p.test:8",
        }
    )
    assert settings.learn == LearnConfig(samples=8, min_conclusive=4)
    assert settings.fetch == FetchConfig(per_host_rate=2.5, proxy="http://p.test:8")
    assert (settings.proxy, settings.probe_rate_per_host) == ("http://p.test:8", 2.5)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"MIQPS_PARTITIONS": "abc"}, "MIQPS_PARTITIONS='abc': not an integer"),
        ({"MIQPS_PARTITIONS": "0"}, "MIQPS_PARTITIONS='0': must be at least 1"),
        ({"MIQPS_BATCH_WAIT": "soon"}, "MIQPS_BATCH_WAIT='soon': not a number"),
        ({"MIQPS_RARE_AFTER": "nan"}, "MIQPS_RARE_AFTER='nan': not a finite number"),
        ({"MIQPS_MAX_FLIP_SHARE": "1.5"}, "MIQPS_MAX_FLIP_SHARE='1.5': must be at most 1"),
        ({"MIQPS_ALLOW_PRIVATE": "perhaps"}, "MIQPS_ALLOW_PRIVATE='perhaps': not a yes/no value"),
        ({"MIQPS_ON_BUG": "ignore"}, "MIQPS_ON_BUG='ignore': must be one of stop, retry"),
        ({"MIQPS_AGENTS": "probe,fetch"}, "MIQPS_AGENTS='probe,fetch': must be one of"),
        ({"MIQPS_AGENTS": ","}, "MIQPS_AGENTS=',': must name at least one item"),
        ({"MIQPS_STOP_TIMEOUT": "1"}, "MIQPS_STOP_TIMEOUT='1': must be at least 5"),
        (
            {"MIQPS_LEARN_SAMPLES": "2"},
            "min_conclusive cannot exceed samples (from MIQPS_LEARN_SAMPLES='2')",
        ),
        (
            {"MIQPS_INPUT_KEYED_BY_DOMAIN": "true", "MIQPS_REPARTITION_INPUT": "true"},
            "MIQPS_INPUT_KEYED_BY_DOMAIN and MIQPS_REPARTITION_INPUT exclude each other",
        ),
        (
            {"MIQPS_PARTITIONS": "x", "MIQPS_PROBE_RATE": "-1"},
            "MIQPS_PARTITIONS='x': not an integer; MIQPS_PROBE_RATE='-1': must be at least",
        ),
    ],
)
def test_a_bad_value_is_an_error_naming_its_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env(env)
    assert str(caught.value).startswith(message)


def test_empty_variables_keep_the_defaults() -> None:
    assert Settings.from_env({variable.name: " " for variable in variables()}) == Settings()


def test_defaults_of_the_error_policy_and_the_probe_retry() -> None:
    settings = Settings.from_env({})
    assert settings.on_bug == "stop"
    assert settings.policy == LearningPolicy() and settings.policy.retry_after == 120.0


def test_topic_prefix_applies_to_the_names_not_set_one_by_one() -> None:
    topics = Settings.from_env(
        {"MIQPS_TOPIC_PREFIX": "staging.", "MIQPS_TOPIC_MAPS": "shared.maps"}
    ).topics
    assert topics.maps == "shared.maps" and topics.raw == "staging.urls.raw"
    assert Topics.ENV["raw"] == "MIQPS_TOPIC_RAW" and set(Topics.ENV) == set(topics.all())


def test_a_topic_prefix_also_names_the_groups_and_changelogs_of_the_deployment() -> None:
    settings = Settings.from_env({"MIQPS_TOPIC_PREFIX": "nc."})
    assert settings.app_id == "nc.miqps"
    assert sorted(changelog_topics(settings)) == [
        "nc.miqps-pattern-stats-changelog",
        "nc.miqps-probe-demand-changelog",
    ]
    live_maps = LiveMaps(settings.policy.reverify_after)
    front = CanonicalizerFront(settings, live_maps, MapFeed(settings, live_maps))
    assert front.group_id == "nc.miqps-canonicalizer"
    chosen = Settings.from_env({"MIQPS_TOPIC_PREFIX": "nc.", "MIQPS_APP_ID": "mine"})
    assert chosen.app_id == "mine" and chosen.topics.raw == "nc.urls.raw"
    unprefixed = Settings.from_env({})  # existing deployments keep their names
    assert unprefixed.app_id == "miqps" and unprefixed.topics.raw == "urls.raw"
    assert sorted(changelog_topics(unprefixed)) == [
        "miqps-pattern-stats-changelog",
        "miqps-probe-demand-changelog",
    ]


def documented_settings() -> str:
    text = (REPO / "docs" / "STREAMS.md").read_text("utf-8")
    return text[text.index("| variable | default | meaning |") :]


def test_the_docs_list_every_variable_and_only_those() -> None:
    table = documented_settings().split("\n\n")[0]
    documented = set(re.findall(r"^\| `([A-Z_]+)`", table, re.MULTILINE))
    assert documented == {variable.name for variable in variables()} | {Topics.PREFIX.name}


def test_the_docs_table_is_the_generated_one() -> None:
    assert documented_settings().startswith(documentation_table() + "\n\n")


def test_docker_compose_sets_only_declared_variables() -> None:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text("utf-8"))
    names = {variable.name for variable in variables()}
    for service in compose["services"].values():
        if "miqps" in str(service.get("command", "")):
            used = {
                key
                for key in service.get("environment", {})
                if key.startswith(("MIQPS_", "KAFKA_BOOTSTRAP"))
            }
            assert used <= names


def test_the_commit_interval_follows_the_guarantee_unless_set() -> None:
    assert Settings.from_env({}).commit_interval == 1.0
    exactly_once = Settings.from_env({"MIQPS_PROCESSING_GUARANTEE": "exactly_once"})
    assert exactly_once.exactly_once and exactly_once.commit_interval == 0.1
    chosen = Settings.from_env(
        {"MIQPS_PROCESSING_GUARANTEE": "exactly_once", "MIQPS_COMMIT_INTERVAL_MS": "250"}
    )
    assert chosen.commit_interval == 0.25
    with pytest.raises(SettingsError, match="MIQPS_PROCESSING_GUARANTEE"):
        Settings.from_env({"MIQPS_PROCESSING_GUARANTEE": "exactly-once"})
