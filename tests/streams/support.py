"""Helpers shared by the stream tests: schema validation of real messages."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


@cache
def _registry() -> Registry:
    resources = []
    for path in SCHEMAS.glob("*.schema.json"):
        document = json.loads(path.read_text("utf-8"))
        resources.append((document["$id"], Resource.from_contents(document)))
    return Registry().with_resources(resources)


@cache
def validator(name: str) -> Draft202012Validator:
    document = json.loads((SCHEMAS / f"{name}.schema.json").read_text("utf-8"))
    return Draft202012Validator(document, registry=_registry())


def assert_valid(name: str, instance: Any) -> None:
    errors = sorted(validator(name).iter_errors(instance), key=lambda e: list(e.path))
    assert not errors, f"{name}: {[e.message for e in errors[:3]]} in {str(instance)[:300]}"
