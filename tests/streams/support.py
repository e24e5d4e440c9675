"""Helpers shared by the stream tests: schema validation of real messages."""

from __future__ import annotations

from functools import cache
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from testkit.schemas import all_schemas, schema


@cache
def _registry() -> Registry:
    resources = [(document["$id"], Resource.from_contents(document)) for document in all_schemas()]
    return Registry().with_resources(resources)


@cache
def validator(name: str) -> Draft202012Validator:
    return Draft202012Validator(schema(name), registry=_registry())


def assert_valid(name: str, instance: Any) -> None:
    errors = sorted(validator(name).iter_errors(instance), key=lambda e: list(e.path))
    assert not errors, f"{name}: {[e.message for e in errors[:3]]} in {str(instance)[:300]}"
