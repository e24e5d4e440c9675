"""How a setting declares its environment variable, and how the environment is read.

A field carries its variable in its metadata (:func:`setting`); a field holding a class of
the core declares the variables of that class's fields (:func:`section`).
:func:`declared_values` walks a model for its :class:`Variable` s; :func:`from_env` reads
them from an environment, naming each bad value's variable (:class:`SettingsError`). The
settings themselves are declared in :mod:`streams.settings.model`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from types import NoneType, UnionType
from typing import (
    TYPE_CHECKING,
    Any,
    Literal,
    TypeVar,
    Union,
    get_args,
    get_origin,
    get_type_hints,
)

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

ENV_KEY = "miqps.env"
SECTION_KEY = "miqps.section"
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")

Model = TypeVar("Model", bound="DataclassInstance")


class SettingsError(ValueError):
    """A setting with a value that cannot be used; the message names the variable."""


@dataclass(frozen=True, slots=True)
class Env:
    """An environment variable, what it means, and the bounds of a number."""

    name: str
    help: str
    minimum: float | None = None
    maximum: float | None = None


def setting(
    name: str,
    help: str,
    default: Any,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
) -> Any:
    """A field read from the variable ``name``."""
    return field(default=default, metadata={ENV_KEY: Env(name, help, minimum, maximum)})


def section(**variables: Env) -> dict[str, Any]:
    """The metadata of a field holding a class of the core: the variable of each of its
    fields."""
    return {SECTION_KEY: variables}


@dataclass(frozen=True, slots=True)
class Variable:
    """One declared variable: where its value lives in :class:`Settings`, and its type."""

    env: Env
    path: tuple[str, ...]
    annotation: Any
    default: Any

    @property
    def name(self) -> str:
        return self.env.name

    def parse(self, text: str) -> Any:
        """The value of ``text``, or :class:`SettingsError` naming the variable."""
        try:
            return self.convert(text)
        except ValueError as error:
            raise SettingsError(f"{self.name}={text!r}: {error}") from None

    def convert(self, text: str) -> Any:
        """The value of ``text``, or ValueError saying what is wrong with it."""
        value = _parse(text.strip(), self.annotation)
        env = self.env
        if isinstance(value, int | float) and not isinstance(value, bool):
            if env.minimum is not None and value < env.minimum:
                raise ValueError(f"must be at least {env.minimum:g}")
            if env.maximum is not None and value > env.maximum:
                raise ValueError(f"must be at most {env.maximum:g}")
        return value

    def format(self, value: Any) -> str:
        """``value`` as text that :meth:`parse` reads back."""
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, tuple):
            return ",".join(value)
        return str(value)


def _parse(text: str, annotation: Any) -> Any:
    origin = get_origin(annotation)
    if origin in (Union, UnionType):
        options = [option for option in get_args(annotation) if option is not NoneType]
        return _parse(text, options[0]) if text else None
    if origin is Literal:
        choices = get_args(annotation)
        if text not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return text
    if origin is tuple:
        items = tuple(item.strip() for item in text.split(",") if item.strip())
        if not items:
            raise ValueError("must name at least one item, separated by commas")
        return tuple(_parse(item, get_args(annotation)[0]) for item in items)
    if annotation is bool:
        if text.lower() in TRUE_WORDS:
            return True
        if text.lower() in FALSE_WORDS:
            return False
        raise ValueError(f"not a yes/no value ({'/'.join(TRUE_WORDS + FALSE_WORDS)})")
    if annotation is int:
        try:
            return int(text)
        except ValueError:
            raise ValueError("not an integer") from None
    if annotation is float:
        try:
            number = float(text)
        except ValueError:
            raise ValueError("not a number") from None
        if not math.isfinite(number):
            raise ValueError("not a finite number")
        return number
    if annotation is Path:
        if not text:
            raise ValueError("an empty path")
        return Path(text)
    if annotation is str:
        return text
    raise TypeError(f"no parser for settings of type {annotation!r}")


def declared_values(
    instance: Any, prefix: tuple[str, ...] = (), declared: Mapping[str, Env] | None = None
) -> Iterator[tuple[Variable, Any]]:
    hints = get_type_hints(type(instance))
    defaults = type(instance)()
    for item in fields(instance):
        value = getattr(instance, item.name)
        path = (*prefix, item.name)
        env = declared.get(item.name) if declared is not None else item.metadata.get(ENV_KEY)
        if env is not None:
            yield Variable(env, path, hints[item.name], getattr(defaults, item.name)), value
        elif SECTION_KEY in item.metadata:
            yield from declared_values(value, path, item.metadata[SECTION_KEY])
        elif is_dataclass(value) and declared is None:
            yield from declared_values(value, path)


def from_env(base: Model, env: Mapping[str, str]) -> Model:
    values: dict[tuple[str, ...], Any] = {}
    problems: list[str] = []
    read: list[str] = []
    for variable, _ in declared_values(base):
        text = env.get(variable.name, "")
        if not text.strip():
            continue
        try:
            values[variable.path] = variable.parse(text)
        except SettingsError as error:
            problems.append(str(error))
        read.append(f"{variable.name}={text!r}")
    if problems:
        raise SettingsError("; ".join(problems))
    try:
        return replace_paths(base, values)
    except ValueError as error:
        raise SettingsError(f"{error} (from {', '.join(read)})") from None


def replace_paths(instance: Model, values: Mapping[tuple[str, ...], Any]) -> Model:
    direct: dict[str, Any] = {}
    nested: dict[str, dict[tuple[str, ...], Any]] = {}
    for path, value in values.items():
        if len(path) == 1:
            direct[path[0]] = value
        else:
            nested.setdefault(path[0], {})[path[1:]] = value
    for name, inner in nested.items():
        direct[name] = replace_paths(getattr(instance, name), inner)
    return replace(instance, **direct) if direct else instance
