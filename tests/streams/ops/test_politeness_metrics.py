"""The probing agent's politeness metrics, as Prometheus exposes them, without a broker."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from miqps.fetch import FetchStats
from streams.ops.metrics import AgentCollector, ProbeAgentState


class _IdleScheduler:
    def load(self) -> tuple[int, int]:
        return 0, 0


class _ProbingFamilies(Collector):
    def __init__(self, collector: AgentCollector, state: ProbeAgentState) -> None:
        self.collector = collector
        self.state = state

    def collect(self) -> Iterator[Metric]:
        yield from self.collector._probing(self.state)


def test_disallowed_urls_deferred_seconds_robots_results_and_the_pace_are_exposed() -> None:
    stats = FetchStats(
        disallowed=3,
        deferred_seconds=2.5,
        robots_fetches=Counter({"rules": 2, "unreachable": 1}),
        delay_by_host={"shop.example": 1.5},
    )
    registry = CollectorRegistry()
    registry.register(
        _ProbingFamilies(AgentCollector({}), ProbeAgentState(_IdleScheduler(), lambda: 0, stats))
    )
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for sample in family.samples
    }
    assert samples[("miqps_probe_disallowed_total", ())] == 3
    assert samples[("miqps_probe_deferred_seconds_total", ())] == 2.5
    assert samples[("miqps_robots_fetch_total", (("result", "rules"),))] == 2
    assert samples[("miqps_robots_fetch_total", (("result", "none"),))] == 0
    assert samples[("miqps_robots_fetch_total", (("result", "unreachable"),))] == 1
    assert samples[("miqps_probe_delay_seconds", (("host", "shop.example"),))] == 1.5
