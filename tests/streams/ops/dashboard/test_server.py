"""The dashboard's HTTP server: the page and its assets, with their headers, and the JSON
API's answers to unknown pages and bad requests."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator

import pytest

from streams.ops.dashboard.server import DashboardServer
from streams.ops.dashboard.state import DashboardState
from tests.miqps.test_report import shop_map
from tests.streams.ops.dashboard.test_state import blog_map, get


@pytest.fixture
def state() -> DashboardState:
    state = DashboardState()
    for domain_map in (shop_map(), blog_map(), blog_map("news.example")):
        state.maps.apply(domain_map)
    return state


@pytest.fixture
def served(state: DashboardState) -> Iterator[str]:
    server = DashboardServer(state, port=0).start()
    try:
        yield server.url
    finally:
        server.stop()


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
