"""The canonicalizer front with the compiled path (``miqps_native``) against the pure-Python
front: for every batch, the same records to the same topics, keys and partitions, in the
same order, the same counters, the same samples and the same audit requests.

Skipped where the extension is not built; ``MIQPS_REQUIRE_NATIVE=1`` (set by
``scripts/test``) makes its absence a failure instead.
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import replace
from typing import Any

import orjson
import pytest

from miqps.maps import DomainMap
from miqps.native import compiled_classes
from streams.front.loop import CanonicalizerFront, SamplePacks
from streams.maps.live import LiveMaps
from streams.settings import Settings
from testkit.messages import InputMessage
from testkit.urlgen import build_maps, fuzzed_url, generate, learned_looking_maps

if compiled_classes() is None:
    if os.environ.get("MIQPS_REQUIRE_NATIVE") == "1":
        raise ImportError("miqps_native is not built, and MIQPS_REQUIRE_NATIVE=1 needs it")
    pytest.skip(
        "miqps_native is not built (scripts/setup builds it with cargo)", allow_module_level=True
    )

YEAR = 365 * 24 * 3600.0
BATCH = 2000


class Message(InputMessage):
    """What the front reads of a consumed message, dead-lettering included."""

    def key(self) -> None:
        return None

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000)


class RecordingProducer:
    def __init__(self) -> None:
        self.records: list[tuple[str, bytes | None, bytes | None, int]] = []

    def produce(self, topic: str, value: bytes | None, key: bytes | None, partition: int) -> None:
        self.records.append((topic, value, key, partition))


def _aged(maps: list[DomainMap]) -> list[DomainMap]:
    """Every third map decided long ago (due for re-verification after a year), every
    seventh at an unreadable time (due at once); the others as they are."""
    aged = []
    for number, domain_map in enumerate(maps):
        stamp = "2020-01-01T00:00:00Z" if number % 3 == 0 else None
        stamp = "yesterday" if number % 7 == 0 else stamp
        if stamp is not None:
            patterns = {
                key: replace(decision, decided_at=stamp)
                for key, decision in domain_map.patterns.items()
            }
            domain_map = replace(domain_map, patterns=patterns)
        aged.append(domain_map)
    return aged


def _front(
    maps: list[DomainMap], native: bool, audit_share: float, monkeypatch: pytest.MonkeyPatch
) -> CanonicalizerFront:
    settings = Settings.from_env(
        {"MIQPS_AUDIT_SHARE": str(audit_share), "MIQPS_MAX_MESSAGE_BYTES": "4096"}
    )
    monkeypatch.setenv("MIQPS_NATIVE", "1" if native else "0")
    live = LiveMaps(YEAR)
    assert live.canonicalizer.native is native
    for domain_map in maps:
        live.apply(domain_map, domain_map.dumps().encode())
    front = CanonicalizerFront(settings, live, feed=None)  # type: ignore[arg-type]
    front._packs = SamplePacks(settings.partitions)
    return front


def _run(front: CanonicalizerFront, values: list[bytes | None]) -> dict[str, Any]:
    producer = RecordingProducer()
    assert front._packs is not None
    packs = []
    for start in range(0, len(values), BATCH):
        batch = [
            Message(value, offset)  # type: ignore[arg-type]
            for offset, value in enumerate(values[start : start + BATCH], start)
        ]
        offsets = front._process(batch, producer)  # type: ignore[arg-type]
        assert offsets == {("urls.raw", 0): start + len(batch)}
        front._forward_counts()
        packs.append(front._packs.drain())
    counters = front.counters
    return {
        "records": producer.records,
        "counters": (
            counters.consumed,
            counters.learned,
            counters.provisional,
            counters.dead,
            counters.forwarded,
        ),
        "packs": packs,
    }


def _inputs(texts: list[str], rng: random.Random) -> list[bytes | None]:
    """The texts as plain URLs, some in envelopes, some padded, and bad input among them."""
    values: list[bytes | None] = []
    for text in texts:
        roll = rng.random()
        if roll < 0.05:
            values.append(orjson.dumps({"url": text, "source": "test"}))
        elif roll < 0.07:
            values.append(f" {text}\n".encode())
        else:
            values.append(text.encode("utf-8", "surrogatepass"))
    bad: list[bytes | None] = [
        None,
        b"",
        b"   ",
        b"\xff\xfe",
        b"http://shop.example/p?" + b"a" * 5000,
        b"not a url",
        b'http://shop.example/p?q="quoted"\\back',
        b"[1, 2]",
        b"http://shop.example/p?id=1\x01",
    ]
    for value in bad:
        values.insert(rng.randrange(len(values)), value)
    return values


def _compare(
    maps: list[DomainMap], values: list[bytes | None], share: float, monkeypatch: Any
) -> None:
    now = time.time()
    monkeypatch.setattr(time, "time", lambda: now)  # the same times in both records
    python = _run(_front(maps, False, share, monkeypatch), values)
    native = _run(_front(maps, True, share, monkeypatch), values)
    assert python["counters"] == native["counters"]
    differences = [
        (want, have)
        for want, have in zip(python["records"], native["records"], strict=True)
        if want != have
    ]
    assert differences[:5] == []
    assert python["packs"] == native["packs"]


@pytest.mark.parametrize("share", [0.0, 0.05, 1.0])
def test_fuzzed_inputs_through_learned_looking_maps(
    share: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(23)
    maps = _aged(learned_looking_maps([fuzzed_url(rng) for _ in range(5_000)], rng))
    values = _inputs([fuzzed_url(rng) for _ in range(20_000)], rng)
    _compare(maps, values, share, monkeypatch)


@pytest.mark.parametrize("share", [0.05, 1.0])
def test_the_speed_benchmark_s_sites(share: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """The common case: learned patterns, confirmed default values moving URLs between
    patterns, tracking parameters dropped."""
    urls, sites = generate(20_000, seed=29)
    maps = _aged(build_maps(sites, random.Random(31)))
    values = _inputs(urls, random.Random(37))
    _compare(maps, values, share, monkeypatch)
    front = _front(maps, True, share, monkeypatch)
    answered = front.live_maps.canonicalizer.stream_records(
        [value for value in values[:5000] if value is not None], 4096, 0.0, 0, ""
    )
    assert answered is not None
    assert answered[0].count(None) < 2500, "the compiled path takes most of the common case"
