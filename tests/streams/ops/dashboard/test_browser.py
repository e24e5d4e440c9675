"""``miqps dashboard`` in a real browser after a real broker run: a worker learns the
simulated web, the dashboard command reads the topics, and chromium (through Playwright)
reads what the page shows.

``MIQPS_SCREENSHOTS=docs pytest tests/streams/ops/dashboard/test_browser.py`` also writes
``docs/dashboard.png``, the screenshot the README shows.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from miqps.cli import main
from miqps.maps import write_maps
from simweb.corpus import generate_corpus
from streams.kafka.admin import ensure_topics
from streams.ops.dashboard.server import DashboardServer
from streams.ops.dashboard.state import DashboardState
from streams.settings import LearningPolicy, Settings
from testkit.tools import TopicReader, WorkerProcess, produce, worker_env
from tests.browser import screenshot_dir
from tests.miqps.test_report import HOSTILE, hostile_map
from tests.streams.ops.dashboard.test_state import audit_record
from tests.streams.test_pipeline import (
    Web,
    base,
    enveloped,
    isolated_settings,
    no_new_records_for,
    read_maps_cli,
    wait_until,
    web,
)

pytestmark = pytest.mark.timeout(240)

if TYPE_CHECKING:  # imported here only: without Playwright the fixture says what is missing
    from playwright.sync_api import Locator, Page
    from playwright.sync_api._generated import LocatorAssertions


def expect(locator: Locator) -> LocatorAssertions:
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(locator)


__all__ = ["base", "web"]  # fixtures


PLOT_BASELINE = 142.0
"""The y of a zero value in the dashboard's line charts (dashboard.js ``lineChart``)."""


def start_dashboard(settings: Settings, log_path: Path) -> tuple[subprocess.Popen[str], str]:
    """The real ``miqps dashboard`` command on a free port; returns it and its page's URL."""
    command = [str(Path(sys.executable).with_name("miqps")), "dashboard", "--port", "0"]
    errors = log_path.open("w")
    process = subprocess.Popen(
        command, env=worker_env(settings), stdout=subprocess.PIPE, stderr=errors, text=True
    )
    errors.close()
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("miqps dashboard: http://"), (line, log_path.read_text())
    return process, line.split(": ", 1)[1].strip()


@pytest.fixture
def learned_run(
    base: Settings,
    web: Web,
    tmp_path: Path,
) -> Iterator[tuple[Settings, WorkerProcess, list[bytes]]]:
    """A worker that has learned the simulated web, and a second pass to stream."""
    # Failed probes are not retried within the test, so the maps settle once learned.
    settings = isolated_settings(
        base,
        "dash",
        tmp_path / "state",
        proxy=web.server.proxy_url,
        partitions=4,
        probe_rate_per_host=50.0,
        policy=LearningPolicy(rare_after=4.0, retry_after=3600.0),
    )
    ensure_topics(settings)
    corpus = generate_corpus(web.sites, 120, 3)
    worker = WorkerProcess(settings, "canonicalize,probe", tmp_path / "worker.log").start()
    try:
        with (
            TopicReader(settings, settings.topics.canonical) as outputs,
            TopicReader(settings, settings.topics.map_updates) as updates,
        ):
            produce(settings, settings.topics.raw, enveloped(corpus, 1))
            wait_until(lambda: outputs.wait_for(len(corpus), 0.5), 120, "first-pass outputs")
            wait_until(no_new_records_for(updates, 10.0), 200, "learning to settle")
        assert worker.alive(), worker.log_text()[-3000:]
        yield settings, worker, enveloped(corpus, 2)
    finally:
        worker.stop()


def rows_text(page: Page, selector: str) -> list[list[str]]:
    rows = page.locator(selector)
    return [rows.nth(i).locator("td").all_text_contents() for i in range(rows.count())]


def plot_values_above_zero(page: Page, selector: str) -> int:
    points = page.get_attribute(selector, "points") or ""
    return sum(1 for pair in points.split() if float(pair.split(",")[1]) < PLOT_BASELINE)


def plot_has_values(page: Page, selector: str) -> bool:
    return plot_values_above_zero(page, selector) > 0


@pytest.mark.kafka
@pytest.mark.timeout(420)
def test_the_dashboard_shows_a_live_run(
    learned_run: tuple[Settings, WorkerProcess, list[bytes]],
    web: Web,
    browser_page: Page,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings, worker, second_pass = learned_run
    dashboard, url = start_dashboard(settings, tmp_path / "dashboard.log")
    page = browser_page
    try:
        page.goto(url)
        expect(page.locator("#status")).to_have_text("live", timeout=60_000)

        # Domains: a row per learned domain, with its map's version and patterns, as
        # `miqps maps` prints them.
        hosts = sorted(site.host for site in web.sites)
        expect(page.locator("#domains tbody tr")).to_have_count(len(hosts), timeout=30_000)
        # A map published while the two are read is in one and not yet in the other: read
        # both again until they agree (the dashboard follows the maps topic live).
        deadline = time.monotonic() + 30
        while True:
            maps = read_maps_cli(settings)
            listed = rows_text(page, "#domains tbody tr")
            assert [row[0] for row in listed] == hosts
            versions = [(row[1], int(row[3])) for row in listed]
            in_maps = [(str(maps[host].version), len(maps[host].patterns)) for host in hosts]
            if versions == in_maps or time.monotonic() > deadline:
                break
            time.sleep(1.0)
        assert versions == in_maps
        maps_file = tmp_path / "maps.jsonl"
        write_maps(maps_file, maps.values())
        page.fill("#domain-filter", hosts[1][:-2].upper())
        expect(page.locator("#domains tbody tr")).to_have_count(1)
        assert page.text_content("#domains tbody td") == hosts[1]

        # One domain's page: per parameter the map's verdict, layer and evidence.
        domain = max(maps, key=lambda name: len(maps[name].patterns))
        page.fill("#domain-filter", "")
        page.click(f'#domains tbody tr[data-domain="{domain}"] a')
        page.wait_for_selector(f'#domain[data-rendered="{domain}"]')
        assert page.text_content("#domain-name") == domain
        shown = {}
        for body in page.locator("#domain table.patterns tbody").all():
            key = body.locator("tr.pattern code").text_content()
            for cells in [
                r.locator("td").all_text_contents() for r in body.locator("tr:not(.pattern)").all()
            ]:
                shown[key, cells[0]] = cells
        expected = {
            (key, name): evidence
            for key, decision in maps[domain].patterns.items()
            for name, evidence in decision.params.items()
        }
        assert expected and set(expected) <= set(shown)
        for (key, name), evidence in expected.items():
            cells = shown[key, name]
            assert cells[1:7] == [
                evidence.decision,
                str(evidence.layer),
                str(evidence.samples),
                str(evidence.changed),
                str(evidence.unchanged),
                str(evidence.inconclusive),
            ], (key, name)
        assert page.locator("#domain table.sprawl tbody tr").count() > 0
        own_feed = rows_text(page, "#domain table.domain-feed tbody tr")
        assert own_feed and {row[1] for row in own_feed} == {domain}

        # The feed: the audit records of the run, accepted ones among them.
        feed = rows_text(page, "#feed tbody tr")
        assert any(row[1] == domain and row[3] == "accepted" for row in feed), feed[:5]

        # Explain: what `miqps canonicalize --json` prints for a typed URL.
        pattern = next(key for key, decision in maps[domain].patterns.items() if decision.dropped)
        names = pattern.partition("?")[2].split("&")
        typed = f"http://{domain}{pattern.partition('?')[0]}?" + "&".join(
            f"{name}=v{number}" for number, name in enumerate(names)
        )
        assert main(["canonicalize", "--json", "--maps", str(maps_file), typed]) == 0
        expected_answer = json.loads(capsys.readouterr().out)
        assert expected_answer["dropped"], expected_answer
        page.fill("#explain-url", typed)
        page.click("#explain button")
        page.wait_for_selector("#explain-json")
        assert json.loads(page.text_content("#explain-json") or "") == expected_answer
        assert page.text_content("#explain-canonical") == expected_answer["canonical_url"]

        # Plots: URLs in and out per second while the second pass streams, learned share.
        produce(settings, settings.topics.raw, second_pass)
        for line in (
            "#plot-rates polyline.out",
            "#plot-rates polyline.in",
            "#plot-learned polyline.learned",
        ):
            wait_until(partial(plot_has_values, page, line), 90, f"points above zero in {line}")
        assert plot_values_above_zero(page, "#plot-fetches polyline.fetches") > 0
        assert worker.alive(), worker.log_text()[-3000:]
        save_screenshot(page, tmp_path)
    finally:
        dashboard.send_signal(signal.SIGTERM)
        assert dashboard.wait(30) == 0, (tmp_path / "dashboard.log").read_text()


def save_screenshot(page: Page, tmp_path: Path) -> None:
    shot = tmp_path / "dashboard.png"
    domain_page = page.locator("#domain").bounding_box()
    assert domain_page is not None  # the shot shows its top
    page.screenshot(
        path=str(shot),
        full_page=True,
        clip={"x": 0, "y": 0, "width": 1280, "height": domain_page["y"] + 560},
    )
    assert shot.stat().st_size > 10_000
    docs = screenshot_dir()
    if docs is not None:
        docs.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, docs / "dashboard.png")


def test_rejections_and_hostile_maps_are_shown_as_text_and_never_run(browser_page: Page) -> None:
    state = DashboardState()
    state.maps.apply(hostile_map())
    state.add_map_update(audit_record(f"/p?{HOSTILE}&id", accepted=False))
    server = DashboardServer(state, port=0).start()
    page = browser_page
    try:
        page.goto(server.url)
        expect(page.locator("#feed tbody tr")).to_have_count(1)
        (entry,) = rows_text(page, "#feed tbody tr")
        assert entry[2:5] == [
            f"/p?{HOSTILE}&id",
            "rejected",
            "anomaly: 3 of 4 kept parameters would be dropped",
        ]
        assert page.locator("#feed tbody tr.rejected").count() == 1
        expect(page.locator("#domains tbody tr")).to_have_count(1)
        page.click("#domains tbody a")
        page.wait_for_selector("#domain[data-rendered]")
        assert page.text_content("#domain-name") == f"shop.example{HOSTILE}"
        assert HOSTILE in page.locator("#domain table.patterns").inner_text()
        page.fill("#explain-url", f"https://shop.example/?{HOSTILE}")
        page.click("#explain button")
        page.wait_for_selector("#explain-json")
        assert HOSTILE in (page.text_content("#explain-json") or "")
        assert page.evaluate("typeof window.pwned") == "undefined"
    finally:
        server.stop()
