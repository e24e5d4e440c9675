"""Live maps kept on disk (:class:`StoredLiveMaps`): with a cache far smaller than the
domains, they say what the live maps held in memory say (decisions, versions, due
re-verifications, counts, the oldest map), follow the same version rules and tombstones,
and hold a bounded number of maps whatever the number of domains."""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from miqps.canonical import DEFAULT_CACHE_DOMAINS
from miqps.maps import DomainMap, timestamp_seconds
from miqps.mapstore import MapStore
from miqps.native import compiled_classes
from miqps.urls import parse
from streams.maps.live import (
    LIVE_MAPS_FOLDER,
    LiveMaps,
    MapsSummary,
    StoredLiveMaps,
    worker_live_maps,
)
from streams.settings import LearningPolicy, Settings
from tests.streams.maps.test_live import random_maps, random_urls

CACHE = 2


@pytest.fixture
def stored(tmp_path: Path) -> Iterator[StoredLiveMaps]:
    live = StoredLiveMaps(10.0, MapStore(tmp_path / "store"), CACHE)
    yield live
    live.close()


def many_maps(rng: random.Random, domains: int) -> tuple[list[str], list[DomainMap]]:
    """URLs and maps of ``domains`` domains (``random_maps`` makes four at most)."""
    urls: list[str] = []
    maps: list[DomainMap] = []
    for number in range(domains // 4):
        texts = [url.replace(".example", f".n{number}.example") for url in random_urls(rng, 80)]
        urls += texts
        maps += [
            replace(m, updated_at=f"2026-0{1 + number % 9}-01T00:00:00Z")
            for m in random_maps(rng, texts)
        ]
    return urls, maps


def same_answers(
    held: LiveMaps, stored: StoredLiveMaps, urls: list[str], maps: list[DomainMap]
) -> None:
    decided = timestamp_seconds("2026-01-01T00:00:00Z")
    for text in urls:
        url = parse(text)
        decision = held.decide(url, text)
        assert stored.decide(url, text) == decision, text
        assert stored.decide(url) == decision._replace(url=url.url)
        for now in (decided + 9, decided + 10):
            assert stored.due_for_reverification(decision, now) == held.due_for_reverification(
                decision, now
            )
        for basis in ("", "2026-01-01T00:00:00Z", "2025-01-01T00:00:00Z"):
            assert stored.needs_learning(url.host, decision.pattern, basis) == (
                held.needs_learning(url.host, decision.pattern, basis)
            )
    for domain_map in maps:
        assert stored.get(domain_map.domain) == held.get(domain_map.domain)
        assert stored.map_for(domain_map.domain) == held.map_for(domain_map.domain)
    assert len(stored) == len(held)
    assert stored.summary() == held.summary()
    assert stored.held().compiled <= CACHE and stored.held().live <= CACHE


@pytest.mark.parametrize("native", [False, True], ids=["python", "compiled"])
def test_stored_live_maps_answer_as_maps_held_in_memory(
    tmp_path: Path, native: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if native and compiled_classes() is None:
        pytest.skip("miqps_native is not built")
    monkeypatch.setenv("MIQPS_NATIVE", "1" if native else "0")
    rng = random.Random(7)
    urls, maps = many_maps(rng, 24)
    held = LiveMaps(10.0)
    stored = StoredLiveMaps(10.0, MapStore(tmp_path / "store"), CACHE)
    assert stored.canonicalizer.native == native
    for domain_map in maps:
        assert held.apply(domain_map) == stored.apply(domain_map, domain_map.dumps().encode())
    assert len(stored) > 3 * CACHE
    same_answers(held, stored, urls, maps)
    if native:
        values: list[bytes | None] = [text.encode() for text in urls]
        assert stored.canonicalizer.stream_records(values, 1 << 20, 0.0, 0, "0") == (
            held.canonicalizer.stream_records(values, 1 << 20, 0.0, 0, "0")
        )
    # Replaced and removed maps, then the same answers again.
    for domain_map in maps[::3]:
        newer = replace(domain_map, version=domain_map.version + 1, patterns={})
        assert held.apply(newer) and stored.apply(newer)
    for domain_map in maps[1::5]:
        held.remove(domain_map.domain)
        stored.remove(domain_map.domain)
    same_answers(held, stored, urls, maps)
    stored.close()


def test_a_newer_version_wins_and_the_same_map_changes_nothing(stored: StoredLiveMaps) -> None:
    rng = random.Random(1)
    newer = random_maps(rng, random_urls(rng, 200))[0]
    assert newer.patterns
    older = replace(newer, version=newer.version - 1, patterns={})
    assert stored.apply(newer)
    assert not stored.apply(older)
    assert not stored.apply(newer)
    assert not stored.apply(newer, json.dumps(newer.to_json(), indent=2).encode())  # other bytes
    live = stored.get(newer.domain)
    assert live is not None and live.version == newer.version
    assert stored.map_for(newer.domain) == newer
    # Of two maps published with the same version, the later one stays live.
    same_version = replace(newer, patterns={})
    assert stored.apply(same_version)
    assert stored.map_for(newer.domain) == same_version
    live = stored.get(newer.domain)
    assert live is not None and live.decided == {}
    assert len(stored) == 1 and stored.summary().patterns == 0


def test_a_tombstone_deletes_the_map_and_its_urls_go_back_to_the_default(
    stored: StoredLiveMaps,
) -> None:
    rng = random.Random(4)
    urls = random_urls(rng, 400)
    maps = random_maps(rng, urls)
    for domain_map in maps:
        stored.apply(domain_map)
    gone = maps[0].domain
    text = next(u for u in urls if parse(u).host == gone and stored.decide(parse(u)).map_version)
    stored.get(gone)
    stored.remove(gone)
    stored.remove("never-mapped.example")
    assert stored.get(gone) is None and stored.map_for(gone) is None
    assert stored.decide(parse(text)).map_version == 0
    assert stored.decide(parse(text)) == LiveMaps(10.0).decide(parse(text))
    assert len(stored) == len(maps) - 1
    assert stored.summary().patterns == sum(len(m.patterns) for m in maps[1:])
    assert stored.apply(maps[0])  # and back, at any version
    assert stored.decide(parse(text)).map_version == maps[0].version


def test_live_map_records_are_held_for_the_domains_met_last(stored: StoredLiveMaps) -> None:
    rng = random.Random(5)
    maps = random_maps(rng, random_urls(rng, 400))
    assert len(maps) > CACHE
    for domain_map in maps:
        stored.apply(domain_map)
    first, second, third = (m.domain for m in maps[:3])
    stored.get(first)
    stored.get(second)
    stored.get(first)  # the second is now the least recently used
    stored.get(third)
    assert stored.held().live == CACHE
    assert list(stored._recent) == [first, third]
    # A change reaches a record held.
    newer = replace(maps[0], version=maps[0].version + 1, patterns={})
    stored.apply(newer)
    live = stored.get(first)
    assert live is not None and (live.version, dict(live.decided)) == (newer.version, {})


def test_the_oldest_map_follows_replacements_and_removals(stored: StoredLiveMaps) -> None:
    rng = random.Random(6)
    maps = random_maps(rng, random_urls(rng, 400))[:3]
    dates = ("2026-03-01T00:00:00Z", "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z")
    maps = [replace(m, updated_at=at) for m, at in zip(maps, dates, strict=True)]
    assert stored.summary() == MapsSummary(0, 0, None)
    for domain_map in maps:
        stored.apply(domain_map)
    assert stored.summary().oldest_update == timestamp_seconds(dates[1])
    stored.apply(replace(maps[1], version=maps[1].version + 1, updated_at=dates[0]))
    assert stored.summary().oldest_update == timestamp_seconds(dates[2])
    stored.remove(maps[2].domain)
    assert stored.summary().oldest_update == timestamp_seconds(dates[0])
    stored.apply(replace(maps[0], version=maps[0].version + 1, updated_at="no date"))
    assert stored.summary() == MapsSummary(
        2, stored.summary().patterns, timestamp_seconds(dates[0])
    )


class PausingStore(MapStore):
    """A store whose read of ``pause_for``'s map (its facts or its document) waits, after
    reading, until told to go on."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.pause_for: str | None = None
        self.reading = threading.Event()
        self.go_on = threading.Event()

    def document(self, domain: str) -> bytes | None:
        return self._paused(domain, super().document(domain))

    def facts(self, domain: str) -> bytes | None:
        return self._paused(domain, super().facts(domain))

    def _paused(self, domain: str, value: bytes | None) -> bytes | None:
        if domain == self.pause_for:
            self.pause_for = None
            self.reading.set()
            self.go_on.wait(10)
        return value


def test_a_change_waits_for_the_call_under_way_and_the_newer_map_is_live_after(
    tmp_path: Path,
) -> None:
    rng = random.Random(8)
    urls = random_urls(rng, 400)
    old = random_maps(rng, urls)[0]
    text = next(u for u in urls if parse(u).host == old.domain)
    store = PausingStore(tmp_path / "store")
    stored = StoredLiveMaps(10.0, store, CACHE)
    stored.apply(old)
    store.pause_for = old.domain
    reader = threading.Thread(target=stored.decide, args=(parse(text), text))
    reader.start()  # reads the old map, and waits before installing it
    assert store.reading.wait(10)
    newer = replace(old, version=old.version + 1)
    writer = threading.Thread(target=stored.apply, args=(newer,))
    writer.start()
    writer.join(0.3)
    assert writer.is_alive()  # the feed's change waits for the call under way
    store.go_on.set()
    reader.join(10)
    writer.join(10)
    assert not reader.is_alive() and not writer.is_alive()
    assert stored.decide(parse(text), text).map_version == newer.version
    stored.close()


def test_each_worker_process_keeps_its_maps_in_a_folder_of_its_own_across_restarts(
    tmp_path: Path,
) -> None:
    settings = Settings(state_dir=tmp_path, policy=LearningPolicy(reverify_after=30.0))
    assert settings.maps_cache_domains == DEFAULT_CACHE_DOMAINS
    rng = random.Random(9)
    domain_map = random_maps(rng, random_urls(rng, 200))[0]
    first = worker_live_maps(settings, "front")
    assert isinstance(first, StoredLiveMaps) and first.reverify_after == 30.0
    assert first.store.path == tmp_path / LIVE_MAPS_FOLDER / "front"
    assert first.cache_domains == DEFAULT_CACHE_DOMAINS
    first.apply(domain_map)
    summary = first.summary()
    other = worker_live_maps(settings, "worker")  # a folder of its own: both open at once
    assert len(other) == 0
    first.close()
    other.close()
    # The next start finds what the last one left (its feed then checks that it is of the
    # same maps topic, and resumes each partition where it stopped).
    again = worker_live_maps(settings, "front")
    assert again.map_for(domain_map.domain) == domain_map and len(again) == 1
    assert again.summary() == summary and summary.domains == 1
    again.close()
    in_memory = worker_live_maps(settings.with_overrides(maps_cache_domains=0), "front")
    assert type(in_memory) is LiveMaps


def test_a_kept_store_counts_its_maps_when_it_opens(tmp_path: Path) -> None:
    _, maps = many_maps(random.Random(41), 20)
    held = LiveMaps(10.0)
    stored = StoredLiveMaps(10.0, MapStore(tmp_path / "s"), CACHE)
    for domain_map in maps:
        held.apply(domain_map)
        stored.apply(domain_map)
    for domain_map in maps[::5]:
        held.remove(domain_map.domain)
        stored.remove(domain_map.domain)
    newer = replace(
        maps[1], version=maps[1].version + 1, patterns=dict(list(maps[1].patterns.items())[:1])
    )
    held.apply(newer)
    stored.apply(newer)
    stored.close()
    reopened = StoredLiveMaps(10.0, MapStore(tmp_path / "s"), CACHE)
    try:
        assert len(reopened) == len(held) > 0
        assert reopened.summary() == held.summary()
    finally:
        reopened.close()


def test_a_live_map_store_that_does_not_open_is_removed_and_started_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(state_dir=tmp_path)
    rng = random.Random(10)
    domain_map = random_maps(rng, random_urls(rng, 200))[0]
    first = worker_live_maps(settings, "worker")
    first.apply(domain_map)
    first.close()
    folder = tmp_path / LIVE_MAPS_FOLDER / "worker"
    (folder / "CURRENT").write_bytes(b"garbage")
    with caplog.at_level("WARNING", "streams.maps.live"):
        again = worker_live_maps(settings, "worker")
    try:
        warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert len(warnings) == 1 and f"the store in {folder} does not open" in warnings[0]
        assert "removed, to be built again from miqps.maps" in warnings[0]
        assert len(again) == 0 and again.map_for(domain_map.domain) is None
        again.apply(domain_map)
        assert again.map_for(domain_map.domain) == domain_map
    finally:
        again.close()


@pytest.mark.parametrize("kind", ["memory", "stored"])
def test_forgetting_a_partition_removes_the_maps_of_the_domains_filed_under_it(
    tmp_path: Path, kind: str
) -> None:
    _, maps = many_maps(random.Random(31), 12)
    live: LiveMaps = (
        LiveMaps(10.0) if kind == "memory" else StoredLiveMaps(10.0, MapStore(tmp_path / "s"), 2)
    )
    try:
        for number, domain_map in enumerate(maps):
            live.apply(domain_map)
            live.file_under(number % 3, domain_map.domain)
        live.file_under(0, maps[0].domain)  # filed twice: counted once
        tombstoned = maps[3].domain  # filed under 0, then its tombstone came
        live.remove(tombstoned)
        live.unfile(0, tombstoned)
        assert [live.filed_under(p) for p in (0, 1, 2, 3)] == [
            len(maps[0::3]) - 1,
            len(maps[1::3]),
            len(maps[2::3]),
            0,
        ]
        assert live.forget_partition(0) == len(maps[0::3]) - 1
        assert live.forget_partition(0) == 0
        kept = {m.domain for m in maps} - {m.domain for m in maps[0::3]}
        assert len(live) == len(kept) == live.summary().domains
        for domain_map in maps:
            held = live.get(domain_map.domain)
            assert (held is not None) == (domain_map.domain in kept)
            assert (live.map_for(domain_map.domain) is not None) == (domain_map.domain in kept)
        assert live.filed_under(0) == 0 and live.filed_under(1) == len(maps[1::3])
        assert live.forget_partition(1) + live.forget_partition(2) == len(kept)
        assert len(live) == 0 and live.summary().patterns == 0
    finally:
        live.close()
