"""``miqps_build_info``: the worker's metrics say which per-URL path the canonicalizer runs,
and why (:func:`miqps.native.canonicalizer_path`), beside the installed version."""

from __future__ import annotations

import asyncio
import threading
from importlib.metadata import version
from pathlib import Path

import pytest

from streams.maps.live import LiveMaps
from streams.ops.metrics import WorkerMetrics
from streams.settings import Settings
from testkit.scrape import free_port, scrape, value


def test_the_endpoint_serves_the_per_url_path_and_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MIQPS_NATIVE", "0")
    port = free_port()
    metrics = WorkerMetrics(Settings(state_dir=tmp_path, metrics_port=port), LiveMaps(3600.0))
    loop = asyncio.new_event_loop()
    running = threading.Thread(target=loop.run_forever, daemon=True)
    running.start()
    metrics.start(loop, None)
    try:
        found = scrape(port)
    finally:
        metrics.stop()
        loop.call_soon_threadsafe(loop.stop)
        running.join(5)
        loop.close()
    [info] = found["miqps_build_info"]
    assert info.labels == {
        "version": version("miqps"),
        "canonicalizer_path": "python",
        "reason": "MIQPS_NATIVE=0",
    }
    assert value(found, "miqps_build_info") == 1
