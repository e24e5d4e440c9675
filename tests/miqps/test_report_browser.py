"""The report page in a real browser (chromium through Playwright): what a person sees.

``MIQPS_SCREENSHOTS=docs pytest tests/miqps/test_report_browser.py`` also writes
``docs/report.png``, the screenshot the README shows.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from miqps.canonical import Canonicalizer
from miqps.cli import main
from miqps.maps import DomainMap, write_maps
from miqps.report import Limits, ReportBuilder, ReportView
from miqps.report_html import render
from testkit.sprawl import sprawl_corpus
from tests.browser import screenshot_dir
from tests.miqps.test_report import HOSTILE, SHOP_URLS, build, hostile_map, shop_map

pytestmark = pytest.mark.timeout(120)

if TYPE_CHECKING:  # imported here only: without Playwright the fixture says what is missing
    from playwright.sync_api import Page

BLOG_URLS = ["https://blog.example/a?ref=1", "https://blog.example/a?ref=2&utm_medium=x"]


def open_report(page: Page, tmp_path: Path, view: ReportView) -> None:
    path = tmp_path / "report.html"
    path.write_text(render(view, ("URLs: urls.txt", "maps: maps.jsonl")), encoding="utf-8")
    page.goto(path.as_uri())


def explain_in_page(page: Page, url: str) -> None:
    page.fill("#explain-url", f"  {url} ")
    page.click("#explain button")


def test_the_page_shows_the_reports_numbers(browser_page: Page, tmp_path: Path) -> None:
    requested: list[str] = []
    browser_page.on("request", lambda request: requested.append(request.url))
    view, _ = build([*SHOP_URLS, *BLOG_URLS], [shop_map()])
    open_report(browser_page, tmp_path, view)
    assert requested == [(tmp_path / "report.html").as_uri()]  # self-contained
    totals = {
        key: browser_page.text_content(f'[data-total="{key}"]')
        for key in ("lines", "distinct", "canonical", "saved", "learned", "domains")
    }
    assert totals == {
        "lines": "7",
        "distinct": "6",
        "canonical": "4",
        "saved": "2",
        "learned": "66.7%",
        "domains": "2",
    }
    rows = browser_page.locator("#domains tbody tr")
    assert rows.count() == 2
    assert rows.nth(0).locator("td").all_text_contents() == [
        "shop.example",
        "5",
        "4",
        "2",
        "2",
        "100.0%",
        "12",
        "3",
        "2026-01-01T00:00:00Z",
    ]
    sprawl = browser_page.locator("#domain-0 table.sprawl tbody tr")
    assert sprawl.nth(0).locator("td").all_text_contents() == ["utm_source", "3", "2", "3"]
    blog_pattern = browser_page.locator("#domain-1 tr.pattern").nth(1)
    assert "not in the map" in (blog_pattern.text_content() or "")


def test_the_explain_box_gives_the_answer_of_canonicalize_json(
    browser_page: Page, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    maps_file = tmp_path / "maps.jsonl"
    write_maps(maps_file, [shop_map()])
    view, canonicalizer = build([*SHOP_URLS, *BLOG_URLS], [shop_map()])
    open_report(browser_page, tmp_path, view)
    for url in [SHOP_URLS[1], SHOP_URLS[2], *BLOG_URLS]:
        explain_in_page(browser_page, url)
        shown = json.loads(browser_page.text_content("#explain-json") or "")
        assert main(["canonicalize", "--json", "--maps", str(maps_file), url]) == 0
        assert shown == json.loads(capsys.readouterr().out)
        expected = canonicalizer.explain(url)
        assert shown == expected.to_json()
        assert browser_page.text_content("#explain-canonical") == expected.canonical_url
        table = browser_page.locator("#explain-params tbody tr")
        assert [table.nth(i).locator("td").all_text_contents() for i in range(table.count())] == [
            [name, "dropped" if name in expected.dropped else "kept", layer]
            for name, layer in expected.layers.items()
        ]


def test_the_explain_box_says_when_a_url_is_not_embedded(
    browser_page: Page, tmp_path: Path
) -> None:
    view, _ = build(SHOP_URLS, [shop_map()], Limits(explained_urls=1))
    open_report(browser_page, tmp_path, view)
    explain_in_page(browser_page, SHOP_URLS[2])
    assert "Not among the URLs embedded" in (browser_page.text_content("#explain-missing") or "")
    assert browser_page.locator("#explain-json").count() == 0


def test_hostile_maps_are_shown_as_text_and_never_run(browser_page: Page, tmp_path: Path) -> None:
    view, _ = build(["https://shop.example/p?id=1"], [hostile_map(), shop_map()])
    open_report(browser_page, tmp_path, view)
    assert browser_page.evaluate("typeof window.pwned") == "undefined"
    hostile = browser_page.locator("section.domain", has_text=f"shop.example{HOSTILE}")
    assert hostile.locator("h2").text_content() == f"shop.example{HOSTILE}"
    assert HOSTILE in hostile.locator("table.patterns").inner_text()
    explain_in_page(browser_page, f"https://shop.example/?{HOSTILE}")
    assert HOSTILE in (browser_page.text_content("#explain-missing") or "")
    assert browser_page.evaluate("typeof window.pwned") == "undefined"


def test_the_domain_filter_hides_other_rows(browser_page: Page, tmp_path: Path) -> None:
    view, _ = build([*SHOP_URLS, *BLOG_URLS], [shop_map()])
    open_report(browser_page, tmp_path, view)
    browser_page.fill("#domain-filter", "BLOG")
    visible = browser_page.locator("#domains tbody tr:visible td:first-child")
    assert visible.all_text_contents() == ["blog.example"]


def test_a_big_report_stays_small_and_says_what_it_hides(
    browser_page: Page, tmp_path: Path
) -> None:
    urls, corpus_maps = sprawl_corpus(4000)
    maps = {m.domain: m for m in corpus_maps}
    canonicalizer = Canonicalizer()
    canonicalizer.load(maps)
    builder = ReportBuilder(canonicalizer, maps, Limits(domains=20, explained_urls=500))
    builder.add_lines(urls)
    view = builder.view()
    open_report(browser_page, tmp_path, view)
    assert browser_page.locator("#domains tbody tr").count() == 20
    hidden = browser_page.locator("#domains-section .hidden-rows").text_content()
    assert hidden == f"{view.domain_count - 20} more domains with fewer distinct URLs not shown"
    assert browser_page.locator("#plot-variants g.row rect.dropped").count() > 0
    assert browser_page.locator("#plot-saved g.row rect.fetches").count() == 20
    explain_in_page(browser_page, view.explanations[7]["url"])
    assert browser_page.text_content("#explain-canonical") == canonicalizer.canonicalize(
        view.explanations[7]["url"]
    )
    shot = tmp_path / "report.png"
    plots = browser_page.locator("#plots").bounding_box()
    assert plots is not None
    browser_page.screenshot(
        path=str(shot),
        full_page=True,
        clip={"x": 0, "y": 0, "width": 1280, "height": plots["y"] + plots["height"] + 16},
    )
    assert shot.stat().st_size > 10_000
    docs = screenshot_dir()
    if docs is not None:
        docs.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, docs / "report.png")


def test_the_command_writes_a_page_a_browser_opens(browser_page: Page, tmp_path: Path) -> None:
    urls_file, maps_file = tmp_path / "urls.txt", tmp_path / "maps.jsonl"
    urls_file.write_text("\n".join(SHOP_URLS) + "\n", encoding="utf-8")
    write_maps(maps_file, [shop_map(), DomainMap("other.example", 1, "2026-01-01T00:00:00Z")])
    out = tmp_path / "report.html"
    assert (
        main(["report", "--urls", str(urls_file), "--maps", str(maps_file), "--out", str(out)]) == 0
    )
    browser_page.goto(out.as_uri())
    assert browser_page.text_content('[data-total="domains"]') == "2"
    assert browser_page.text_content(".sources") == f"URLs: {urls_file} · maps: {maps_file}"
