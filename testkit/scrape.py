"""A worker's /metrics, read as a test or a benchmark needs it."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from testkit.localbroker import free_port

__all__ = ["free_port", "quiet_for", "scrape", "value"]


def scrape(port: int) -> dict[str, list[Sample]]:
    """Sample name -> samples, from the worker's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples: dict[str, list[Sample]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    return samples


def value(samples: dict[str, list[Sample]], name: str, **labels: str) -> float:
    return sum(
        sample.value
        for sample in samples.get(name, [])
        if all(sample.labels.get(key) == wanted for key, wanted in labels.items())
    )


def quiet_for(port: int, seconds: float) -> Callable[[], bool]:
    """Whether the worker has had nothing to do for ``seconds``, by its own metrics: no
    probe work, no agent lag, no fetch, every input committed by the front."""
    state = {"fetches": -1.0, "since": time.monotonic()}

    def quiet() -> bool:
        found = scrape(port)
        busy = sum(
            value(found, name)
            for name in (
                "miqps_probe_requests_pending",
                "miqps_probe_requests_in_flight",
                "miqps_probe_domains_in_flight",
                "miqps_consumer_lag",
            )
        )
        fetches = value(found, "miqps_fetch_requests_total")
        if busy or fetches != state["fetches"]:
            state["fetches"], state["since"] = fetches, time.monotonic()
        return time.monotonic() - state["since"] >= seconds

    return quiet
