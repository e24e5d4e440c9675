"""The parameter-sprawl report: its numbers (miqps.report), its page and `miqps report`.

The page as a browser shows it is tested in test_report_browser.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import pytest
from selectolax.lexbor import LexborHTMLParser

from miqps.canonical import Canonicalizer
from miqps.cli import main
from miqps.maps import DomainMap, Layer, ParamEvidence, PatternDecision, Verification, write_maps
from miqps.report import Limits, ReportBuilder, ReportView, estimated_fetches
from miqps.report_html import render, script_json

STAMP = "2026-01-01T00:00:00Z"
HOSTILE = "<script>window.pwned=1</script>"


def decision(
    kept: Iterable[str],
    dropped: Iterable[str],
    *,
    comparisons: int = 3,
    verification: Verification | None = None,
    defaults: dict[str, list[str]] | None = None,
) -> PatternDecision:
    kept, dropped = frozenset(kept), frozenset(dropped)
    params = {
        name: ParamEvidence(
            "keep", Layer.LEARNED, comparisons, comparisons, 0, 0, (defaults or {}).get(name, [])
        )
        for name in kept
    }
    params |= {
        name: ParamEvidence("drop", Layer.LEARNED, comparisons, 0, comparisons, 0)
        for name in dropped
    }
    return PatternDecision(
        kept, dropped, params, verification or Verification(2, 0, 1, []), STAMP, 10
    )


def shop_map() -> DomainMap:
    return DomainMap(
        "shop.example",
        3,
        STAMP,
        {
            "/p?id&utm_source": decision({"id"}, {"utm_source"}),
            "/p?id": decision({"id"}, ()),
        },
    )


def build(
    urls: Iterable[str], maps: Iterable[DomainMap] = (), limits: Limits | None = None
) -> tuple[ReportView, Canonicalizer]:
    by_domain = {domain_map.domain: domain_map for domain_map in maps}
    canonicalizer = Canonicalizer()
    canonicalizer.load(by_domain)
    builder = ReportBuilder(canonicalizer, by_domain, limits)
    builder.add_lines(urls)
    return builder.view(), canonicalizer


SHOP_URLS = [
    "https://shop.example/p?id=1&utm_source=a",
    "https://shop.example/p?utm_source=b&id=1",
    "https://shop.example/p?id=2&utm_source=a",
    "https://shop.example/p?id=1",
    "https://shop.example/p?id=1",  # the same URL again: a line, not a distinct URL
]


def test_sprawl_counts_the_distinct_urls_a_parameter_creates() -> None:
    view, _ = build(SHOP_URLS, [shop_map()])
    (shop,) = view.domains
    sprawl = {row.name: row for row in shop.sprawl}
    # Dropping utm_source everywhere leaves /p?id=1 and /p?id=2: 2 of the 4 distinct go.
    assert (sprawl["utm_source"].urls_with, sprawl["utm_source"].variants) == (3, 2)
    assert sprawl["utm_source"].dropped_in == 3
    # Dropping id merges only ?utm_source=a of id=1 and id=2.
    assert (sprawl["id"].urls_with, sprawl["id"].variants, sprawl["id"].dropped_in) == (4, 1, 0)
    assert [row.name for row in shop.sprawl] == ["utm_source", "id"]


def test_duplicates_saved_are_distinct_less_canonical_urls() -> None:
    view, _ = build(SHOP_URLS, [shop_map()])
    (shop,) = view.domains
    assert (shop.urls, shop.distinct_urls, shop.canonical_urls) == (5, 4, 2)
    assert shop.duplicates_saved == view.duplicates_saved == 2
    assert shop.learned_urls == view.learned_urls == 4
    assert (shop.map_version, shop.updated_at) == (3, STAMP)


def test_a_domain_without_a_map_is_reported_with_the_conservative_default() -> None:
    view, _ = build(
        [
            "https://blog.example/a?ref=1",
            "https://blog.example/a?ref=2",
            "https://blog.example/a?ref=2&utm_medium=x",
        ]
    )
    (blog,) = view.domains
    assert (blog.distinct_urls, blog.canonical_urls, blog.learned_urls) == (3, 2, 0)
    assert blog.map_version == 0 and blog.fetches == 0
    assert [(p.key, p.urls_in_list, p.learned) for p in blog.patterns] == [
        ("/a?ref", 2, False),
        ("/a?ref&utm_medium", 1, False),
    ]
    applied = {param.name: param.applied for param in blog.patterns[1].params}
    assert applied == {"ref": (("keep: unlearned", 1),), "utm_medium": (("drop: prior", 1),)}


def test_blank_and_invalid_lines_are_counted_and_named() -> None:
    view, _ = build(
        ["", "  ", "ftp://shop.example/x", "https://shop.example/p?id=1", "not a url"], [shop_map()]
    )
    assert (view.lines, view.blank, view.invalid, view.urls) == (5, 2, 2, 1)
    assert [example.split(":")[0] for example in view.invalid_examples] == ["line 3", "line 5"]


def test_map_evidence_and_the_decisions_applied_are_shown_per_pattern() -> None:
    view, _ = build(SHOP_URLS, [shop_map()])
    (shop,) = view.domains
    patterns = {pattern.key: pattern for pattern in shop.patterns}
    tracked = patterns["/p?id&utm_source"]
    assert tracked.learned and tracked.urls_in_list == 3
    assert (tracked.verification_samples, tracked.verification_inconclusive) == (2, 1)
    params = {param.name: param for param in tracked.params}
    utm = params["utm_source"]
    assert (utm.map_decision, utm.map_layer, utm.samples, utm.unchanged) == (
        "drop",
        "learned",
        3,
        3,
    )
    assert utm.applied == (("drop: learned", 3),)
    assert params["id"].applied == (("keep: learned", 3),)


def test_fetches_count_pooled_evidence_once_per_path_shape() -> None:
    # The learner copies a shape's pooled evidence into each of its patterns.
    domain_map = DomainMap(
        "shop.example",
        1,
        STAMP,
        {
            "/p?id&utm_source": decision(
                {"id"}, {"utm_source"}, comparisons=4, verification=Verification(2, 1, 1, ["id"])
            ),
            "/p?id&utm_source&x": decision(
                {"id", "x"}, {"utm_source"}, comparisons=4, verification=Verification(3, 0, 0, [])
            ),
            "/c?q": decision({"q"}, (), comparisons=5, verification=Verification(0, 0, 0, [])),
        },
    )
    # /p: id 4 + utm_source 4 + x 4; /c: q 5; verification 2 + 1 + 3.
    assert estimated_fetches(domain_map) == 4 + 4 + 4 + 5 + 3 + 3


def test_embedded_explanations_are_the_json_answers_one_per_pattern_first() -> None:
    urls = [*SHOP_URLS, "https://shop.example/p?id=3&utm_source=c", "https://shop.example/q?z=1"]
    view, canonicalizer = build(urls, [shop_map()], Limits(explained_urls=3))
    explained = [answer["url"] for answer in view.explanations]
    # The first URL of each of the three patterns, then none left over.
    assert explained == [urls[0], urls[3], urls[6]]
    assert view.hidden_explanations == 3
    for answer in view.explanations:
        assert answer == canonicalizer.explain(answer["url"]).to_json()

    view, _ = build(SHOP_URLS, [shop_map()], Limits(explained_urls=5))
    assert [answer["url"] for answer in view.explanations] == [SHOP_URLS[i] for i in (0, 3, 1, 2)]
    assert view.hidden_explanations == 0


def test_limits_hide_rows_and_count_them() -> None:
    urls = [f"https://site{n}.example/p?a={k}&b={k}" for n in range(5) for k in range(n + 1)]
    view, _ = build(urls, limits=Limits(domains=2, patterns_per_domain=0, params_per_domain=1))
    assert [domain.domain for domain in view.domains] == ["site4.example", "site3.example"]
    assert view.hidden_domains == 3 and view.domain_count == 5
    assert view.domains[0].hidden_patterns == 1 and view.domains[0].patterns == ()
    assert len(view.domains[0].sprawl) == 1 and view.domains[0].hidden_params == 1
    with pytest.raises(ValueError, match="domains"):
        Limits(domains=-1)


def test_maps_domains_without_urls_are_listed_too() -> None:
    view, _ = build(
        ["https://shop.example/p?id=1"], [shop_map(), DomainMap("other.example", 1, STAMP, {})]
    )
    assert {domain.domain for domain in view.domains} == {"shop.example", "other.example"}


def hostile_map() -> DomainMap:
    return DomainMap(
        f"shop.example{HOSTILE}",
        1,
        STAMP,
        {
            f"/p?{HOSTILE}&id": decision({"id", HOSTILE}, (), defaults={HOSTILE: [HOSTILE]}),
        },
    )


def test_script_json_cannot_end_its_script_element() -> None:
    text = script_json({"url": "</script><!--", "x": "a&b"})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"url": "</script><!--", "x": "a&b"}


def test_the_page_escapes_hostile_maps_and_urls() -> None:
    view, _ = build(
        ["https://shop.example/p?id=1&%3Cscript%3E=1#!<script>"], [hostile_map(), shop_map()]
    )
    page = render(view, (f"URLs: {HOSTILE}.txt",))
    assert "<script>window" not in page
    assert page.count("<script") == 2  # the explanations and the page's own script
    assert "&lt;script&gt;window.pwned=1&lt;/script&gt;" in page


def test_the_fetch_count_is_labelled_an_estimate_wherever_it_is_shown() -> None:
    view, _ = build(SHOP_URLS, [shop_map()])
    page = LexborHTMLParser(render(view))
    (card,) = [div for div in page.css("#totals .cards > div") if div.css('[data-total="fetches"]')]
    assert "estimate" in " ".join(node.text() for node in card.css("dt"))
    assert "miqps learn counts every fetch" in " ".join(node.text() for node in card.css(".note"))
    mentions = [
        node.text(deep=False)
        for selector in ("#domains th", "#plot-saved .legend text", "section.domain p")
        for node in page.css(selector)
        if "fetches" in node.text(deep=False)
    ]
    assert len(mentions) == 3, mentions
    assert all("estimate" in text for text in mentions), mentions


def write_inputs(tmp_path: Path, urls: list[str], maps: list[DomainMap]) -> tuple[Path, Path]:
    urls_file, maps_file = tmp_path / "urls.txt", tmp_path / "maps.jsonl"
    urls_file.write_text("\n".join(urls) + "\n", encoding="utf-8")
    write_maps(maps_file, maps)
    return urls_file, maps_file


def test_cli_writes_one_self_contained_page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    urls_file, maps_file = write_inputs(tmp_path, SHOP_URLS, [shop_map()])
    out = tmp_path / "out" / "report.html"
    assert (
        main(["report", "--urls", str(urls_file), "--maps", str(maps_file), "--out", str(out)]) == 0
    )
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    assert "default-src 'none'" in page
    assert "http://" not in page.replace("https://shop.example", "")
    assert "4 distinct URLs, 2 canonical (2 duplicates saved)" in capsys.readouterr().out


def test_cli_reads_lines_as_canonicalize_does(tmp_path: Path) -> None:
    urls_file = tmp_path / "urls.txt"
    urls_file.write_bytes(
        b"https://shop.example/p?id=1\r\nhttps://shop.example/p?id=\xff\r"
        b"https://shop.example/p?id=2\n"
    )
    maps_file = tmp_path / "maps.jsonl"
    write_maps(maps_file, [shop_map()])
    out = tmp_path / "report.html"
    assert (
        main(["report", "--urls", str(urls_file), "--maps", str(maps_file), "--out", str(out)]) == 0
    )
    page = out.read_text(encoding="utf-8")
    assert '<dd data-total="lines">3</dd>' in page
    assert '<dd data-total="distinct">2</dd>' in page


def test_cli_options_reach_the_report(tmp_path: Path) -> None:
    blog = ["https://blog.example/a?ref=1&utm_medium=x", "https://blog.example/a?ref=1"]
    urls_file, maps_file = write_inputs(tmp_path, [*SHOP_URLS, *blog], [shop_map()])
    out = tmp_path / "report.html"
    common = ["report", "--urls", str(urls_file), "--maps", str(maps_file), "--out", str(out)]
    assert main([*common, "--max-domains", "1", "--max-explained", "1"]) == 0
    page = out.read_text(encoding="utf-8")
    assert '<dd data-total="canonical">3</dd>' in page  # the prior drops utm_medium
    assert "1 more domains with fewer distinct URLs not shown" in page
    assert page.count('"canonical_url":') == 1
    assert main([*common, "--no-prior"]) == 0
    assert '<dd data-total="canonical">4</dd>' in out.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"--maps": "missing.jsonl"}, "cannot read maps"),
        ({"--urls": "missing.txt"}, "cannot read"),
        ({"--max-domains": "-1"}, "must be 0 or more"),
        ({"--maps": "bad.jsonl"}, "not a MIQPS map"),
    ],
)
def test_cli_refuses_bad_input_with_a_message(
    tmp_path: Path, change: dict[str, str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    urls_file, maps_file = write_inputs(tmp_path, SHOP_URLS, [shop_map()])
    (tmp_path / "bad.jsonl").write_text('{"schema": "miqps.map/1"}\n', encoding="utf-8")
    options = {
        "--urls": str(urls_file),
        "--maps": str(maps_file),
        "--out": str(tmp_path / "r.html"),
    }
    options |= {
        key: value if key.startswith("--max") else str(tmp_path / value)
        for key, value in change.items()
    }
    assert main(["report", *[part for pair in options.items() for part in pair]]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "r.html").exists()
