"""The dashboard's state, without Kafka: records are fed as the readers feed them, and what
the page shows is asked of the JSON API over a real loopback HTTP server.

The page in a real browser after a real broker run is test_browser.py.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson
import pytest

from miqps.cli import main
from miqps.maps import DomainMap, write_maps
from streams.ops.dashboard.state import DashboardState
from tests.miqps.test_report import SHOP_URLS, STAMP, decision, shop_map


def canonical_record(
    url: str,
    status: str = "learned",
    kept: tuple[str, ...] = ("id",),
) -> bytes:
    return orjson.dumps(
        {
            "url": url,
            "canonical_url": url,
            "domain": "shop.example",
            "pattern": "/p?id",
            "kept": kept,
            "dropped": [],
            "status": status,
            "map_version": 3,
            "meta": None,
        }
    )


def audit_record(
    pattern: str,
    *,
    at: str = STAMP,
    version_before: int = 2,
    fetches: int = 40,
    accepted: bool = True,
    request_reason: str = "enough-samples",
) -> bytes:
    return orjson.dumps(
        {
            "domain": "shop.example",
            "pattern": pattern,
            "accepted": accepted,
            "reason": "ok" if accepted else "anomaly: 3 of 4 kept parameters would be dropped",
            "request_reason": request_reason,
            "version_before": version_before,
            "version_after": version_before + 1 if accepted else None,
            "kept_before": None,
            "dropped_before": None,
            "kept_after": ["id"],
            "dropped_after": ["utm_source"],
            "flipped_to_dropped": [],
            "evidence": {},
            "verification": None,
            "urls_seen": 10,
            "fetches": fetches,
            "at": at,
        }
    )


def blog_map(domain: str = "blog.example") -> DomainMap:
    return DomainMap(domain, 1, STAMP, {"/a?ref": decision((), {"ref"})})


def get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_the_domain_list_filters_and_counts_what_it_leaves_out(served: str) -> None:
    status, listed = get(served + "api/domains?filter=%20BLOG&limit=5")
    assert status == 200
    assert (listed["total"], listed["matching"]) == (3, 1)
    assert listed["rows"] == [
        {
            "domain": "blog.example",
            "version": 1,
            "updated_at": STAMP,
            "patterns": 1,
            "kept": 0,
            "dropped": 1,
            "fetches": 0,
        }
    ]
    _, limited = get(served + "api/domains?limit=2")
    assert [row["domain"] for row in limited["rows"]] == ["blog.example", "news.example"]
    assert (limited["total"], limited["matching"]) == (3, 3)


def test_a_tombstoned_domain_leaves_the_list(state: DashboardState, served: str) -> None:
    state.maps.remove("news.example")
    _, listed = get(served + "api/domains")
    assert [row["domain"] for row in listed["rows"]] == ["blog.example", "shop.example"]


def test_a_domain_page_shows_its_patterns_evidence_and_sprawl(
    state: DashboardState, served: str
) -> None:
    for url in SHOP_URLS:
        state.add_canonical(canonical_record(url))
    state.add_map_update(audit_record("/p?id&utm_source"))
    status, page = get(served + "api/domain?name=shop.example")
    assert status == 200
    assert (page["map_version"], page["distinct_urls"], page["canonical_urls"]) == (3, 4, 2)
    assert page["duplicates_saved"] == 2
    params = {
        (pattern["key"], param["name"]): param
        for pattern in page["patterns"]
        for param in pattern["params"]
    }
    dropped = params["/p?id&utm_source", "utm_source"]
    assert (dropped["map_decision"], dropped["map_layer"], dropped["samples"]) == (
        "drop",
        "learned",
        3,
    )
    assert {row["name"]: row["variants"] for row in page["sprawl"]} == {"utm_source": 2, "id": 1}
    assert page["audit_fetches"] == 40
    assert [entry["pattern"] for entry in page["feed"]] == ["/p?id&utm_source"]


@pytest.mark.parametrize(
    "url",
    [
        SHOP_URLS[1],
        "https://blog.example/a?ref=9&x=1",
        "https://other.example/?utm_source=x&b=2",
        "not a url",
    ],
)
def test_explain_is_the_answer_of_canonicalize_json(
    served: str, tmp_path: Path, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    maps_file = tmp_path / "maps.jsonl"
    write_maps(maps_file, [shop_map(), blog_map(), blog_map("news.example")])
    assert main(["canonicalize", "--json", "--maps", str(maps_file), url]) == 0
    expected = json.loads(capsys.readouterr().out)
    status, shown = get(served + "api/explain?url=" + quote(url, safe=""))
    assert status == 200
    assert shown == expected


def test_a_newer_map_is_explained_at_once(state: DashboardState, served: str) -> None:
    url = "https://blog.example/a?ref=9"
    assert get(served + "api/explain?url=" + quote(url, safe=""))[1]["dropped"] == ["ref"]
    state.maps.apply(DomainMap("blog.example", 2, STAMP, {"/a?ref": decision({"ref"}, ())}))
    assert get(served + "api/explain?url=" + quote(url, safe=""))[1]["kept"] == ["ref"]


def test_the_feed_counts_a_runs_fetches_once_and_skips_bad_records(
    state: DashboardState, served: str
) -> None:
    state.add_map_update(audit_record("/p?id"))
    state.add_map_update(audit_record("/p?id&utm_source"))  # the same run
    state.add_map_update(
        audit_record(
            "/p?id", at="2026-01-02T00:00:00Z", version_before=3, fetches=5, accepted=False
        )
    )
    state.add_map_update(b"{not json")
    state.add_map_update(orjson.dumps({"domain": "shop.example"}))
    state.add_map_update(None)
    state.add_canonical(b"[1, 2]")
    state.add_canonical(None)
    _, feed = get(served + "api/feed")
    assert [(entry["seq"], entry["accepted"]) for entry in feed] == [
        (1, True),
        (2, True),
        (3, False),
    ]
    assert "anomaly" in feed[2]["reason"]
    _, newer = get(served + "api/feed?after=2")
    assert [entry["seq"] for entry in newer] == [3]
    _, listed = get(served + "api/domains?filter=shop")
    assert listed["rows"][0]["fetches"] == 45


def test_the_feed_keeps_only_the_latest_records() -> None:
    state = DashboardState(feed_size=3)
    for number in range(5):
        state.add_map_update(audit_record(f"/p{number}?id", at=f"2026-01-01T00:00:0{number}Z"))
    assert [entry["pattern"] for entry in state.feed()] == ["/p2?id", "/p3?id", "/p4?id"]
    assert state.summary()["feed"] == 5


def test_the_summary_counts_the_patterns_audits_restored() -> None:
    state = DashboardState()
    state.add_map_update(audit_record("/p?id"))
    state.add_map_update(audit_record("/p?id&size", request_reason="audit"))
    state.add_map_update(audit_record("/p?size", request_reason="audit"))
    state.add_map_update(audit_record("/q?size", request_reason="audit", accepted=False))
    assert state.summary()["audit_restores"] == 2
    assert [entry["request_reason"] for entry in state.feed()][1:] == ["audit"] * 3


def test_plot_points_give_rates_learned_share_fetches_and_saved(
    state: DashboardState, served: str
) -> None:
    state.tick(100.0, raw_total=1000, canonical_total=900)
    for url in SHOP_URLS:
        state.add_canonical(canonical_record(url))
    state.add_canonical(canonical_record("https://shop.example/q?x=1", "provisional"))
    state.add_canonical(canonical_record("https://shop.example/", "provisional", kept=()))
    state.add_map_update(audit_record("/p?id"))
    state.tick(102.0, raw_total=1300, canonical_total=1100)
    _, points = get(served + "api/plots")
    assert points[0]["urls_in"] == 0.0 and points[0]["learned_share"] is None
    assert (points[1]["urls_in"], points[1]["urls_out"]) == (150.0, 100.0)
    assert points[1]["learned_share"] == pytest.approx(5 / 6)
    assert (points[1]["fetches"], points[1]["saved"]) == (40, 2)


def test_the_sprawl_tally_is_bounded_and_the_saved_count_goes_on() -> None:
    state = DashboardState(sprawl_window=3)
    for url in SHOP_URLS:
        state.add_canonical(canonical_record(url))
    state.maps.apply(shop_map())
    page = state.domain("shop.example")
    assert page is not None and page["urls"] == 2  # the window restarted after 3 URLs
    assert state.tick(1.0, 0, 0).saved == 1
