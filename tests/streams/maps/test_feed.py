"""The map feed: an invalid record on the maps topic is dead-lettered and the last valid map of
its domain stays live. Unit tests feed records directly; the last test uses real topics of its
own on the broker."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from miqps.maps import DomainMap, Layer, ParamEvidence, PatternDecision, Verification
from miqps.urls import parse
from streams.kafka.admin import ensure_topics
from streams.maps.feed import MapFeed
from streams.maps.live import LiveMaps
from streams.messages import Source
from streams.settings import Settings
from testkit.tools import TopicReader, delete_topics, isolated_settings, produce
from tests.streams.support import assert_valid

PRODUCT_PAGES = "/p?id&itemid&utm_source"
PRODUCTS = ("https://shop.example/p?id=7&itemid=1", "https://shop.example/p?id=7&itemid=2")


def product_map(version: int, domain: str = "shop.example") -> DomainMap:
    params = {name: ParamEvidence("keep", Layer.LEARNED, 3, 3, 0, 0) for name in ("id", "itemid")}
    params["utm_source"] = ParamEvidence("drop", Layer.LEARNED, 6, 0, 6, 0)
    decision = PatternDecision(
        frozenset({"id", "itemid"}),
        frozenset({"utm_source"}),
        params,
        Verification(2, 0, 0, []),
        "2026-12-02T00:00:00Z",
        10,
    )
    return DomainMap(domain, version, "2026-12-02T00:00:00Z", {PRODUCT_PAGES: decision})


def tampered_kept(version: int) -> bytes:
    document = product_map(version).to_json()
    document["patterns"][PRODUCT_PAGES]["kept"] = "itemid"
    return json.dumps(document).encode()


def relabelled(version: int) -> bytes:
    document = product_map(version, "other.example").to_json()
    document["domain"] = "shop.example"
    return json.dumps(document).encode()


KEY = b"shop.example"
INVALID_RECORDS: dict[str, tuple[bytes | None, bytes, str]] = {
    "kept as a string": (KEY, tampered_kept(5), "(schema)"),
    "relabelled to another domain": (b"other.example", relabelled(6), "(domain key)"),
    "null": (KEY, b"null", "(schema)"),
    "an infinite version": (
        KEY,
        product_map(7).dumps().replace('"version":7', '"version":1e999').encode(),
        "(json)",
    ),
    "nested 200,000 deep": (KEY, b"[" * 200_000, "(json)"),
    "without a key": (None, product_map(8).dumps().encode(), "(domain key)"),
}


def distinct_canonical_products(live_maps: LiveMaps) -> int:
    return len({live_maps.decide(parse(url)).canonical_url for url in PRODUCTS})


@pytest.mark.parametrize("name", INVALID_RECORDS)
def test_an_invalid_record_is_dead_lettered_and_the_last_valid_map_stays(name: str) -> None:
    key, value, rule = INVALID_RECORDS[name]
    live_maps = LiveMaps(reverify_after=3600)
    dead: list[tuple[bytes | None, bytes]] = []
    feed = MapFeed(Settings(), live_maps, dead_letter=lambda k, v: dead.append((k, v)))
    feed.apply_record(KEY, product_map(1).dumps().encode(), Source("miqps.maps", 0, 10))
    feed.apply_record(key, value, Source("miqps.maps", 2, 11, 1_700_000_000_000))
    live = live_maps.get("shop.example")
    assert live is not None and live.version == 1
    assert distinct_canonical_products(live_maps) == 2
    assert len(dead) == 1
    dead_key, encoded = dead[0]
    assert dead_key == key
    record = orjson.loads(encoded)
    assert_valid("urls-dlq", record)
    assert record["reason"].startswith(f"miqps.maps[2]@11: not a MIQPS map {rule}")
    assert (record["topic"], record["partition"], record["offset"]) == ("miqps.maps", 2, 11)
    assert base64.b64decode(record["original"]) == value
    assert record["timestamp_ms"] == 1_700_000_000_000


def test_valid_records_and_tombstones_still_apply() -> None:
    live_maps = LiveMaps(reverify_after=3600)
    dead: list[tuple[bytes | None, bytes]] = []
    feed = MapFeed(Settings(), live_maps, dead_letter=lambda k, v: dead.append((k, v)))
    matrix = DomainMap(
        "matrix.example",
        1,
        "2026-12-02T00:00:00Z",
        {
            "/p/*?;jsessionid&id": PatternDecision(
                frozenset({"id"}),
                frozenset({";jsessionid"}),
                {},
                Verification(),
                "2026-12-02T00:00:00Z",
            )
        },
    )
    feed.apply_record(KEY, product_map(1).dumps().encode(), Source("miqps.maps", 0, 1))
    feed.apply_record(KEY, product_map(2).dumps().encode(), Source("miqps.maps", 0, 2))
    feed.apply_record(b"matrix.example", matrix.dumps().encode(), Source("miqps.maps", 1, 1))
    assert len(live_maps) == 2 and live_maps.map_for("matrix.example") == matrix
    live = live_maps.get("shop.example")
    assert live is not None and live.version == 2
    feed.apply_record(KEY, None, Source("miqps.maps", 0, 3))
    assert live_maps.get("shop.example") is None and live_maps.map_for("shop.example") is None
    assert len(live_maps) == 1 and live_maps.get("matrix.example") is not None
    assert dead == []


@pytest.mark.parametrize("partitioned", [False, True])
def test_a_partitioned_feed_files_each_domain_under_the_partition_that_brought_it(
    partitioned: bool,
) -> None:
    live_maps = LiveMaps(reverify_after=3600)
    dead: list[tuple[bytes | None, bytes]] = []
    feed = MapFeed(
        Settings(), live_maps, dead_letter=lambda k, v: dead.append((k, v)), partitioned=partitioned
    )
    feed.apply_record(KEY, product_map(1).dumps().encode(), Source("miqps.maps", 2, 1))
    feed.apply_record(KEY, product_map(2).dumps().encode(), Source("miqps.maps", 2, 2))
    other = product_map(1, "other.example")
    feed.apply_record(b"other.example", other.dumps().encode(), Source("miqps.maps", 1, 1))
    feed.apply_record(b"bad.example", b"null", Source("miqps.maps", 1, 2))
    assert len(dead) == 1
    filed = [live_maps.filed_under(p) for p in range(3)]
    assert filed == ([0, 1, 1] if partitioned else [0, 0, 0])
    feed.apply_record(b"other.example", None, Source("miqps.maps", 1, 3))
    assert live_maps.filed_under(1) == 0 and len(live_maps) == 1
    assert live_maps.forget_partition(2) == (1 if partitioned else 0)
    assert len(live_maps) == (0 if partitioned else 1)


@pytest.fixture
def isolated(bootstrap: str, tmp_path: Path) -> Iterator[Settings]:
    settings = isolated_settings(
        Settings.from_env({"KAFKA_BOOTSTRAP_SERVERS": bootstrap}),
        "mapfeed",
        tmp_path / "state",
        partitions=2,
    )
    ensure_topics(settings)
    try:
        yield settings
    finally:
        delete_topics(settings)


@pytest.mark.kafka
@pytest.mark.timeout(120)
def test_the_feed_dead_letters_invalid_records_from_the_topic(isolated: Settings) -> None:
    valid = product_map(1).dumps().encode()
    records = [valid, tampered_kept(2), relabelled(3), b"{not json"]
    keys = [KEY, KEY, b"other.example", KEY]
    produce(isolated, isolated.topics.maps, records, keys)
    live_maps = LiveMaps(reverify_after=3600)
    failures: list[BaseException] = []
    feed = MapFeed(isolated, live_maps, failures.append)
    feed.start()
    try:
        assert feed.wait_ready(60), "the map feed did not catch up"
    finally:
        feed.stop()
    assert failures == []
    live = live_maps.get("shop.example")
    assert live is not None and live.version == 1
    assert live_maps.get("other.example") is None
    assert distinct_canonical_products(live_maps) == 2
    with TopicReader(isolated, isolated.topics.dlq) as reader:
        assert reader.wait_for(3, 30), f"{len(reader.records)} of 3 dead letters"
        time.sleep(0.5)
        reader.poll(0.5)
        dead: list[dict[str, Any]] = [
            orjson.loads(value) for _, value, _ in reader.records if value is not None
        ]
    assert len(dead) == 3
    for record in dead:
        assert_valid("urls-dlq", record)
        assert record["topic"] == isolated.topics.maps
    originals = sorted(base64.b64decode(record["original"]) for record in dead)
    assert originals == sorted(records[1:])
    rules = sorted(record["reason"].split("(")[1].split(")")[0] for record in dead)
    assert rules == ["domain key", "json", "schema"]
