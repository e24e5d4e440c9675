"""Both sides of the native boundary write a ``urls.canonical`` record the same way: every
record the compiled path writes (``native/src/front.rs``, ``write_record``) is, byte for
byte, what ``CanonicalOutput.encode`` writes for the pure-Python decision of that input,
and its key is the canonical URL.

Skipped where the extension is not built; ``MIQPS_REQUIRE_NATIVE=1`` (set by
``scripts/test``) makes its absence a failure instead.
"""

from __future__ import annotations

import os
import random

import pytest

from miqps.canonical import Canonicalizer
from miqps.native import compiled_classes
from miqps.urls import parse
from streams.messages import CanonicalOutput
from testkit.urlgen import build_maps, generate

if compiled_classes() is None:
    if os.environ.get("MIQPS_REQUIRE_NATIVE") == "1":
        raise ImportError("miqps_native is not built, and MIQPS_REQUIRE_NATIVE=1 needs it")
    pytest.skip(
        "miqps_native is not built (scripts/setup builds it with cargo)", allow_module_level=True
    )

MAX_BYTES = 8192
NEVER_DUE = float("-inf")


def _inputs() -> tuple[list[str], Canonicalizer, Canonicalizer]:
    urls, sites = generate(3000, seed=23)
    maps = build_maps(sites, random.Random(24))
    host = sites[0].ascii_host
    # URLs without parameters (the compiled path writes their provisional records), two
    # of them with a quote or a backslash in the input, which the record escapes.
    urls += [
        f'https://{host}/about"quoted',
        f"https://{host}/back\\slash",
        f"https://{host}/about",
        "https://unmapped.example/",
    ]
    python = Canonicalizer(native=False)
    native = Canonicalizer(native=True)
    for domain_map in maps:
        python.update(domain_map)
        native.update(domain_map)
    return urls, python, native


def test_the_compiled_records_are_the_python_records_byte_for_byte() -> None:
    urls, python, native = _inputs()
    answered = native.stream_records(
        [url.encode() for url in urls], MAX_BYTES, NEVER_DUE, 0, "seed"
    )
    assert answered is not None
    records, keys, learned = answered
    differences = []
    escaped = 0
    for text, record, key in zip(urls, records, keys, strict=True):
        if record is None:
            continue  # the Python front takes it
        decision = python.decide(parse(text), text, with_layers=False)
        expected = CanonicalOutput.encode(
            text,
            decision.canonical_url,
            decision.domain,
            decision.pattern,
            decision.kept,
            decision.dropped,
            decision.status,
            decision.map_version,
            None,
        )
        if record != expected or key != decision.canonical_url.encode():
            differences.append(f"{text!r}:\n  compiled {record!r}\n  python   {expected!r}")
        escaped += b"\\" in record
    assert differences[:5] == []
    written = len(records) - records.count(None)
    assert written > len(urls) // 2 and learned > written // 2
    assert escaped == 2
