"""The JSON Schemas, read from where the product reads them: the MIQPS map's from the
installed package (``miqps/data/miqps-map.schema.json``, what ``miqps learn`` and every map
reader validate against, shipped in the wheel), every topic record's from ``schemas/``."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"
MAP = "miqps-map"


def _read(text: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(text)
    return document


@cache
def map_schema() -> dict[str, Any]:
    """The map's schema, the file :mod:`miqps.maps` reads."""
    return _read(resources.files("miqps").joinpath(f"data/{MAP}.schema.json").read_text("utf-8"))


def schema(name: str) -> dict[str, Any]:
    """The schema named ``name`` (``urls-canonical``, ``miqps-map``, ...)."""
    if name == MAP:
        return map_schema()
    return _read((SCHEMAS / f"{name}.schema.json").read_text("utf-8"))


def all_schemas() -> list[dict[str, Any]]:
    """Every schema: the topics' and the map's (which theirs refer to by ``$id``)."""
    names = sorted(path.name.removesuffix(".schema.json") for path in SCHEMAS.glob("*.schema.json"))
    return [map_schema(), *(schema(name) for name in names)]
