import io
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from miqps.canonical import Canonicalizer, StaticLayers
from miqps.maps import (
    DomainMap,
    Layer,
    ParamEvidence,
    PatternDecision,
    Verification,
    write_maps,
)
from miqps.urls import InvalidURL, NormalizedURL, parse, path_shape, pattern_key
from tests.miqps.resource import resource_difference


def learned_map() -> DomainMap:
    params = {
        "id": ParamEvidence("keep", Layer.LEARNED, 1, 1, 0, 0),
        "utm_source": ParamEvidence("keep", Layer.LEARNED, 4, 4, 0, 0),
        "sid": ParamEvidence("drop", Layer.LEARNED, 6, 0, 6, 0),
        "variant": ParamEvidence("drop", Layer.LEARNED, 6, 0, 6, 0),
    }
    decision = PatternDecision(
        frozenset({"id", "utm_source"}),
        frozenset({"sid", "variant"}),
        params,
        Verification(2, 0, 0, []),
        "2026-12-02T00:00:00Z",
        5,
    )
    return DomainMap(
        "shop.example", 2, "2026-12-02T00:00:00Z", {"/p?id&sid&utm_source&variant": decision}
    )


def test_learned_pattern_keeps_only_kept_parameters_in_sorted_order() -> None:
    canon = Canonicalizer()
    canon.update(learned_map())
    url = parse("http://shop.example/p?sid=9&utm_source=a&id=4")
    assert canon.canonical_url(url) == "http://shop.example/p?id=4&sid=9&utm_source=a"
    url = parse("http://shop.example/p?sid=9&utm_source=a&id=4&variant=2")
    assert canon.canonical_url(url) == ("http://shop.example/p?id=4&utm_source=a&variant=2"), (
        "the allowlist keeps variant even though the map dropped it"
    )


def test_unlearned_pattern_keeps_everything_but_the_cold_start_prior() -> None:
    canon = Canonicalizer()
    url = parse("http://other.example/p?gclid=1&utm_medium=x&ref=2")
    assert canon.canonical_url(url) == "http://other.example/p?ref=2"
    decision = canon.decide(url)
    assert decision.status == "provisional"
    assert decision.layers == {"gclid": "prior", "ref": "unlearned", "utm_medium": "prior"}


def test_prior_is_switchable() -> None:
    canon = Canonicalizer(use_prior=False)
    url = parse("http://other.example/p?gclid=1&ref=2")
    assert canon.canonical_url(url) == "http://other.example/p?gclid=1&ref=2"


def test_learned_evidence_wins_over_the_prior_in_unlearned_patterns() -> None:
    canon = Canonicalizer()
    canon.update(learned_map())
    url = parse("http://shop.example/p?id=4&utm_source=a&color=red")
    decision = canon.decide(url)
    assert decision.status == "provisional"
    assert "utm_source" in decision.kept, "this domain learned that utm_source changes pages"


def test_decide_reports_layers_and_map_version() -> None:
    canon = Canonicalizer(StaticLayers.default())
    canon.update(learned_map())
    decision = canon.decide(parse("http://shop.example/p?sid=9&utm_source=a&id=4&variant=1"))
    assert decision.status == "learned"
    assert decision.map_version == 2
    assert decision.layers == {
        "id": "learned",
        "sid": "learned",
        "utm_source": "learned",
        "variant": "allowlist",
    }
    assert decision.dropped == ("sid",)


def test_a_map_kept_as_its_document_decides_and_explains_alike() -> None:
    domain_map = learned_map()
    as_objects, as_document = Canonicalizer(), Canonicalizer()
    as_objects.update(domain_map)
    as_document.update(domain_map, domain_map.dumps().encode())
    assert as_document.map_for("shop.example") == domain_map
    for text in (
        "http://shop.example/p?sid=9&utm_source=a&id=4&variant=1",
        "http://shop.example/p?sid=9&gclid=3",
        "http://other.example/p?id=1",
    ):
        url = parse(text)
        assert as_document.decide(url) == as_objects.decide(url)
        assert as_document.decide(url, with_layers=False) == as_objects.decide(url)._replace(
            layers={}, items={}
        )


def test_the_prior_drops_what_a_learned_pattern_has_no_evidence_for() -> None:
    params = {
        "id": ParamEvidence("keep", Layer.LEARNED, 2, 2, 0, 0),
        "sid": ParamEvidence("keep", Layer.INSUFFICIENT, 3, 0, 0, 3),
        "utm_source": ParamEvidence("keep", Layer.INSUFFICIENT, 3, 0, 0, 3),
        "gclid": ParamEvidence("keep", Layer.INSUFFICIENT, 3, 0, 0, 3),
    }
    decision = PatternDecision(
        frozenset(params),
        frozenset(),
        params,
        Verification(0, 0, 3, []),
        "2026-12-02T00:00:00Z",
        4,
    )
    hanging = DomainMap(
        "shop.example", 1, "2026-12-02T00:00:00Z", {"/dl?gclid&id&sid&utm_source": decision}
    )
    url = parse("http://shop.example/dl?id=4&sid=9&utm_source=a&gclid=x")
    canon = Canonicalizer()
    canon.update(hanging)
    found = canon.decide(url)
    assert found.canonical_url == "http://shop.example/dl?id=4&sid=9"
    assert found.layers == {
        "gclid": "prior",
        "id": "learned",
        "sid": "insufficient-evidence",
        "utm_source": "prior",
    }
    assert canon.canonical_texts([url.url]) == [found.canonical_url]
    canon.use_prior = False
    assert canon.canonical_texts([url.url]) == [url.url]
    assert canon.decide(url).layers["utm_source"] == "insufficient-evidence"
    canon.use_prior = True
    canon.update(
        DomainMap(
            "shop.example",
            2,
            "2026-12-02T00:00:00Z",
            {**hanging.patterns, **learned_map().patterns},
        )
    )
    assert canon.canonical_url(url) == "http://shop.example/dl?id=4&sid=9&utm_source=a", (
        "the domain learned that utm_source changes pages"
    )


# --- The fast paths against the plain definition ----------------------------------------

NAMES = [
    "a",
    "a.b",
    "a-b",
    "a2",
    "ab",
    "id",
    "page",
    "page2",
    "sid",
    "variant",
    "utm_source",
    "utm_source.x",
    "gclid",
    "B",
    "",
    "x%3Dy",
]


def _reference(canon: Canonicalizer, maps: dict[str, DomainMap], url: NormalizedURL) -> str:
    """canonical_url spelled out: the learned pattern's kept set, or the unlearned default,
    applied again to what is left until nothing more is dropped."""
    layers = canon.layers
    domain_map = maps.get(url.host)
    learned = {
        name
        for d in (domain_map.patterns.values() if domain_map else ())
        for name, evidence in d.params.items()
        if evidence.decision == "keep" and evidence.layer == Layer.LEARNED
    }
    names = set(url.names)
    while True:
        pattern = pattern_key(path_shape(url.path), names)
        decision = domain_map.patterns.get(pattern) if domain_map else None
        if decision is not None:
            keep = decision.kept | (layers.allowlist & (decision.kept | decision.dropped))
            if canon.use_prior:
                keep = frozenset(
                    {
                        n
                        for n in keep
                        if decision.params[n].layer != Layer.INSUFFICIENT
                        or not layers.prior_drops(n)
                        or n in learned
                        or n in layers.allowlist
                    }
                )
        elif canon.use_prior:
            keep = frozenset(
                n
                for n in names
                if not layers.prior_drops(n) or n in learned or n in layers.allowlist
            )
        else:
            keep = frozenset(names)
        if keep & names == names:
            return url.with_only(names)
        names &= keep


def _corpus(seed: int, size: int) -> list[str]:
    rng = random.Random(seed)
    texts = []
    for _ in range(size):
        pairs = []
        for name in rng.choices(NAMES, k=rng.randint(1, 5)):
            value = rng.choice(["1", "2", "", "=z"])
            pairs.append(name if rng.random() < 0.15 else f"{name}={value}")
        host = rng.choice(
            [
                "m.example",
                "M.Example",
                "u.example",
                "m.example:8080",
                "user@m.example",
                "[::1]",
                "b\u00fccher.example",
            ]
        )
        path = rng.choice(["p/1", "s", "x/y/z", "%7euser/", "item-4", ""])
        query = "&".join(pairs) + rng.choice(["", "", "&", "&&x"])
        fragment = rng.choice(["", "", "#!r%7e", "#x?y"])
        texts.append(f"{rng.choice(['http', 'https', 'HTTP'])}://{host}/{path}?{query}{fragment}")
    texts += [
        "",
        "ftp://m.example/?a=1",
        "http://m.example/\x00?a=1",
        "not a url",
        "http://m.example/?" + "a" * 9000,
        "http://m.example/\udcff?a=1",
        "http://m.example",
        "http://m.example/p?=1",
        "http://m.example/p?=1&=2",
        "http://m.example/p?&&",
    ]
    return texts


def _learned_maps(texts: list[str], seed: int) -> dict[str, DomainMap]:
    rng = random.Random(seed)
    patterns: dict[str, PatternDecision] = {}
    for text in texts:
        try:
            url = parse(text)
        except InvalidURL:
            continue
        if url.host != "m.example" or not url.pairs or rng.random() < 0.2:
            continue
        names = sorted(url.names)
        kept = frozenset(name for name in names if rng.random() < 0.5)
        params = {
            name: ParamEvidence(
                "keep" if name in kept else "drop",
                Layer.LEARNED if rng.random() < 0.8 else Layer.INSUFFICIENT,
                3,
                3,
                0,
                0,
            )
            for name in names
        }
        patterns.setdefault(
            url.pattern,
            PatternDecision(
                kept, frozenset(names) - kept, params, Verification(), "2026-12-02T00:00:00Z", 1
            ),
        )
    return {"m.example": DomainMap("m.example", 3, "2026-12-02T00:00:00Z", patterns)}


@pytest.mark.parametrize("use_prior", [True, False])
@pytest.mark.parametrize("seed", [1, 2])
def test_every_path_gives_the_plain_definition(use_prior: bool, seed: int) -> None:
    texts = _corpus(seed, 4000)
    maps = _learned_maps(texts, seed)
    canon = Canonicalizer(use_prior=use_prior)
    canon.load(maps)
    expected: list[str] = []
    reasons: dict[int, str] = {}
    for index, text in enumerate(texts):
        try:
            url = parse(text)
        except InvalidURL as error:
            expected.append("")
            reasons[index] = error.reason
            continue
        expected.append(_reference(canon, maps, url))
        assert canon.canonical_url(url) == expected[-1], text
        assert canon.canonical_text(text) == expected[-1], text
        assert canon.decide(url, with_layers=False).canonical_url == expected[-1], text
    for _ in range(2):  # cold, then with every plan remembered
        errors: list[tuple[int, InvalidURL]] = []
        assert canon.canonical_texts(texts, errors) == expected
        assert {index: error.reason for index, error in errors} == reasons
    control_free = [i for i, text in enumerate(texts) if not re.search("[\x00-\x1f\x7f]", text)]
    got = canon.canonical_texts([texts[i] for i in control_free], control_free=True)
    assert got == [expected[i] for i in control_free]


def test_canonical_text_raises_like_parse() -> None:
    canon = Canonicalizer()
    for text, reason in [("ftp://a.example/", "scheme"), ("", "empty"), ("x", "parsable")]:
        with pytest.raises(InvalidURL, match=reason):
            canon.canonical_text(text)


def test_string_order_that_is_not_name_order_still_sorts_by_name() -> None:
    texts = ["http://a.example/?a.b=2&a=1", "http://a.example/?a=2&a=1&a"]
    assert Canonicalizer().canonical_texts(texts) == [
        "http://a.example/?a=1&a.b=2",
        "http://a.example/?a=2&a=1&a",
    ]


def test_a_learned_pattern_of_one_empty_name_is_not_the_empty_pattern() -> None:
    decision = PatternDecision(frozenset({""}), frozenset(), {}, Verification(), "t", 1)
    canon = Canonicalizer()
    canon.update(DomainMap("a.example", 1, "t", {"/p?": decision}))
    assert canon.canonical_texts(["http://a.example/p?=1"]) == ["http://a.example/p?=1"]


@pytest.mark.parametrize("mapped", [True, False])
def test_a_url_without_parameters_does_not_decide_for_one_of_an_empty_name(mapped: bool) -> None:
    """Both are in pattern ``/p?``; what :func:`settle` did for one is never the other's."""
    canon = Canonicalizer()
    if mapped:
        decision = PatternDecision(frozenset({""}), frozenset(), {}, Verification(), "t", 1)
        canon.update(DomainMap("a.example", 1, "t", {"/p?": decision}))
    bare, empty = parse("http://a.example/p"), parse("http://a.example/p?=1")
    for _ in range(2):
        assert canon.decide(bare, with_layers=False).canonical_url == "http://a.example/p"
        decided = canon.decide(empty, with_layers=False)
        assert (decided.canonical_url, decided.kept) == ("http://a.example/p?=1", ("",))


def test_a_map_under_a_key_with_a_port_matches_no_url() -> None:
    decision = PatternDecision(frozenset(), frozenset({"a"}), {}, Verification(), "t", 1)
    canon = Canonicalizer()
    for domain in ("a.example:8080", "u@a.example"):
        canon.update(DomainMap(domain, 1, "t", {"/p?a": decision}))
        assert canon.map_for(domain) is not None
    texts = ["http://a.example:8080/p?a=1", "http://u@a.example/p?a=1"]
    assert canon.canonical_texts(texts) == texts
    assert [canon.canonical_url(parse(text)) for text in texts] == texts


def test_switching_the_prior_or_the_map_forgets_remembered_plans() -> None:
    canon = Canonicalizer()
    text = "http://shop.example/p?sid=9&utm_source=a&id=4&color=red"
    assert canon.canonical_texts([text]) == ["http://shop.example/p?color=red&id=4&sid=9"]
    canon.use_prior = False
    assert canon.canonical_texts([text]) == [
        "http://shop.example/p?color=red&id=4&sid=9&utm_source=a"
    ]
    canon.use_prior = True
    canon.update(learned_map())
    assert canon.canonical_texts([text]) == [
        "http://shop.example/p?color=red&id=4&sid=9&utm_source=a"
    ], "the domain learned that utm_source changes pages"


# --- The command ------------------------------------------------------------------------


def _run_cli(stdin: bytes, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "miqps.cli", "canonicalize", *args],
        input=stdin,
        capture_output=True,
        check=True,
        timeout=120,
    )


def _expected_lines(data: bytes, canon: Canonicalizer) -> tuple[list[str], list[str]]:
    """What a line-by-line reader of a UTF-8 text stream with universal newlines prints."""
    stream = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="surrogateescape")
    out: list[str] = []
    messages: list[str] = []
    for number, line in enumerate(stream, 1):
        try:
            out.append(canon.canonical_url(parse(line.rstrip("\r\n"))))
        except InvalidURL as error:
            out.append("")
            messages.append(f"line {number}: invalid URL: {error.reason}")
    return out, messages


@pytest.mark.parametrize("junk", [False, True])
def test_cli_prints_one_line_per_input_line_across_blocks(tmp_path: Path, junk: bool) -> None:
    texts = [text for text in _corpus(3, 30000) if "\x00" not in text and "\udcff" not in text]
    maps = _learned_maps(texts, 3)
    write_maps(tmp_path / "maps.jsonl", maps.values())
    lines = [text.encode("utf-8") for text in texts]
    if junk:  # control characters, CR line ends, invalid UTF-8
        lines[10] += b"\r"
        lines[20] = b"http://m.example/?a=\x01"
        lines[30] += b"\rhttp://m.example/?b=1&a=2"
        lines[-5] = b"http://m.example/?\xff=1"
    data = b"\n".join(lines)  # > 1 MiB, and no final line end
    assert len(data) > 1 << 20
    canon = Canonicalizer()
    canon.load(maps)
    out, messages = _expected_lines(data, canon)
    result = _run_cli(data, "--maps", str(tmp_path / "maps.jsonl"))
    assert result.stdout.decode().split("\n") == [*out, ""]
    assert result.stderr.decode().splitlines() == messages


def test_cli_takes_urls_as_arguments() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "miqps.cli",
            "canonicalize",
            "--no-prior",
            "HTTP://A.example/p?utm_source=1&id=2",
            "ftp://x/",
        ],
        capture_output=True,
        check=True,
        timeout=60,
    )
    assert result.stdout.decode() == "http://a.example/p?id=2&utm_source=1\n\n"
    assert result.stderr.decode() == "line 2: invalid URL: scheme 'ftp' is not http or https\n"


def test_confirmed_default_values_are_elided_and_other_values_kept() -> None:
    from miqps.maps import DomainMap as Map
    from miqps.maps import Layer as L
    from miqps.maps import ParamEvidence as Evidence
    from miqps.maps import PatternDecision as Pattern
    from miqps.maps import Verification as Check

    params = {
        "id": Evidence("keep", L.LEARNED, 1, 1, 0, 0),
        "lang": Evidence("keep", L.LEARNED, 3, 2, 1, 0, ["lang=en"]),
    }
    decision = Pattern(
        frozenset({"id", "lang"}),
        frozenset(),
        params,
        Check(1, 0, 0, []),
        "2026-12-02T00:00:00Z",
        5,
    )
    listing = Pattern(
        frozenset({"page"}),
        frozenset({"ref"}),
        {
            "page": Evidence("keep", L.LEARNED, 2, 2, 0, 0, ["page=1"]),
            "ref": Evidence("drop", L.LEARNED, 6, 0, 6, 0),
        },
        Check(1, 0, 0, []),
        "2026-12-02T00:00:00Z",
        5,
    )
    canon = Canonicalizer()
    canon.update(
        Map(
            "a.example",
            1,
            "2026-12-02T00:00:00Z",
            {"/p?id&lang": decision, "/list?page&ref": listing},
        )
    )
    for text, expected in [
        ("http://a.example/p?lang=en&id=4", "http://a.example/p?id=4"),
        ("http://a.example/p?lang=de&id=4", "http://a.example/p?id=4&lang=de"),
        ("http://a.example/list?ref=x&page=1#!/top", "http://a.example/list#!/top"),
        ("http://a.example/list?ref=x&page=2", "http://a.example/list?page=2"),
    ]:
        assert canon.canonical_url(parse(text)) == expected
        assert canon.canonical_text(text) == expected
        assert canon.canonical_texts([text]) == [expected]
        assert canon.decide(parse(text)).canonical_url == expected
    assert canon.decide(parse("http://a.example/p?lang=en&id=4")).dropped == ("lang",)


# --- Idempotence and one answer ----------------------------------------------------------


def _pattern(
    kept: set[str], dropped: set[str], defaults: dict[str, list[str]] | None = None
) -> PatternDecision:
    params = {
        name: ParamEvidence(
            "keep" if name in kept else "drop",
            Layer.LEARNED,
            3,
            3 if name in kept else 0,
            0 if name in kept else 3,
            0,
            (defaults or {}).get(name, []),
        )
        for name in kept | dropped
    }
    return PatternDecision(
        frozenset(kept), frozenset(dropped), params, Verification(), "2026-12-02T00:00:00Z", 5
    )


def _all_answers(canon: Canonicalizer, text: str) -> set[str]:
    url = parse(text)
    return {
        canon.canonical_texts([text])[0],
        canon.canonical_text(text),
        canon.canonical_url(url),
        canon.decide(url).canonical_url,
    }


def test_dropping_into_another_learned_pattern_drops_what_that_pattern_drops() -> None:
    canon = Canonicalizer(use_prior=False)
    canon.update(
        DomainMap(
            "forum.example",
            1,
            "2026-12-02T00:00:00Z",
            {
                "/board?b&order&start&utm_source": _pattern(
                    {"b", "order", "start"}, {"utm_source"}
                ),
                "/board?b&order&start": _pattern({"b", "start"}, {"order"}),
            },
        )
    )
    text = "http://forum.example/board?b=general&utm_source=x&start=45&order=latest"
    canonical = "http://forum.example/board?b=general&start=45"
    assert _all_answers(canon, text) == {canonical}
    assert _all_answers(canon, canonical) == {canonical}
    decision = canon.decide(parse(text))
    assert decision.pattern == "/board?b&order&start&utm_source"
    assert decision.dropped == ("order", "utm_source")
    assert decision.layers["order"] == "learned"


def test_leaving_out_a_default_value_also_moves_the_url_to_another_pattern() -> None:
    canon = Canonicalizer(use_prior=False)
    canon.update(
        DomainMap(
            "shop.example",
            1,
            "2026-12-02T00:00:00Z",
            {
                "/list?page&q&ref": _pattern({"page", "q", "ref"}, set(), {"page": ["page=1"]}),
                "/list?q&ref": _pattern({"q"}, {"ref"}),
            },
        )
    )
    text = "http://shop.example/list?ref=x&page=1&q=shoes"
    assert _all_answers(canon, text) == {"http://shop.example/list?q=shoes"}
    assert _all_answers(canon, "http://shop.example/list?ref=x&page=2&q=shoes") == {
        "http://shop.example/list?page=2&q=shoes&ref=x"
    }


def test_plain_and_json_agree_when_a_name_repeats() -> None:
    canon = Canonicalizer()
    canon.update(
        DomainMap(
            "news.example",
            1,
            "2026-12-02T00:00:00Z",
            {
                "/a?hl&id&utm_source": _pattern({"hl", "id"}, {"utm_source"}, {"hl": ["hl=en"]}),
            },
        )
    )
    text = "http://news.example/a?utm_source=a&utm_source=b&hl=en&id=7"
    assert _all_answers(canon, text) == {"http://news.example/a?id=7"}


def test_matrix_parameters_are_learned_parameters_of_the_pattern() -> None:
    canon = Canonicalizer()
    canon.update(
        DomainMap(
            "java.example",
            1,
            "2026-12-02T00:00:00Z",
            {
                "/p/*?;jsessionid&id": _pattern({"id"}, {";jsessionid"}),
                "/docs/*?;v": _pattern({";v"}, set()),
            },
        )
    )
    text = "http://java.example/p/12;jsessionid=AB12?id=3"
    assert _all_answers(canon, text) == {"http://java.example/p/12?id=3"}
    decision = canon.decide(parse(text))
    assert (decision.pattern, decision.kept, decision.dropped) == (
        "/p/*?;jsessionid&id",
        ("id",),
        (";jsessionid",),
    )
    assert decision.layers == {";jsessionid": "learned", "id": "learned"}
    assert _all_answers(canon, "http://java.example/docs/guide;v=2") == {
        "http://java.example/docs/guide;v=2"
    }
    unlearned = "http://other.example/p/12;jsessionid=AB12;utm_source=x?utm_source=y"
    assert _all_answers(canon, unlearned) == {"http://other.example/p/12;utm_source=x"}, (
        "without evidence a matrix parameter is kept, but for the prior's exact names"
    )


_PROPERTY_NAMES = [
    "id",
    "page",
    "ref",
    "utm_source",
    "gclid",
    "hl",
    "a.b",
    "a",
    ";jsessionid",
    ";v",
    ";sid",
]
_VALUES = ["1", "2", "en", "", "%%36%31", "%7e"]


@st.composite
def _urls(draw: st.DrawFn) -> str:
    host = draw(st.sampled_from(["m.example", "M.example", "n.example", "m.example:81"]))
    segments = draw(
        st.lists(st.sampled_from(["p", "12", "docs", "..", "a;b", "%%32%45", ""]), max_size=3)
    )
    query: list[str] = []
    for name in draw(st.lists(st.sampled_from(_PROPERTY_NAMES), max_size=6)):
        pair = f"{name.lstrip(';')}={draw(st.sampled_from(_VALUES))}"
        if name.startswith(";") and draw(st.booleans()):
            query.append(";" + pair)  # a query name that starts with ";"
        elif name.startswith(";") and segments:
            segments[-1] += ";" + pair
        else:
            query.append(pair)
    route = draw(st.sampled_from(["", "#x", "#!r"]))
    return f"http://{host}/{'/'.join(segments)}?{'&'.join(query)}{route}"


def _random_maps(texts: list[str], rng: random.Random) -> list[DomainMap]:
    """Learned-looking maps: patterns of the URLs and of subsets of their names, keeping
    and dropping at random, with default values."""
    patterns: dict[str, dict[str, PatternDecision]] = {}
    for text in texts:
        url = parse(text)
        names = sorted(url.names)
        for subset in (names, [n for n in names if rng.random() < 0.7]):
            kept = {name for name in subset if rng.random() < 0.6}
            defaults = {name: [url.value_of(name)] for name in kept if rng.random() < 0.4}
            key = pattern_key(path_shape(url.path), subset)
            patterns.setdefault(url.host, {})[key] = _pattern(kept, set(subset) - kept, defaults)
    return [DomainMap(host, 1, "2026-12-02T00:00:00Z", by_key) for host, by_key in patterns.items()]


@settings(max_examples=300, deadline=None)
@given(st.lists(_urls(), min_size=1, max_size=12), st.randoms(use_true_random=False), st.booleans())
def test_every_answer_is_one_idempotent_canonical_url_of_the_same_resource(
    texts: list[str], rng: random.Random, use_prior: bool
) -> None:
    canon = Canonicalizer(use_prior=use_prior)
    canon.load({m.domain: m for m in _random_maps(texts, rng)})
    outputs = canon.canonical_texts(texts)
    for text, output in zip(texts, outputs, strict=True):
        decision = canon.decide(parse(text))
        assert _all_answers(canon, text) == {output}
        assert canon.canonical_texts([output]) == [output]
        assert canon.decide(parse(output)).canonical_url == output
        assert resource_difference(text, output, decision.dropped) == ""


def test_a_pattern_with_default_values_that_drops_moves_the_url_on_without_eliding() -> None:
    canon = Canonicalizer(use_prior=False)
    canon.update(
        DomainMap(
            "shop.example",
            1,
            "2026-12-02T00:00:00Z",
            {
                "/list?page&q&ref": _pattern({"page", "q"}, {"ref"}, {"page": ["page=1"]}),
                "/list?page&q": _pattern({"q"}, {"page"}),
            },
        )
    )
    for text in (
        "http://shop.example/list?ref=x&page=2&q=shoes",
        "http://shop.example/list?ref=x&page=1&q=shoes",
    ):
        assert _all_answers(canon, text) == {"http://shop.example/list?q=shoes"}, text


def test_a_pattern_recorded_undecided_is_explained_with_its_cause_and_canonicalized_alike() -> None:
    recorded = learned_map()
    recorded.undecided = {
        "/account?id&utm_source": "disallowed",
        "/p?id&sid&utm_source&variant": "failed",  # decided too: the decision wins
    }
    with_record, without = Canonicalizer(), Canonicalizer()
    with_record.update(recorded)
    without.update(learned_map())
    refused = with_record.explain("http://shop.example/account?utm_source=a&id=4")
    assert (refused.status, refused.undecided) == ("provisional", "disallowed")
    assert refused.to_json()["undecided"] == "disallowed"
    assert refused._replace(undecided=None) == without.explain(refused.url)
    learned = with_record.explain("http://shop.example/p?sid=9&utm_source=a&id=4&variant=1")
    assert (learned.status, learned.undecided) == ("learned", None)
    assert with_record.explain("http://shop.example/other?id=4").undecided is None
    unlayered = with_record.decide(parse(refused.url), with_layers=False)
    assert unlayered.undecided is None, "the per-URL path looks nothing up"
    texts = [
        "http://shop.example/account?utm_source=a&id=4&gclid=1",
        "http://shop.example/account?id=5",
        "http://shop.example/p?sid=9&utm_source=a&id=4&variant=1",
        "http://shop.example/x?y=1",
    ]
    assert with_record.canonical_texts(texts) == without.canonical_texts(texts)
