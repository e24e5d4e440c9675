"""The mechanism of settings on a model of its own: a field declares its variable once, a
section declares those of a class it does not own, and a bad value names its variable."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from streams.settings.fields import Env, SettingsError, declared_values, from_env, section, setting


@dataclass(frozen=True, slots=True)
class Borrowed:
    """A class the settings do not own, like the core's configs."""

    depth: int = 3
    label: str = "plain"


@dataclass(frozen=True, slots=True)
class Toy:
    rate: float = setting("TOY_RATE", "requests per second", 1.0, minimum=0, maximum=10)
    names: tuple[str, ...] = setting("TOY_NAMES", "names", ("a",))
    verbose: bool = setting("TOY_VERBOSE", "say more", False)
    borrowed: Borrowed = field(
        default_factory=Borrowed,
        metadata=section(depth=Env("TOY_DEPTH", "how deep", minimum=1)),
    )


def test_each_declared_variable_is_found_once_with_its_path() -> None:
    found = {variable.name: variable.path for variable, _ in declared_values(Toy())}
    assert found == {
        "TOY_RATE": ("rate",),
        "TOY_NAMES": ("names",),
        "TOY_VERBOSE": ("verbose",),
        "TOY_DEPTH": ("borrowed", "depth"),
    }, "a section declares only the fields it names"


def test_the_environment_sets_fields_and_sections() -> None:
    env = {"TOY_RATE": "2.5", "TOY_NAMES": "x, y", "TOY_VERBOSE": "yes", "TOY_DEPTH": "7"}
    toy = from_env(Toy(), env)
    assert toy == Toy(2.5, ("x", "y"), True, Borrowed(depth=7))
    assert from_env(Toy(), {"TOY_RATE": "  "}) == Toy(), "an empty variable keeps the default"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"TOY_RATE": "11"}, "TOY_RATE='11': must be at most 10"),
        ({"TOY_RATE": "fast"}, "TOY_RATE='fast': not a number"),
        ({"TOY_VERBOSE": "maybe"}, "TOY_VERBOSE='maybe': not a yes/no value"),
        ({"TOY_DEPTH": "0"}, "TOY_DEPTH='0': must be at least 1"),
    ],
)
def test_a_bad_value_names_its_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message.replace("(", r"\(")):
        from_env(Toy(), env)
