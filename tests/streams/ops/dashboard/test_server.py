"""The dashboard's HTTP server: the page and its assets, with their headers, and the JSON
API's answers to unknown pages and bad requests."""

from __future__ import annotations

import urllib.request

from tests.streams.ops.dashboard.test_state import get


def test_an_unknown_domain_and_bad_requests_get_a_clear_answer(served: str) -> None:
    status, body = get(served + "api/domain?name=nowhere.example")
    assert status == 404 and "nowhere.example" in body["error"]
    status, body = get(served + "api/explain")
    assert status == 400 and "?url=" in body["error"]
    status, body = get(served + "api/nothing")
    assert status == 404
    status, body = get(served + "api/domains?limit=lots")
    assert status == 200 and body["matching"] == 3


def test_the_page_and_its_assets_are_served(served: str) -> None:
    for path, kind in (
        ("", "text/html"),
        ("dashboard.js", "text/javascript"),
        ("dashboard.css", "text/css"),
        ("report.css", "text/css"),
        ("report.explain.js", "text/javascript"),
    ):
        with urllib.request.urlopen(served + path, timeout=10) as response:
            assert response.headers["Content-Type"].startswith(kind)
            assert "default-src 'self'" in response.headers["Content-Security-Policy"]
            assert len(response.read()) > 100
