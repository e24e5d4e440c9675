"""A fast yes/no check of JSON documents against a JSON Schema, compiled into closures.

``jsonschema`` takes about 15 ms per map of 20 patterns, 40 times what building the map
takes, and several minutes for a large maps file. This compiles the subset of JSON Schema
2020-12 that the project's schemas use; a keyword outside it is refused when compiling,
so the schema cannot gain a rule that goes unchecked. Integers are exactly integers
(``1.0`` is not one here), as the loader wants. Only the answer comes from here: the
message for a document that fails comes from ``jsonschema``. The tests check that both agree.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

Check = Callable[[Any], bool]

ANNOTATIONS = frozenset({"$schema", "$id", "$defs", "title", "description", "contentEncoding"})


def _is_integer(value: object) -> bool:
    return type(value) is int  # not bool, which is an int to isinstance


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


TYPES: dict[str, Check] = {
    "object": lambda value: isinstance(value, dict),
    "array": lambda value: isinstance(value, list),
    "string": lambda value: isinstance(value, str),
    "integer": _is_integer,
    "number": _is_number,
    "boolean": lambda value: isinstance(value, bool),
    "null": lambda value: value is None,
}


def _comparable(value: Any) -> Any:
    """A hashable form under which two JSON values are equal as JSON Schema says (``1`` and
    ``1.0`` are, ``1`` and ``true`` are not)."""
    if isinstance(value, bool):
        return ("boolean", value)
    if isinstance(value, dict):
        return frozenset((key, _comparable(item)) for key, item in value.items())
    if isinstance(value, list):
        return tuple(_comparable(item) for item in value)
    return value


def compile_schema(schema: Mapping[str, Any]) -> Check:
    """A function telling whether a document satisfies ``schema`` (whose ``$ref`` may only
    point into its own ``$defs``)."""
    definitions: Mapping[str, Any] = schema.get("$defs", {})
    compiled: dict[str, Check] = {}

    def reference(target: str) -> Check:
        prefix = "#/$defs/"
        if not target.startswith(prefix) or "/" in target[len(prefix):]:
            raise ValueError(f"unsupported $ref {target!r}")
        name = target[len(prefix):]
        if name not in compiled:
            compiled[name] = build(definitions[name])
        return compiled[name]

    def build(node: Mapping[str, Any]) -> Check:
        rules = {keyword: value for keyword, value in node.items()
                 if keyword not in ANNOTATIONS}
        fused = _fused(rules)
        if fused is not None:
            return fused
        checks = [check for keyword, value in rules.items()
                  if (check := keyword_check(keyword, value, node)) is not None]
        return _every(checks)

    def keyword_check(keyword: str, argument: Any, node: Mapping[str, Any]) -> Check | None:
        if keyword == "$ref":
            return reference(argument)
        if keyword == "type":
            names = argument if isinstance(argument, list) else [argument]
            kinds = [TYPES[name] for name in names]
            if len(kinds) == 1:
                return kinds[0]
            return lambda value: any(kind(value) for kind in kinds)
        if keyword in ("const", "enum"):
            allowed = {_comparable(item) for item in
                       ([argument] if keyword == "const" else argument)}
            return lambda value: (value if type(value) is str else _comparable(value)) in allowed
        if keyword == "required":
            required = frozenset(argument)
            return lambda value: not isinstance(value, dict) or value.keys() >= required
        if keyword == "properties":
            properties = [(name, build(sub)) for name, sub in argument.items()]

            def each_property(value: Any) -> bool:
                if isinstance(value, dict):
                    for name, check in properties:
                        if name in value and not check(value[name]):
                            return False
                return True

            return each_property
        if keyword == "additionalProperties":
            return _additional(argument, frozenset(node.get("properties", ())), build)
        if keyword == "propertyNames":
            names_check = build(argument)
            return lambda value: not isinstance(value, dict) or all(map(names_check, value))
        if keyword == "items":
            item_check = build(argument)
            return lambda value: not isinstance(value, list) or all(map(item_check, value))
        if keyword == "uniqueItems":
            return None if not argument else lambda value: not isinstance(value, list) or (
                len({_comparable(item) for item in value}) == len(value))
        if keyword == "minimum":
            return lambda value: not _is_number(value) or value >= argument
        if keyword == "minLength":
            return lambda value: not isinstance(value, str) or len(value) >= argument
        if keyword == "pattern":
            search = re.compile(argument).search
            return lambda value: not isinstance(value, str) or search(value) is not None
        raise ValueError(f"unsupported JSON Schema keyword {keyword!r}")

    return build(schema)


def _fused(rules: Mapping[str, Any]) -> Check | None:
    """One closure for the commonest pairs of the map schema, instead of two."""
    if rules.keys() == {"type", "minimum"} and rules["type"] == "integer":
        least = rules["minimum"]
        return lambda value: type(value) is int and value >= least
    if rules.keys() == {"type", "pattern"} and rules["type"] == "string":
        search = re.compile(rules["pattern"]).search
        return lambda value: type(value) is str and search(value) is not None
    return None


def _every(checks: list[Check]) -> Check:
    if len(checks) == 1:
        return checks[0]

    def every(value: Any) -> bool:
        for check in checks:  # noqa: SIM110 (twice as fast as all() over a generator)
            if not check(value):
                return False
        return True

    return every


def _additional(argument: Any, named: frozenset[str],
                build: Callable[[Mapping[str, Any]], Check]) -> Check | None:
    if argument is True:
        return None
    if argument is False:
        return lambda value: not isinstance(value, dict) or named.issuperset(value)
    check = build(argument)

    def each_additional(value: Any) -> bool:
        if isinstance(value, dict):
            for name, item in value.items():
                if name not in named and not check(item):
                    return False
        return True

    return each_additional
