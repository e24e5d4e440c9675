"""Reading JSON into the frozen record types: :func:`load_json` parses a message and
:func:`from_fields` checks each field against the type its record declares, so that anything
else becomes a :class:`BadInput` with a short reason."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, is_dataclass
from functools import cache, partial
from types import NoneType, UnionType
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

import orjson

Record = TypeVar("Record")


class BadInput(Exception):
    """A message that cannot be read as the record its topic carries; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def load_json(value: bytes | None, what: str) -> Any:
    """The JSON document in ``value``, or :class:`BadInput` naming what was expected."""
    if value is None:
        raise BadInput(f"null value instead of {what}")
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        raise BadInput(f"not valid JSON for {what}") from None


class _Mismatch(Exception):
    """A JSON value that is not of the type a record field declares."""


Reader = Callable[[Any], Any]


@cache
def _reader(annotation: Any) -> Reader:
    """A function that returns a JSON value as the declared type holds it (arrays become
    tuples, objects of records become records) or raises _Mismatch. Ints are not bools, and
    a float field takes an int too, as JSON does not tell 1 from 1.0."""
    origin = get_origin(annotation)
    if annotation is Any:
        return _same
    if annotation in _SCALARS:
        exact = _SCALARS[annotation]

        def scalar(value: Any) -> Any:
            if type(value) not in exact:
                raise _Mismatch
            return value if annotation is not float else float(value)

        return scalar
    if origin in (Union, UnionType):
        options = [_reader(option) for option in get_args(annotation)]
        return partial(_first_of, options)
    if origin is Literal:
        choices = get_args(annotation)
        return partial(_one_of, choices)
    if origin is tuple:
        return partial(_tuple_of, _reader(get_args(annotation)[0]))
    if origin is dict:
        return partial(_dict_of, _reader(get_args(annotation)[1]))
    if isinstance(annotation, type) and is_dataclass(annotation):
        return partial(_record, annotation)
    raise TypeError(f"no JSON reader for {annotation!r}")


_SCALARS: dict[Any, tuple[type, ...]] = {
    NoneType: (NoneType,),
    bool: (bool,),
    int: (int,),
    float: (int, float),
    str: (str,),
}


def _same(value: Any) -> Any:
    return value


def _first_of(options: list[Reader], value: Any) -> Any:
    for option in options:
        try:
            return option(value)
        except _Mismatch:
            continue
    raise _Mismatch


def _one_of(choices: tuple[Any, ...], value: Any) -> Any:
    if value not in choices:
        raise _Mismatch
    return value


def _tuple_of(item: Reader, value: Any) -> tuple[Any, ...]:
    if type(value) is not list:
        raise _Mismatch
    return tuple([item(element) for element in value])


def _dict_of(item: Reader, value: Any) -> dict[str, Any]:
    if type(value) is not dict:
        raise _Mismatch
    return {key: item(element) for key, element in value.items()}


def _record(cls: type, value: Any) -> Any:
    return from_fields(cls, value, f"a {_words(cls.__name__)}")


def _words(name: str) -> str:
    return "".join(f" {letter.lower()}" if letter.isupper() else letter for letter in name).strip()


_READERS: dict[type, dict[str, tuple[Reader, Any]]] = {}


def _readers(cls: type) -> dict[str, tuple[Reader, Any]]:
    readers = _READERS.get(cls)
    if readers is None:
        hints = get_type_hints(cls)
        readers = _READERS[cls] = {
            item.name: (_reader(hints[item.name]), hints[item.name]) for item in fields(cls)
        }
    return readers


def from_fields(cls: type[Record], document: Any, what: str) -> Record:
    """``cls`` built from a JSON object with exactly its fields, each of its declared type,
    or :class:`BadInput` saying which field is wrong."""
    if type(document) is not dict:
        raise BadInput(f"not a JSON object for {what}")
    readers = _readers(cls)
    if document.keys() != readers.keys():
        missing = [name for name in readers if name not in document]
        if missing:
            raise BadInput(f"{what} without {', '.join(missing)}")
        raise BadInput(f"{what} with unknown fields {', '.join(sorted(document - readers.keys()))}")
    values: dict[str, Any] = {}
    for name, (reader, annotation) in readers.items():
        try:
            values[name] = reader(document[name])
        except _Mismatch:
            raise BadInput(f"{what} whose {name} is not of type {_type_name(annotation)}") from None
    return cls(**values)


def _type_name(annotation: Any) -> str:
    """``annotation`` as a reason names it: ``dict[str, RequestedPattern]``, without the
    modules of ``typing`` and of the records."""
    if get_origin(annotation) is None:
        return str(annotation.__name__)
    name = str(annotation).replace("typing.", "")
    for record in _records_in(annotation):
        name = name.replace(f"{record.__module__}.", "")
    return name


def _records_in(annotation: Any) -> set[type]:
    if isinstance(annotation, type) and is_dataclass(annotation):
        return {annotation}
    return {record for argument in get_args(annotation) for record in _records_in(argument)}
