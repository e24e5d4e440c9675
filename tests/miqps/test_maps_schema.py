"""The fast schema check (jsonschema-rs) answers exactly as jsonschema does, on the map schema."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from miqps.maps import (
    DomainMap,
    Layer,
    ParamEvidence,
    PatternDecision,
    Verification,
    _holds_float,
    _may_hold_fraction,
    _validator,
    satisfies_schema,
)
from miqps.update import Undecided
from testkit.schemas import MAP, SCHEMAS, all_schemas, map_schema

SCHEMA = map_schema()
satisfies = satisfies_schema

EVIDENCE = ParamEvidence("keep", Layer.LEARNED, 3, 3, 0, 0, ["id=1"])
A_MAP = DomainMap(
    "shop.example",
    3,
    "2026-12-02T00:00:00Z",
    {
        "/p/*?id&utm_source": PatternDecision(
            frozenset({"id"}),
            frozenset({"utm_source"}),
            {"id": EVIDENCE, "utm_source": ParamEvidence("drop", Layer.LEARNED, 6, 0, 6, 0)},
            Verification(2, 0, 0, ["id"]),
            "2026-12-02T00:00:00Z",
            10,
        ),
    },
).to_json()

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.sampled_from([0.0, 1.0, 2.5])
    | st.sampled_from(
        [
            "",
            "keep",
            "drop",
            "learned",
            "miqps.map/1",
            "/p?x",
            "2026-12-02T00:00:00Z",
            "x",
            "id",
            "id=1",
        ]
    )
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["id", "kept", "samples", "x", "/p?id"]), inner, max_size=3
        )
    ),
    max_leaves=8,
)


def places(document: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside ``document``."""
    found = [prefix]
    if isinstance(document, dict):
        for key, item in document.items():
            found += places(item, (*prefix, key))
    elif isinstance(document, list):
        for index, item in enumerate(document):
            found += places(item, (*prefix, index))
    return found


ALL_PLACES = places(A_MAP)[1:]


@settings(max_examples=1500, deadline=None)
@given(
    edits=st.lists(
        st.tuples(
            st.sampled_from(ALL_PLACES),
            JSON_VALUES,
            st.sampled_from(["replace", "add key", "delete"]),
        ),
        min_size=1,
        max_size=3,
    )
)
def test_the_fast_check_agrees_with_jsonschema(
    edits: list[tuple[tuple[Any, ...], Any, str]],
) -> None:
    document = copy.deepcopy(A_MAP)
    for place, value, how in edits:
        parent: Any = document
        for step in place[:-1]:
            if not isinstance(parent, dict | list) or step not in (
                parent if isinstance(parent, dict) else range(len(parent))
            ):
                break
            parent = parent[step]
        else:
            last = place[-1]
            if isinstance(parent, dict):
                if how == "delete":
                    parent.pop(last, None)
                elif how == "add key":
                    parent[f"{last}-extra"] = value
                else:
                    parent[last] = value
            elif isinstance(parent, list) and isinstance(last, int) and last < len(parent):
                parent[last] = value
    assert satisfies(document) == _validator().is_valid(document), document


def test_the_untouched_map_and_its_variants_are_judged_alike() -> None:
    assert satisfies(A_MAP)
    changes: list[tuple[Callable[[dict[str, Any]], object], bool]] = [
        (lambda d: d.__setitem__("version", 3.0), False),
        (lambda d: d.__setitem__("version", True), False),
        (lambda d: d["patterns"]["/p/*?id&utm_source"].__setitem__("kept", ["id", "id"]), False),
        (
            lambda d: d["patterns"].__setitem__("no-slash?id", d["patterns"]["/p/*?id&utm_source"]),
            False,
        ),
        (lambda d: d.__setitem__("schema", "miqps.map/2"), False),
        (lambda d: d["patterns"]["/p/*?id&utm_source"]["params"]["id"].pop("default_values"), True),
    ]
    for change, expected in changes:
        document = copy.deepcopy(A_MAP)
        change(document)
        assert satisfies(document) is expected is _validator().is_valid(document)


def test_undecided_patterns_with_their_cause_are_valid_and_every_cause_is_named() -> None:
    causes = SCHEMA["properties"]["undecided"]["additionalProperties"]["enum"]
    assert causes == [str(cause) for cause in Undecided]
    document = {**A_MAP, "undecided": {"/account/*?id": "disallowed"}}
    assert satisfies(document) and not list(_validator().iter_errors(document))
    assert not satisfies({**A_MAP, "undecided": {"/account/*?id": "gave up"}})
    assert not satisfies({**A_MAP, "undecided": {"no-path?id": "disallowed"}})


def test_each_schema_has_one_source() -> None:
    """The map's schema is the one the package ships and reads (no copy in ``schemas/`` to
    drift from it), and no two schema files claim one ``$id``."""
    assert not (SCHEMAS / f"{MAP}.schema.json").exists()
    ids = [document["$id"] for document in all_schemas()]
    assert len(ids) == len(set(ids)) and SCHEMA["$id"] in ids


NUMBERS = st.integers(-(10**6), 10**6) | st.floats(allow_nan=False, allow_infinity=False)
TEXTS = st.sampled_from(["shop0.example", "a,1.5", "10.0.0.1", "1e5", "x:2E3", "", "v1.2"])


@settings(max_examples=1500, deadline=None)
@given(
    value=st.recursive(
        NUMBERS | TEXTS | st.booleans() | st.none(),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXTS, inner, max_size=3),
        max_leaves=8,
    ),
    indent=st.sampled_from([None, 1]),
    separators=st.sampled_from([(",", ":"), (", ", ": "), (" ,\n", " :\t")]),
)
def test_a_number_with_a_fraction_or_an_exponent_is_always_found_in_the_text(
    value: Any, indent: int | None, separators: tuple[str, str]
) -> None:
    """The text's quick look may say "maybe" of a text without such a number, never "no"
    of a text with one, however the JSON is spaced."""
    raw = json.dumps({"v": value}, indent=indent, separators=separators).encode()
    if _holds_float(orjson.loads(raw)):
        assert _may_hold_fraction(raw), raw
    assert not _may_hold_fraction(orjson.dumps({"domain": "shop0.example", "n": [1, 22]}))


def test_a_map_whose_text_holds_a_fractional_number_is_refused_however_it_is_spaced() -> None:
    for text in (
        json.dumps({**A_MAP, "version": 3.0}),
        json.dumps({**A_MAP, "version": 3.0}, indent=2),
        json.dumps({**A_MAP, "version": 3e0}, separators=(" , ", " :  ")),
    ):
        assert not satisfies(orjson.loads(text), text)
    assert satisfies(A_MAP, json.dumps(A_MAP, indent=1))
