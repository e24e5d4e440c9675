"""The dashboard, in a real browser: the feed names each audit record's outcome (accepted,
rejected by the anomaly gate, or undecided with the reason the core gives), and a domain
shows its robots.txt status and pace from the probing worker's metrics."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import orjson
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from miqps.fetch import FetchStats
from miqps.maps import DomainMap, merge_update
from miqps.update import Undecided
from streams.messages import undecided_reason
from streams.ops.dashboard.server import DashboardServer
from streams.ops.dashboard.state import DashboardState
from streams.ops.metrics import AgentCollector, ProbeAgentState
from tests.streams.ops.dashboard.test_state import audit_record

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = [pytest.mark.browser, pytest.mark.timeout(60)]


def undecided_record(pattern: str, cause: Undecided) -> bytes:
    """A record as the probing agent writes it for a pattern left undecided."""
    record = orjson.loads(audit_record(pattern, accepted=False))
    record.update(reason=undecided_reason(cause), kept_after=None, dropped_after=None)
    return orjson.dumps(record)


def test_undecided_patterns_are_not_shown_as_rejected(browser_page: Page) -> None:
    from playwright.sync_api import expect

    state = DashboardState()
    state.add_map_update(undecided_record("/account/*?id", Undecided.DISALLOWED))
    state.add_map_update(undecided_record("/app/*?id", Undecided.SHELLS))
    state.add_map_update(audit_record("/p?id&utm_source", accepted=False))
    server = DashboardServer(state, port=0).start()
    page = browser_page
    try:
        page.goto(server.url)
        rows = page.locator("#feed tbody tr")
        expect(rows).to_have_count(3)
        shown = {
            cells[2]: (cells[3], cells[4])
            for cells in (rows.nth(i).locator("td").all_text_contents() for i in range(3))
        }
        assert shown["/account/*?id"] == ("undecided", undecided_reason(Undecided.DISALLOWED))
        assert shown["/app/*?id"] == ("undecided", undecided_reason(Undecided.SHELLS))
        assert shown["/p?id&utm_source"][0] == "rejected"
        assert page.locator("#feed tbody tr.undecided").count() == 2
        assert page.locator("#feed tbody tr.rejected").count() == 1
    finally:
        server.stop()


def worker_exposition(stats: FetchStats) -> str:
    """What a probing worker with these fetch statistics serves on its metrics endpoint."""

    class Probing(Collector):
        def collect(self) -> Iterator[Metric]:
            state = ProbeAgentState(_IdleScheduler(), lambda: 0, stats)
            yield from AgentCollector({})._probing(state)

    registry = CollectorRegistry()
    registry.register(Probing())
    return generate_latest(registry).decode()


class _IdleScheduler:
    def load(self) -> tuple[int, int]:
        return 0, 0


def test_a_domain_shows_its_robots_txt_status_and_pace_from_the_worker_s_metrics(
    browser_page: Page,
) -> None:
    from playwright.sync_api import expect

    state = DashboardState()
    state.maps.apply(merge_update(None, DomainMap("shop.example")))
    stats = FetchStats(
        robots_by_host={"shop.example": "unreachable", "other.example": "rules"},
        delay_by_host={"shop.example": 2.5, "other.example": 1.0},
    )
    state.add_worker_metrics(worker_exposition(stats))
    view = state.domain("shop.example")
    assert view is not None
    assert (view["robots"], view["pace_seconds"]) == ("unreachable", 2.5)
    server = DashboardServer(state, port=0).start()
    page = browser_page
    try:
        page.goto(server.url + "#domain=shop.example")
        expect(page.locator("#domain-politeness")).to_have_text(
            "robots.txt: not answering (nothing fetched until it answers); "
            "pace: 2.50 s between requests"
        )
    finally:
        server.stop()
