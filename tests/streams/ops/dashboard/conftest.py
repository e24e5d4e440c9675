"""A dashboard state holding three maps, and a server of it on a free loopback port."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from streams.ops.dashboard.server import DashboardServer
from streams.ops.dashboard.state import DashboardState
from tests.miqps.test_report import shop_map
from tests.streams.ops.dashboard.test_state import blog_map


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
