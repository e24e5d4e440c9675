import json
from urllib.parse import unquote_to_bytes

import can_ada
import pytest
from hypothesis import given
from hypothesis import strategies as st

from miqps.urls import (
    InvalidURL,
    normalize_percent_encoding,
    parse,
    path_shape,
    pattern_key,
    split_pattern,
)
from tests.data import WPT_URLTESTDATA
from tests.miqps.resource import resource_difference


def test_static_normalization_lowercases_drops_default_port_and_fragment() -> None:
    url = parse("HTTP://Shop.EXAMPLE.com:80/Path/Case?b=2&a=1#frag")
    assert url.url == "http://shop.example.com/Path/Case?a=1&b=2"
    assert url.host == "shop.example.com"


def test_hashbang_routes_are_kept() -> None:
    assert parse("https://a.example/app?x=1#!/item/7").url == "https://a.example/app?x=1#!/item/7"


def test_idna_hosts_are_converted() -> None:
    assert parse("http://Bücher.example/x").host == "xn--bcher-kva.example"


def test_non_default_port_is_kept() -> None:
    assert parse("https://a.example:8443/").url == "https://a.example:8443/"


@pytest.mark.parametrize("encoded", ["%2F", "%3F", "%23", "%26", "%3D", "%2B"])
def test_reserved_percent_escapes_are_never_decoded(encoded: str) -> None:
    url = parse(f"http://a.example/x{encoded.lower()}y?q=a{encoded.lower()}b")
    assert url.url == f"http://a.example/x{encoded}y?q=a{encoded}b"


def test_unreserved_escapes_are_decoded_so_spellings_of_one_name_agree() -> None:
    assert parse("http://a.example/%7euser?%75tm_source=x").url == (
        "http://a.example/~user?utm_source=x"
    )
    assert normalize_percent_encoding("%41%2f%e2%82%ac") == "A%2F%E2%82%AC"


def test_repeated_parameters_and_blank_values_are_kept_in_stable_order() -> None:
    url = parse("http://a.example/?b=&a=2&c&a=1")
    assert url.url == "http://a.example/?a=2&a=1&b=&c"
    assert url.value_of("a") == "a=2&a=1"


def test_pattern_is_path_shape_and_sorted_case_sensitive_names() -> None:
    url = parse("http://a.example/p/123?b=1&B=2&a=3")
    assert url.pattern == "/p/*?B&a&b"
    assert split_pattern(url.pattern) == ("/p/*", ("B", "a", "b"))
    assert pattern_key("/", []) == "/?"


@pytest.mark.parametrize(
    ("path", "shape"),
    [
        ("/", "/"),
        ("/search", "/search"),
        ("/p/123", "/p/*"),
        ("/123", "/*"),
        ("/en/shoes/sale", "/en/*/*"),
        ("/item-42", "/*"),
    ],
)
def test_path_shape(path: str, shape: str) -> None:
    assert path_shape(path) == shape


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("ftp://a.example/", "scheme"),
        ("javascript:alert(1)", "scheme"),
        ("not a url", "parsable"),
        ("", "empty"),
        ("http://a.example/\x00", "control"),
        ("http://a.example/\n", "control"),
        ("http://a.example/?" + "a" * 9000, "longer"),
        ("http://a.example/\udcff", "UTF-8"),
        ("http://[::1/", "parsable"),
    ],
)
def test_invalid_input_gets_a_typed_error_with_reason(text: str, reason: str) -> None:
    with pytest.raises(InvalidURL) as caught:
        parse(text)
    assert reason in caught.value.reason


def _wpt_cases() -> list[dict[str, str]]:
    data = json.loads(WPT_URLTESTDATA.read_text(encoding="utf-8"))
    return [case for case in data if isinstance(case, dict)]


def test_wpt_corpus_never_crashes_never_breaks_and_is_idempotent() -> None:
    checked = 0
    for case in _wpt_cases():
        for text in (case["input"], case.get("href")):
            if not text:
                continue
            try:
                url = parse(text)
            except InvalidURL:
                continue
            canonical = url.url
            again = parse(canonical)
            assert again.url == canonical, text
            assert can_ada.can_parse(canonical), text
            reference = can_ada.parse(text)
            result = can_ada.parse(canonical)
            assert result.hostname == reference.hostname, text
            assert result.port == reference.port, text
            assert result.username == reference.username, text
            assert result.pathname == normalize_percent_encoding(reference.pathname), text
            expected_pairs = sorted(
                p for p in normalize_percent_encoding(reference.search[1:]).split("&") if p
            )
            got_pairs = sorted(p for p in result.search[1:].split("&") if p)
            assert got_pairs == expected_pairs, text
            checked += 1
    assert checked > 250


def _reference_parse(text: str) -> tuple[str, ...]:
    """The URL read through can_ada's getters, one by one: what ``parse`` must agree with."""
    try:
        parse_result = parse(text)
    except InvalidURL as error:
        return ("invalid", error.reason)
    parsed = can_ada.parse(text)
    userinfo = ""
    if parsed.username or parsed.password:
        userinfo = parsed.username + (":" + parsed.password if parsed.password else "") + "@"
    query = normalize_percent_encoding(parsed.search[1:])
    expected = (
        parsed.protocol + "//" + userinfo + parsed.host,
        parsed.hostname,
        normalize_percent_encoding(parsed.pathname),
        tuple(pair for pair in query.split("&") if pair),
        normalize_percent_encoding(parsed.hash) if parsed.hash.startswith("#!") else "",
    )
    got = (
        parse_result.origin,
        parse_result.host,
        parse_result.path,
        parse_result.pairs,
        parse_result.route,
    )
    assert got == expected, text
    return ("valid",)


def test_slicing_the_href_agrees_with_the_parsers_getters_on_the_wpt_corpus() -> None:
    valid = 0
    for case in _wpt_cases():
        for text in (case["input"], case.get("href")):
            if text:
                valid += _reference_parse(text) == ("valid",)
    extra = [
        "http://u:p@Shop.example:8080/p/%7e?b=%41&a=1#!%7e/x?y",
        "http://:pw@a.example/",
        "http://user@a.example:81/",
        "http://[::1]:8080/x?y#z",
        "http://[::1]/",
        "https://a.example?x#!y",
        "http://a.example/p?#!r",
        "http://1.2.3/",
    ]
    for text in extra:
        assert _reference_parse(text) == ("valid",), text
    assert valid > 250


def test_every_percent_triplet_spelling_normalizes_like_its_decoded_character() -> None:
    unreserved = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
    digits = "0123456789abcdefABCDEF"
    for high in digits:
        for low in digits:
            triplet = "%" + high + low
            char = chr(int(high + low, 16))
            expected = char if char in unreserved else triplet.upper()
            assert normalize_percent_encoding("x" + triplet + "y") == "x" + expected + "y"


def test_path_shape_counts_any_digit_and_only_short_segments_as_words() -> None:
    assert path_shape("/caf\u00e9/x") == "/caf\u00e9/*"
    assert path_shape("/a\u00b2/x") == "/*/*", "str.isdigit() counts superscripts"
    assert path_shape("/" + "a" * 33) == "/*"
    assert path_shape("/shoes-sale/") == "/shoes-sale/*"
    assert path_shape("") == "/"


def test_normalized_urls_are_values() -> None:
    first = parse("http://a.example/p?b=1&a=2")
    second = parse("HTTP://A.example:80/p?b=1&a=2#x")
    assert first == second
    assert hash(first) == hash(second)
    assert {first, second} == {first}
    assert first != parse("http://a.example/p?a=2&b=1"), "pairs keep their order"
    assert "origin='http://a.example'" in repr(first)
    assert first.names == frozenset({"a", "b"})
    assert first.without(["a"]) == "http://a.example/p?b=1"
    assert first.with_only({"a"}) == "http://a.example/p?a=2"


def test_empty_pairs_are_dropped() -> None:
    url = parse("http://a.example/p?&&a=1&&b&")
    assert url.pairs == ("a=1", "b")
    assert parse("http://a.example/p?&&").url == "http://a.example/p"


# --- A stray "%" ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("http://a.example/%%36%31", "http://a.example/%%361"),
        ("http://a.example/a/%%32%45%%32%45/b", "http://a.example/a/%%32E%%32E/b"),
        ("http://a.example/%4%31", "http://a.example/%4%31"),
        ("http://a.example/p?q=%%34%31", "http://a.example/p?q=%%341"),
        ("http://a.example/100%25/%7e%", "http://a.example/100%25/~%"),
    ],
)
def test_decoding_never_completes_an_escape_with_a_stray_percent(text: str, expected: str) -> None:
    url = parse(text)
    assert url.url == expected
    assert resource_difference(text, url.url) == ""
    assert parse(url.url).url == url.url


# Pieces that decode to hex digits, beside stray "%" and hex digits.
_PERCENT_PIECES = [
    "%",
    "%",
    "%3",
    "%36",
    "%31",
    "%2E",
    "%2e",
    "%61",
    "%46",
    "%4",
    "a",
    "F",
    "1",
    "/",
    "%25",
    "%7e",
    "%2f",
    "z",
]
_PERCENT_TEXT = st.lists(st.sampled_from(_PERCENT_PIECES), max_size=12).map("".join)


@given(_PERCENT_TEXT)
def test_percent_normalization_keeps_the_decoded_bytes_and_is_idempotent(text: str) -> None:
    normal = normalize_percent_encoding(text)
    assert unquote_to_bytes(normal) == unquote_to_bytes(text)
    assert normalize_percent_encoding(normal) == normal


# --- Matrix parameters --------------------------------------------------------------------


def test_matrix_parameters_are_parameters_named_with_a_semicolon() -> None:
    url = parse("http://a.example/p/12;jsessionid=AB12;v=2?utm_source=x&id=3")
    assert url.path == "/p/12"
    assert url.has_params
    assert url.names == frozenset({";jsessionid", ";v", "utm_source", "id"})
    assert url.pattern == "/p/*?;jsessionid&;v&id&utm_source"
    assert url.value_of(";jsessionid") == ";jsessionid=AB12"
    assert url.url == "http://a.example/p/12;jsessionid=AB12;v=2?id=3&utm_source=x"
    assert url.without([";jsessionid", "utm_source"]) == "http://a.example/p/12;v=2?id=3"
    assert url.with_only({"id"}) == "http://a.example/p/12?id=3"


def test_a_url_with_only_matrix_parameters_has_parameters() -> None:
    url = parse("http://a.example/docs/guide;v=2")
    assert url.has_params and url.pairs == ()
    assert url.pattern == "/docs/*?;v"
    assert url.without([";v"]) == "http://a.example/docs/guide"
    assert not parse("http://a.example/docs/guide").has_params


def test_matrix_parameters_stay_in_their_segment_in_stable_name_order() -> None:
    url = parse("http://a.example/a;z=1;b=2;z=0/b/c;%6Aid=3?x=1;y=2")
    assert url.url == "http://a.example/a;b=2;z=1;z=0/b/c;jid=3?x=1;y=2"
    assert url.value_of(";z") == ";z=1&;z=0"
    assert url.with_only({";z", ";jid"}) == "http://a.example/a;z=1;z=0/b/c;jid=3"
    assert url.names == frozenset({";z", ";b", ";jid", "x"}), "';' in the query is no matrix"
    assert parse(url.url).url == url.url


@pytest.mark.parametrize(
    "path",
    [
        "/a;b;c/x",
        "/list;sort=asc;x",
        "/a/..;v=1/b",
        "/a/.;v=1/b",
        "/a;1v=2",
        "/a;=2",
        "/a;v",
        "/a/%2E%2E;v=1/b",
    ],
)
def test_other_semicolons_are_ordinary_path_characters(path: str) -> None:
    url = parse("http://a.example" + path)
    assert url.matrix == ()
    assert url.names == frozenset()
    assert url.url == normalize_percent_encoding(can_ada.parse("http://a.example" + path).href)


_SEGMENT = st.one_of(st.text(alphabet="ab1.%;=_-", max_size=8), _PERCENT_TEXT)


@given(st.lists(_SEGMENT, max_size=5), st.text(alphabet="ab=&;%", max_size=10))
def test_normalized_urls_are_idempotent_and_keep_the_resource(
    segments: list[str], query: str
) -> None:
    text = "http://a.example/" + "/".join(segments) + "?" + query
    url = parse(text)
    assert parse(url.url).url == url.url
    assert resource_difference(text, url.url) == ""
    for name in url.names:
        dropped = parse(url.without([name]))
        assert dropped.names == url.names - {name}
        assert parse(dropped.url).url == dropped.url
        assert resource_difference(url.url, dropped.url, [name]) == ""
