"""The probing worker's audits against a loopback store, without Kafka."""

from __future__ import annotations

import orjson

from miqps.fetch import FetchConfig, Fetcher
from miqps.learner import LearnConfig
from simweb.store import serve_store, store_host, wrong_map
from streams.agents.probe_processor import Probing
from streams.maps.live import LiveMaps
from streams.messages import ProbeRequest, RequestedPattern
from streams.ops.metrics import AuditCounts
from tests.streams.support import assert_valid


async def test_audit_requests_restore_a_dropped_parameter_and_say_so_on_the_wire() -> None:
    host = store_host(8, 100)  # size changes every product
    wrong = wrong_map(host)
    requests = [
        ProbeRequest(
            host,
            "/product",
            {"/product?id&size": RequestedPattern("audit", wrong.updated_at, 0, 0.0)},
            (f"http://{host}/product?id={number}&size=L",),
            0.0,
        )
        for number in range(1, 40)
    ]
    live_maps = LiveMaps(reverify_after=3600)
    live_maps.apply(wrong)
    counts = AuditCounts()
    for proxy in serve_store():
        async with Fetcher(FetchConfig(proxy=proxy, per_host_rate=500.0)) as fetcher:
            probing = Probing(live_maps, fetcher, LearnConfig(), audit_share=0.5)
            [outcome] = await probing.handle(requests)
            counts.count(outcome.audit, outcome.audit_requests)
            again = await probing.handle(requests)  # the same items: audited once only
    assert outcome.published is not None and outcome.published.version == wrong.version + 1
    assert "size" in outcome.published.patterns["/product?id&ref&size"].kept
    records = [orjson.loads(audit.to_bytes()) for audit in outcome.audits]
    assert {record["request_reason"] for record in records} == {"audit"}
    for record in records:
        assert_valid("map-update", record)
    assert outcome.audit is not None and 0 < outcome.audit.audited < len(requests)
    assert counts.requests == len(requests) and counts.restored == 1
    assert counts.by_outcome["audited"] == outcome.audit.audited
    assert [item.audit.audited for item in again if item.audit is not None] == [0]
    families = {family.name: family for family in counts.families()}
    assert families["miqps_audit_restored"].samples[0].value == 1
    assert families["miqps_audit_requests"].samples[0].value == len(requests)
