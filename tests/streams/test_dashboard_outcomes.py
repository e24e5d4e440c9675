"""The dashboard's feed, in a real browser, names each audit record's outcome: accepted,
rejected by the anomaly gate, or undecided with the reason the core gives."""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson
import pytest

from miqps.update import Undecided
from streams.dashboard import DashboardServer, DashboardState
from streams.messages import undecided_reason
from tests.streams.test_dashboard import audit_record

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.browser


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
