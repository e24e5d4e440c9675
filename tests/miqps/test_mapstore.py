"""Maps read on demand (``miqps.mapstore``): a canonicalizer that reads each domain's map
from a store when its first URL comes, holding a bounded number, says what one holding
every map says; a maps file's index refuses what reading the file refuses."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from miqps.canonical import Canonicalizer, MapFacts, facts_record_of_document
from miqps.maps import (
    DomainMap,
    InvalidMap,
    Layer,
    ParamEvidence,
    PatternDecision,
    Verification,
    read_maps,
    write_maps,
)
from miqps.mapstore import MapStore, facts_record, index_maps_file
from miqps.native import compiled_classes
from miqps.urls import InvalidURL, parse
from testkit.urlgen import build_maps, fuzzed_url, generate, learned_looking_maps

pytestmark = pytest.mark.timeout(120)

PATHS = [False] + ([True] if compiled_classes() is not None else [])


def _corpora() -> Iterator[tuple[list[DomainMap], list[str]]]:
    rng = random.Random(41)
    yield (
        learned_looking_maps([fuzzed_url(rng) for _ in range(1_000)], rng),
        [fuzzed_url(rng) for _ in range(800)],
    )
    urls, sites = generate(3_000, seed=42)
    yield build_maps(sites, random.Random(43)), urls


def _pair(
    maps: list[DomainMap], folder: Path, native: bool, cache: int
) -> tuple[Canonicalizer, Canonicalizer]:
    """A canonicalizer holding every map of a maps file, and one reading them on demand
    from an index of the same file."""
    file = folder / "maps.jsonl"
    write_maps(file, maps)
    held = Canonicalizer(native=native)
    held.load(read_maps(file))
    store = index_maps_file(file, folder / "index")
    on_demand = Canonicalizer(native=native, maps=store, cache_domains=cache)
    on_demand.adopt(store)
    return held, on_demand


def _outcome(canonicalizer: Canonicalizer, text: str) -> object:
    try:
        url = parse(text)
    except InvalidURL as error:
        return error.reason
    return (
        canonicalizer.decide(url, text),
        canonicalizer.decide(url, text, with_layers=False),
        canonicalizer.explain(text),
    )


@pytest.mark.parametrize("native", PATHS, ids=lambda native: "compiled" if native else "python")
def test_maps_read_on_demand_give_what_maps_held_give(tmp_path: Path, native: bool) -> None:
    """Every output, error and decision is the same, with a cache far smaller than the
    domains met (so maps are dropped and read again all the time)."""
    for number, (maps, texts) in enumerate(_corpora()):
        folder = tmp_path / str(number)
        folder.mkdir()
        held, on_demand = _pair(maps, folder, native, cache=3)
        assert len(maps) > 6
        held_errors: list[tuple[int, InvalidURL]] = []
        demand_errors: list[tuple[int, InvalidURL]] = []
        assert on_demand.canonical_texts(texts, demand_errors) == held.canonical_texts(
            texts, held_errors
        )
        assert [(i, e.reason) for i, e in demand_errors] == [(i, e.reason) for i, e in held_errors]
        block = "\n".join(text for text in texts if "\n" not in text and "\r" not in text)
        assert on_demand.canonical_block(block) == held.canonical_block(block)
        different = [t for t in texts[:200] if _outcome(held, t) != _outcome(on_demand, t)]
        assert different == []
        for domain_map in maps[:5]:
            assert on_demand.map_for(domain_map.domain) == held.map_for(domain_map.domain)
            assert on_demand.dropping_decisions(domain_map.domain) == held.dropping_decisions(
                domain_map.domain
            )
        assert on_demand.maps_held <= 3
        held.use_prior = on_demand.use_prior = False  # the maps held are compiled again
        assert on_demand.canonical_texts(texts) == held.canonical_texts(texts)
        on_demand.close()


@pytest.mark.parametrize("native", PATHS, ids=lambda native: "compiled" if native else "python")
def test_a_map_stored_anew_is_read_on_the_domain_s_next_url(tmp_path: Path, native: bool) -> None:
    urls, sites = generate(2_000, seed=44)
    maps = build_maps(sites, random.Random(45))
    store = MapStore(tmp_path / "store")
    on_demand = Canonicalizer(native=native, maps=store, cache_domains=64)
    first = on_demand.canonical_texts(urls)
    assert first == Canonicalizer(native=native).canonical_texts(urls)  # no map yet
    for domain_map in maps:
        store.put(domain_map.domain, domain_map.dumps().encode())
        on_demand.forget(domain_map.domain)
    held = Canonicalizer(native=native)
    held.load({domain_map.domain: domain_map for domain_map in maps})
    assert on_demand.canonical_texts(urls) == held.canonical_texts(urls) != first
    store.close()


def _lines(tmp_path: Path) -> Path:
    _, sites = generate(500, seed=46)
    maps = build_maps(sites, random.Random(47))[:4]
    lines = [domain_map.dumps() for domain_map in maps]
    lines.insert(1, '{"domain": "broken.example", "version": ')
    lines.insert(3, lines[0])  # the first domain again
    lines.insert(4, "")
    lines.append('{"schema": "miqps.map/1", "domain": 3}')
    path = tmp_path / "maps.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_an_index_refuses_what_reading_the_file_refuses(tmp_path: Path) -> None:
    path = _lines(tmp_path)
    with pytest.raises(InvalidMap) as by_reading:
        read_maps(path)
    with pytest.raises(InvalidMap) as by_indexing:
        index_maps_file(path, tmp_path / "index")
    assert str(by_indexing.value) == str(by_reading.value)
    assert not (tmp_path / "index").exists()
    read_skipped: list[InvalidMap] = []
    index_skipped: list[InvalidMap] = []
    held = read_maps(path, read_skipped.append)
    store = index_maps_file(path, tmp_path / "index", index_skipped.append)
    assert [str(error) for error in index_skipped] == [str(error) for error in read_skipped]
    assert len(read_skipped) == 3
    assert sorted(store.domains()) == sorted(held)
    for domain, domain_map in held.items():
        document = store.document(domain)
        assert document is not None and DomainMap.from_json(orjson.loads(document)) == domain_map
    store.close()


def test_an_index_is_built_once_per_version_of_the_file(tmp_path: Path) -> None:
    _, sites = generate(500, seed=48)
    maps = build_maps(sites, random.Random(49))
    path = tmp_path / "maps.jsonl"
    write_maps(path, maps[:3])
    builds: list[Path] = []
    for _ in range(2):
        index_maps_file(path, tmp_path / "index", on_build=builds.append).close()
    assert builds == [tmp_path / "index"]
    write_maps(path, maps[3:6])  # a new version, as learn writes it
    store = index_maps_file(path, tmp_path / "index", on_build=builds.append)
    assert len(builds) == 2
    assert sorted(store.domains()) == sorted(m.domain for m in maps[3:6])
    store.close()


def test_a_broken_index_is_built_again(tmp_path: Path) -> None:
    _, sites = generate(500, seed=50)
    maps = build_maps(sites, random.Random(51))[:3]
    path = tmp_path / "maps.jsonl"
    write_maps(path, maps)
    index_maps_file(path, tmp_path / "index").close()
    for table in (tmp_path / "index").glob("*.sst"):
        table.write_bytes(b"not a table")
    for manifest in (tmp_path / "index").glob("MANIFEST-*"):
        manifest.write_bytes(b"\0" * 64)
    builds: list[Path] = []
    store = index_maps_file(path, tmp_path / "index", on_build=builds.append)
    assert builds == [tmp_path / "index"]
    assert sorted(store.domains()) == sorted(m.domain for m in maps)
    store.close()


def _empty_map(domain: str) -> bytes:
    return DomainMap(domain=domain, version=1, updated_at="", patterns={}).dumps().encode()


def test_notes_stay_apart_from_the_maps_in_byte_order(tmp_path: Path) -> None:
    with MapStore(tmp_path / "store") as store:
        store.put("a.example", _empty_map("a.example"))
        assert store.first_note(b"u") is None
        for key in (b"u\x02b", b"u\x01z", b"v:a.example", b"u\x01a"):
            store.put_note(key, key[::-1])
        assert store.note(b"v:a.example") == b"elpmaxe.a:v"
        assert store.first_note(b"u") == b"u\x01a"
        store.delete_note(b"u\x01a")
        assert store.first_note(b"u") == b"u\x01z"
        assert store.first_note(b"w") is None and store.note(b"u\x01a") is None
        assert list(store.domains()) == ["a.example"]


def test_note_keys_lists_the_notes_of_a_prefix_only_in_byte_order(tmp_path: Path) -> None:
    with MapStore(tmp_path / "store") as store:
        store.put("p:a.example", _empty_map("p:a.example"))
        assert list(store.note_keys(b"p:")) == []
        for key in (b"p:\x02b", b"p:\x01z", b"q:a", b"p:\x01a", b"o:z"):
            store.put_note(key, b"")
        assert list(store.note_keys(b"p:")) == [b"p:\x01a", b"p:\x01z", b"p:\x02b"]
        assert list(store.note_keys(b"p:\x01")) == [b"p:\x01a", b"p:\x01z"]
        assert list(store.note_keys(b"")) == [b"o:z", b"p:\x01a", b"p:\x01z", b"p:\x02b", b"q:a"]


class _Watched:
    """A store that notes how many maps its reader holds each time it reads one."""

    def __init__(self, store: MapStore) -> None:
        self.store = store
        self.reader: Canonicalizer | None = None
        self.held: list[int] = []

    def document(self, domain: str) -> bytes | None:
        assert self.reader is not None
        self.held.append(self.reader.maps_held)
        return self.store.document(domain)


@pytest.mark.parametrize("native", PATHS, ids=lambda native: "compiled" if native else "python")
def test_a_batch_of_many_domains_holds_at_most_a_quarter_more_than_the_cache(
    tmp_path: Path, native: bool
) -> None:
    urls, sites = generate(4_000, seed=52)
    maps = build_maps(sites, random.Random(53))
    assert len(maps) >= 150
    store = MapStore(tmp_path / "store")
    for domain_map in maps:
        store.put(domain_map.domain, domain_map.dumps().encode())
    watched = _Watched(store)
    reader = watched.reader = Canonicalizer(native=native, maps=watched, cache_domains=16)
    held = Canonicalizer(native=native)
    held.load({domain_map.domain: domain_map for domain_map in maps})
    assert reader.canonical_texts(urls) == held.canonical_texts(urls)
    assert len(watched.held) >= len(maps)
    assert max(watched.held) <= 16 + 16 // 4
    store.close()


class _ReplacedWhileRead:
    """A store whose map of a domain is replaced, and the reader told, while the reader
    is reading the old one: what the stream's map feed can do from its own thread."""

    def __init__(self, old: bytes, new: bytes) -> None:
        self.current, self.new = old, new
        self.reader: Canonicalizer | None = None

    def document(self, domain: str) -> bytes | None:
        read = self.current
        if read != self.new:
            self.current = self.new
            assert self.reader is not None
            self.reader.forget(domain)
        return read


@pytest.mark.parametrize("native", PATHS, ids=lambda native: "compiled" if native else "python")
def test_a_map_replaced_while_it_is_read_is_not_installed_over_its_replacement(
    native: bool,
) -> None:
    urls, sites = generate(300, seed=54)
    first = build_maps(sites, random.Random(55))[0]
    dropping = first.dumps().encode()
    keeping = DomainMap(first.domain, first.version + 1, first.updated_at).dumps().encode()
    source = _ReplacedWhileRead(dropping, keeping)
    reader = source.reader = Canonicalizer(native=native, maps=source)
    mine = [url for url in urls if parse(url).host == first.domain]
    assert mine
    assert reader.canonical_texts(mine) == Canonicalizer(native=native).canonical_texts(mine)
    assert reader.map_for(first.domain) == DomainMap.from_json(orjson.loads(keeping))


def _varied_map() -> DomainMap:
    """A map with what a facts record holds beyond kept and dropped names: names without
    evidence, default values, names learned to keep, undecided patterns, several times."""
    evidence = {
        "id": ParamEvidence("keep", Layer.LEARNED, 3, 3, 0, 0),
        "size": ParamEvidence("keep", Layer.LEARNED, 3, 2, 1, 0, ["m"]),
        "ref": ParamEvidence("drop", Layer.LEARNED, 3, 0, 3, 0),
        "q": ParamEvidence("keep", Layer.INSUFFICIENT, 1, 0, 0, 1),
    }
    patterns = {
        "/p|id,q,ref,size": PatternDecision(
            frozenset({"size", "id", "q"}),
            frozenset({"ref"}),
            evidence,
            Verification(2, 0, 0, []),
            "2026-03-01T10:00:00Z",
            7,
        ),
        "/p|id": PatternDecision(
            frozenset({"id"}),
            frozenset(),
            {"id": evidence["id"]},
            Verification(0, 0, 0, []),
            "2026-01-02T00:00:00Z",
        ),
    }
    return DomainMap(
        "varied.test", 4, "2026-03-01T10:00:00Z", patterns, undecided={"/s|x": "no items"}
    )


def test_the_record_stored_from_a_document_is_the_facts_record_of_its_map() -> None:
    maps = [_varied_map()] + [one for corpus, _ in _corpora() for one in corpus]
    for domain_map in maps:
        document = orjson.loads(domain_map.dumps())
        record, decided = facts_record_of_document(document)
        assert (
            record
            == MapFacts.of_document(document).record()
            == facts_record(domain_map.dumps().encode())
        )
        of_objects = MapFacts.of_map(domain_map).record()
        assert orjson.loads(record) == orjson.loads(of_objects), domain_map.domain
        assert decided == {key: one.decided_at for key, one in domain_map.patterns.items()}


@pytest.mark.parametrize("native", PATHS, ids=lambda native: "compiled" if native else "python")
def test_each_public_call_holds_at_most_the_bound_of_maps(tmp_path: Path, native: bool) -> None:
    """A caller that canonicalizes one URL at a time, by any public method, never leaves
    more maps in memory than ``cache_domains``."""
    maps, texts = next(_corpora())
    _, on_demand = _pair(maps, tmp_path, native, cache=3)
    calls = {
        "canonical_text": on_demand.canonical_text,
        "canonical_url": lambda text: on_demand.canonical_url(parse(text)),
        "canonicalize": on_demand.canonicalize,
        "explain": on_demand.explain,
    }
    for name, call in calls.items():
        most = 0
        for text in texts:
            try:
                call(text)
            except InvalidURL:
                continue
            most = max(most, on_demand.maps_held)
        assert most <= 3, name
    on_demand.close()
