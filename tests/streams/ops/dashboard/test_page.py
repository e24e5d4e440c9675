"""The dashboard page itself in chromium, on a state filled in the test: what its plot axes
read, and what a load asks the server for."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from streams.ops.dashboard.server import DashboardServer
from streams.ops.dashboard.state import DashboardState

pytestmark = pytest.mark.timeout(120)

if TYPE_CHECKING:  # imported here only: without Playwright the fixture says what is missing
    from playwright.sync_api import Page


@pytest.fixture
def state() -> DashboardState:
    return DashboardState()


@pytest.fixture
def served(state: DashboardState) -> Iterator[str]:
    server = DashboardServer(state, port=0).start()
    try:
        yield server.url
    finally:
        server.stop()


def axis_ticks(page: Page, figure: str) -> list[tuple[float, float]]:
    """(value, y of its grid line) of each tick of a chart's value axis, from the bottom up."""
    labels = page.locator(f"{figure} svg text[text-anchor=end]")
    texts = [
        (float(labels.nth(i).get_attribute("y") or "nan"), labels.nth(i).text_content() or "")
        for i in range(labels.count())
    ]
    lines = page.locator(f"{figure} svg line.grid")
    grid = [float(lines.nth(i).get_attribute("y1") or "nan") for i in range(lines.count())]
    values = [float(text.replace(",", "")) for _, text in sorted(texts, reverse=True)]
    return list(zip(values, sorted(grid, reverse=True), strict=True))


def polyline_ys(page: Page, figure: str, series: str) -> list[float]:
    points = page.locator(f"{figure} polyline[data-series={series}]").get_attribute("points")
    return [float(pair.split(",")[1]) for pair in (points or "").split()]


@pytest.mark.parametrize(
    ("raw_counts", "rates"),
    [((14, 17), (1.4, 0.3)), ((2, 3), (0.2, 0.1)), ((25, 30), (2.5, 0.5))],
    ids=["about-one", "below-one", "fractional-top"],
)
def test_the_rate_axis_reads_distinct_values_that_match_the_line(
    browser_page: Page,
    state: DashboardState,
    served: str,
    raw_counts: tuple[int, int],
    rates: tuple[float, float],
) -> None:
    state.tick(0.0, raw_total=0, canonical_total=0)
    for second, raw in zip((10.0, 20.0), raw_counts, strict=True):
        state.tick(second, raw_total=raw, canonical_total=0)
    page = browser_page
    page.goto(served)
    page.wait_for_selector("#plot-rates polyline[data-series=in][data-count='3']")
    ticks = axis_ticks(page, "#plot-rates")
    values = [value for value, _ in ticks]
    assert len(set(values)) == 3, f"the axis reads {values}"
    bottom, middle, top = values
    assert bottom == 0 and middle == pytest.approx(top / 2) and top >= max(rates)
    (_, zero_y), (_, top_y) = ticks[0], ticks[-1]
    expected = [zero_y + (top_y - zero_y) * rate / top for rate in (0.0, *rates)]
    assert polyline_ys(page, "#plot-rates", "in") == pytest.approx(expected, abs=0.11)


def test_a_load_asks_for_no_favicon_and_gets_no_404(
    browser_page: Page, served: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="streams.ops.dashboard")
    page = browser_page
    page.goto(served)
    page.wait_for_selector("#plot-rates svg")
    page.wait_for_timeout(2000)  # the browser asks for the icon after the page has loaded
    requests = [
        record.getMessage() for record in caplog.records if "dashboard http" in record.getMessage()
    ]
    assert any('"GET / ' in line for line in requests), requests
    assert not [line for line in requests if " 404 " in line or "favicon" in line]
