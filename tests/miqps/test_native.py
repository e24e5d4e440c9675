"""The compiled per-URL path (``miqps_native``) against the pure-Python one: the same bytes,
the same errors, for every input and every map.

Skipped where the extension is not built (``scripts/setup`` builds it when cargo is there);
``MIQPS_REQUIRE_NATIVE=1`` (set by ``scripts/test``) makes its absence a failure instead.
"""

from __future__ import annotations

import base64
import json
import os
import random
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from miqps.canonical import (
    Canonicalizer,
    MapFacts,
    _pattern_facts_in_document,
    facts_record_of_document,
)
from miqps.maps import DomainMap, _may_hold_fraction, _pattern_with_wrong_names
from miqps.native import compiled_classes, compiled_map_walks
from miqps.urls import InvalidURL, parse
from testkit.urlgen import build_maps, fuzzed_url, generate, learned_looking_maps
from tests.data import PEER_URL_CASES, WPT_URLTESTDATA

pytestmark = pytest.mark.timeout(180)

COMPILED = compiled_classes()
if COMPILED is None:
    if os.environ.get("MIQPS_REQUIRE_NATIVE") == "1":
        raise ImportError("miqps_native is not built, and MIQPS_REQUIRE_NATIVE=1 needs it")
    pytest.skip(
        "miqps_native is not built (scripts/setup builds it with cargo)", allow_module_level=True
    )
WALKS = COMPILED.walks

DIFFERENTIAL_URLS = 1_000_000
BATCH = 4096
ROOT = Path(__file__).resolve().parents[2]


def test_the_stub_describes_the_compiled_module() -> None:
    """``native/miqps_native.pyi`` (what mypy checks the calls against) names every class,
    method, parameter and attribute the built module has, and nothing it lacks."""
    config = ["--mypy-config-file", str(ROOT / "pyproject.toml")]
    allowlist = ["--allowlist", str(ROOT / "native" / "stubtest-allowlist.txt")]
    result = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "miqps_native", *config, *allowlist],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-1000:]


def test_a_miss_names_the_plan_table_python_numbered() -> None:
    """A key without a plan comes back as a ``Miss`` naming the domain, the table number
    Python handed out, the key and its names; once the plan is given, the URL is answered."""
    assert COMPILED is not None
    core = COMPILED.core()
    core.reset(3)
    core.install("shop.example", 7, 1, [], float("inf"))
    miss = core.decide_text("https://shop.example/p/1?b=2&a=1")
    assert isinstance(miss, COMPILED.miss)
    assert (miss.domain, miss.table, miss.key, miss.names) == (
        "shop.example",
        7,
        "/p/*?a&b",
        ["a", "b"],
    )
    unmapped = core.decide_text("https://elsewhere.example/?z=1")
    assert isinstance(unmapped, COMPILED.miss)
    assert (unmapped.domain, unmapped.table, unmapped.key) == (None, 3, "z")
    core.add_plan("shop.example", 7, "/p/*?a&b", ((0,), 2, (), None))
    assert core.decide_text("https://shop.example/p/1?b=2&a=1") == (
        "https://shop.example/p/1?a=1",
        "/p/*?a&b",
        ("a",),
        ("b",),
        7,
    )


def test_a_domain_not_loaded_yet_is_a_miss_naming_the_url_s_pattern() -> None:
    """With maps loaded on demand, a host without a table is a miss of table 0 that names
    the URL's pattern (the map's reader decodes that pattern with the map), or no pattern
    for a URL without parameters; once the domain is marked absent, its URLs take the
    unmapped table."""
    assert COMPILED is not None
    core = COMPILED.core()
    core.reset(3)
    core.set_on_demand(True)
    for text, key in (
        ("https://shop.example/p/1?b=2&a=1#x", "/p/*?a&b"),
        ("https://shop.example/p/1;v=9?b=2&a=1", "/p/*?;v&a&b"),
    ):
        miss = core.decide_text(text)
        assert isinstance(miss, COMPILED.miss)
        assert (miss.domain, miss.table, miss.key, miss.names) == ("shop.example", 0, key, [])
    bare = core.decide_text("https://shop.example/p/1")
    assert isinstance(bare, COMPILED.miss)
    assert (bare.domain, bare.table, bare.key) == ("shop.example", 0, "")
    core.install("shop.example", 7, 1, [], float("inf"))  # the same key, once it is loaded
    loaded = core.decide_text("https://shop.example/p/1;v=9?b=2&a=1")
    assert isinstance(loaded, COMPILED.miss)
    assert (loaded.table, loaded.key) == (7, "/p/*?;v&a&b")
    core.mark_absent("elsewhere.example")
    unmapped = core.decide_text("https://elsewhere.example/p/1?b=2&a=1")
    assert isinstance(unmapped, COMPILED.miss)
    assert (unmapped.domain, unmapped.table, unmapped.key) == (None, 3, "a&b")


def _pair(maps: Iterable[DomainMap], use_prior: bool = True) -> tuple[Canonicalizer, Canonicalizer]:
    python = Canonicalizer(use_prior=use_prior, native=False)
    native = Canonicalizer(use_prior=use_prior, native=True)
    assert native.native and not python.native
    for domain_map in maps:
        python.update(domain_map)
        native.update(domain_map)
    return python, native


def _differences(
    python: Canonicalizer, native: Canonicalizer, texts: Iterable[str]
) -> tuple[int, list[str]]:
    """How many texts were compared, and the first differences (output or error)."""
    differences: list[str] = []
    compared = 0
    batch: list[str] = []

    def compare() -> None:
        nonlocal compared
        python_errors: list[tuple[int, InvalidURL]] = []
        native_errors: list[tuple[int, InvalidURL]] = []
        expected = python.canonical_texts(batch, python_errors)
        got = native.canonical_texts(batch, native_errors)
        for text, want, have in zip(batch, expected, got, strict=True):
            if want != have and len(differences) < 20:
                differences.append(f"{text!r}: python {want!r}, native {have!r}")
        by_python = [(at, error.reason) for at, error in python_errors]
        by_native = [(at, error.reason) for at, error in native_errors]
        if by_python != by_native and len(differences) < 20:
            differences.append(f"errors: python {by_python[:5]}, native {by_native[:5]}")
        compared += len(batch)
        batch.clear()

    for text in texts:
        batch.append(text)
        if len(batch) == BATCH:
            compare()
    if batch:
        compare()
    return compared, differences


def _fuzzed(count: int, seed: int) -> tuple[list[DomainMap], Iterator[str]]:
    rng = random.Random(seed)
    maps = learned_looking_maps([fuzzed_url(rng) for _ in range(20_000)], rng)
    return maps, (fuzzed_url(rng) for _ in range(count))


def test_the_wpt_and_peer_corpora_come_out_the_same() -> None:
    wpt = json.loads(WPT_URLTESTDATA.read_text(encoding="utf-8"))
    texts = [case["input"] for case in wpt if isinstance(case, dict)]
    for line in PEER_URL_CASES.read_text(encoding="utf-8").splitlines():
        case = json.loads(line)
        texts.append(base64.b64decode(case["input_b64"]).decode("utf-8", "surrogateescape"))
    for use_prior in (True, False):
        compared, differences = _differences(*_pair([], use_prior), texts)
        assert compared == len(texts) > 1_500
        assert differences == []


def _one_by_one(canonicalizer: Canonicalizer, text: str) -> str:
    try:
        return canonicalizer.canonicalize(text)
    except InvalidURL as error:
        return f"InvalidURL: {error.reason}"


def test_one_url_at_a_time_comes_out_the_same() -> None:
    maps, texts = _fuzzed(5_000, seed=13)
    python, native = _pair(maps)
    differences = [text for text in texts if _one_by_one(python, text) != _one_by_one(native, text)]
    assert differences == []


def test_maps_replaced_between_batches_give_the_same_output() -> None:
    maps, texts = _fuzzed(40_000, seed=11)
    python, native = _pair(maps[: len(maps) // 2])
    corpus = list(texts)
    assert _differences(python, native, corpus[:20_000])[1] == []
    for domain_map in maps[len(maps) // 2 :]:
        python.update(domain_map)
        native.update(domain_map)
    python.forget(maps[0].domain)
    native.forget(maps[0].domain)
    python.use_prior = native.use_prior = False
    assert _differences(python, native, corpus)[1] == []


def _decision_differences(
    python: Canonicalizer, native: Canonicalizer, texts: Iterable[str]
) -> tuple[int, list[str]]:
    differences: list[str] = []
    decided = 0
    for text in texts:
        try:
            url = parse(text)
        except InvalidURL:
            continue
        want = python.decide(url, text, with_layers=False)
        have = native.decide(url, text, with_layers=False)
        decided += 1
        if want != have and len(differences) < 20:
            differences.append(f"{text!r}: python {want}, native {have}")
    return decided, differences


@pytest.mark.slow
def test_the_stream_s_decisions_come_out_the_same() -> None:
    """What the canonicalizer front asks for each input (``decide`` without layers): the
    canonical URL, pattern, kept and dropped names, status and map version."""
    maps, fuzzed = _fuzzed(150_000, seed=17)
    decided, differences = _decision_differences(*_pair(maps), fuzzed)
    assert differences == [] and decided > 100_000
    urls, sites = generate(150_000, seed=18)
    python, native = _pair(build_maps(sites, random.Random(19)))
    decided, differences = _decision_differences(python, native, urls)
    assert differences == [] and decided == len(urls)
    learned = sum(
        native.decide(parse(url), url, with_layers=False).status == "learned" for url in urls[:1000]
    )
    assert learned > 500


@pytest.mark.slow
def test_a_million_fuzzed_urls_come_out_the_same() -> None:
    """Half through maps learned from fuzzed URLs (every normalization trap, most of them
    out of the common case), half through the speed benchmark's sites (the common case,
    confirmed default values moving URLs between patterns)."""
    maps, fuzzed = _fuzzed(DIFFERENTIAL_URLS // 2, seed=5)
    compared, differences = _differences(*_pair(maps), fuzzed)
    assert differences == []
    urls, sites = generate(DIFFERENTIAL_URLS // 2, seed=6)
    more, more_differences = _differences(*_pair(build_maps(sites, random.Random(7))), urls)
    assert more_differences == []
    assert compared + more == DIFFERENTIAL_URLS


def _map_documents(seed: int) -> list[dict[str, Any]]:
    """Maps of fuzzed URLs' names (odd characters, names without evidence, default values),
    and of the stream's URLs, as documents; a few without ``urls_seen``."""
    rng = random.Random(seed)
    maps = learned_looking_maps([fuzzed_url(rng) for _ in range(3_000)], rng)
    _, sites = generate(2_000, seed=seed)
    maps += build_maps(sites, rng)
    documents = [orjson.loads(one.dumps()) for one in maps]
    for document in documents[::7]:
        for decision in document["patterns"].values():
            decision.pop("urls_seen", None)
    return documents


def test_a_map_document_s_pattern_facts_come_out_the_same() -> None:
    """What storing a map makes of each pattern (the facts record's entries as JSON, the
    names learned to keep, when each was decided), compiled and in Python: the same."""
    walks = WALKS
    documents = _map_documents(seed=23)
    patterns = sum(len(document["patterns"]) for document in documents)
    assert len(documents) > 100 and patterns > 1_000
    for document in documents:
        facts, learned, decided = _pattern_facts_in_document(document["patterns"])
        assert walks.pattern_facts(document["patterns"]) == (orjson.dumps(facts), learned, decided)


def test_the_facts_record_is_the_same_bytes_on_both_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    documents = _map_documents(seed=29)
    native = [facts_record_of_document(document) for document in documents]
    monkeypatch.setenv("MIQPS_NATIVE", "0")
    assert compiled_map_walks() is None
    assert [facts_record_of_document(document) for document in documents] == native
    for (record, _), document in zip(native, documents, strict=True):
        assert record == MapFacts.of_document(document).record()


def test_names_and_values_of_any_character_are_written_as_orjson_writes_them() -> None:
    """Every control character, quotes, backslashes, non-ASCII letters and emoji, in a
    pattern's key, names, default values and decision time."""
    odd = "".join(map(chr, range(32))) + '"\\/é\u2028😀'
    names = [f"a{odd}", "b", f"{odd}z"]
    params = {
        name: {"decision": "keep", "layer": "learned", "default_values": [odd, "x"]}
        for name in names
    }
    patterns = {
        f"/p{odd}?" + "&".join(names): {
            "kept": names,
            "dropped": [],
            "decided_at": odd,
            "urls_seen": 2**40,
            "params": params,
        }
    }
    facts, learned, decided = _pattern_facts_in_document(patterns)
    assert WALKS.pattern_facts(patterns) == (orjson.dumps(facts), learned, decided)


def test_a_pattern_with_wrong_names_is_found_the_same() -> None:
    """The pattern whose kept and dropped names are not its key's: a name kept and dropped,
    one missing or added, a key without parameters that keeps or drops one."""
    walks = WALKS
    rng = random.Random(31)
    found = 0
    for document in _map_documents(seed=37):
        patterns = document["patterns"]
        assert walks.pattern_with_wrong_names(patterns) is None
        assert _pattern_with_wrong_names(patterns) is None
        key = rng.choice(list(patterns))
        decision = patterns[key]
        names = decision["kept"] + decision["dropped"]
        match rng.randrange(4):
            case 0:
                decision["kept"].append(names[0])
                decision["dropped"].append(names[0])
            case 1:
                decision["kept"].append("not-in-the-key")
            case 2:
                decision["dropped"] = decision["dropped"][1:] or []
                decision["kept"] = decision["kept"] if decision["dropped"] else []
            case _:
                patterns["/bare?"] = {**decision, "kept": [], "dropped": []}
                patterns["/bare"] = {**decision, "kept": [], "dropped": []}
        expected = _pattern_with_wrong_names(patterns)
        assert walks.pattern_with_wrong_names(patterns) == expected
        found += expected is not None
    assert found > 50
    bare: dict[str, Any] = {"/p?": {"kept": [], "dropped": []}, "/q": {"kept": [], "dropped": []}}
    assert walks.pattern_with_wrong_names(bare) is None
    assert walks.pattern_with_wrong_names({"/p?": {"kept": ["a"], "dropped": []}}) == "/p?"


@pytest.mark.parametrize(
    "text",
    [
        b'{"a":1.5}',
        b'{"a": -2e3}',
        b"[ 7E1]",
        b'{"a":"shop0.example"}',
        b'{"a":"a,1.5"}',
        b'{"a":10,"b":[1,2]}',
        b"1.0",
        b"-1e5",
        b'"1.2"',
        b"x1.2",
        b"",
        b"5",
        b'{"v":\n\t-0.5}',
    ],
)
def test_a_fraction_is_looked_for_the_same(text: bytes) -> None:
    assert WALKS.may_hold_fraction(text) == _may_hold_fraction(text)


def test_fuzzed_json_texts_are_looked_at_the_same_for_fractions() -> None:
    rng = random.Random(41)
    alphabet = b'0123456789.eE-+ \t\n:,[]{}"ax'
    said = set()
    for _ in range(50_000):
        text = bytes(rng.choice(alphabet) for _ in range(rng.randrange(0, 24)))
        native = WALKS.may_hold_fraction(text)
        assert native == _may_hold_fraction(text), text
        said.add(native)
    assert said == {True, False}
