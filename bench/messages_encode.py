"""The cost of the typed records of ``streams.messages`` on the canonicalizer's hot path.

Writes one ``urls.canonical`` record as the front does today (a dict through orjson), by
building a :class:`streams.messages.CanonicalOutput` (a frozen dataclass) and calling
``to_bytes``, and by ``CanonicalOutput.encode`` (no record built); reads it back with
orjson alone and with ``CanonicalOutput.from_bytes`` (which checks every field). Prints
microseconds per record, the best of many short runs taken in turns (so that a passing
load touches every variant alike), and each ratio to its baseline of the same run.

    .venv/bin/python -m bench.messages_encode [--rounds 7]
"""

from __future__ import annotations

import argparse
import timeit
from collections.abc import Callable
from typing import Literal

import orjson

from streams.messages import CanonicalOutput

CALLS = 20_000
URL = "https://shop.example/p/1?id=1&utm_source=mail"
CANONICAL = "https://shop.example/p/1?id=1"


def as_dict() -> bytes:
    return orjson.dumps(
        {
            "url": URL,
            "canonical_url": CANONICAL,
            "domain": "shop.example",
            "pattern": "/p/*?id&utm_source",
            "kept": ("id",),
            "dropped": ("utm_source",),
            "status": "learned",
            "map_version": 3,
            "meta": None,
        }
    )


FIELDS: tuple[str, str, str, str, tuple[str, ...], tuple[str, ...], Literal["learned"], int, None]
FIELDS = (
    URL,
    CANONICAL,
    "shop.example",
    "/p/*?id&utm_source",
    ("id",),
    ("utm_source",),
    "learned",
    3,
    None,
)


def as_record() -> bytes:
    return CanonicalOutput(*FIELDS).to_bytes()


def as_encoded() -> bytes:
    return CanonicalOutput.encode(*FIELDS)


def microseconds(variants: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    best = dict.fromkeys(variants, float("inf"))
    for _ in range(rounds):
        for name, work in variants.items():
            best[name] = min(best[name], timeit.timeit(work, number=CALLS) / CALLS * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench.messages_encode")
    parser.add_argument("--rounds", type=int, default=7)
    rounds = parser.parse_args().rounds
    value = as_dict()
    assert value == as_record() == as_encoded(), "every way must write the same bytes"
    cost = microseconds(
        {
            "dict": as_dict,
            "record": as_record,
            "encode": as_encoded,
            "loads": lambda: orjson.loads(value),
            "from_bytes": lambda: CanonicalOutput.from_bytes(value),
        },
        rounds,
    )
    print(
        f"write: dict {cost['dict']:.2f} us; CanonicalOutput(...).to_bytes() "
        f"{cost['record']:.2f} us ({cost['record'] / cost['dict']:.1f}x); "
        f"CanonicalOutput.encode {cost['encode']:.2f} us "
        f"({cost['encode'] / cost['dict']:.1f}x)"
    )
    print(
        f"read:  orjson.loads {cost['loads']:.2f} us; CanonicalOutput.from_bytes "
        f"{cost['from_bytes']:.2f} us ({cost['from_bytes'] / cost['loads']:.1f}x)"
    )


if __name__ == "__main__":
    main()
