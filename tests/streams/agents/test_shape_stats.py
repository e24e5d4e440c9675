import orjson

from miqps.sampling import SamplingRule
from miqps.urls import parse, split_pattern
from streams.agents.shape_stats import (
    ENOUGH_SAMPLES,
    RETRY,
    REVERIFY,
    TIME_LIMIT,
    ShapeStats,
    stats_key,
)
from streams.messages import ProbeRequest
from streams.settings import LearningPolicy
from tests.streams.support import assert_valid

POLICY = LearningPolicy(
    min_distinct_values=3,
    saturation_urls=10,
    rare_after=60.0,
    retry_after=300.0,
    max_pool_urls=8,
    urls_per_pattern=2,
)
ALLOWLIST = frozenset({"variant"})


def unlearned(pattern: str, basis: str) -> bool:
    return True


def observe(stats: ShapeStats, text: str, now: float, count: int = 1, basis: str = "") -> bool:
    url = parse(text)
    return stats.observe(url.pattern, url, count, basis, now, POLICY, ALLOWLIST)


def test_a_pattern_is_due_once_every_parameter_has_enough_distinct_values() -> None:
    stats = ShapeStats("a.example", "/p")
    assert observe(stats, "http://a.example/p?id=1&utm_source=x", 0.0)
    assert stats.due(1.0, POLICY, ALLOWLIST, unlearned, trigger="/p?id&utm_source") == {}
    observe(stats, "http://a.example/p?id=2&utm_source=y", 1.0)
    observe(stats, "http://a.example/p?id=3&utm_source=y", 2.0)
    assert stats.due(3.0, POLICY, ALLOWLIST, unlearned, trigger="/p?id&utm_source") == {}
    assert not observe(stats, "http://a.example/p?id=4&utm_source=z", 3.0)
    due = stats.due(4.0, POLICY, ALLOWLIST, unlearned, trigger="/p?id&utm_source")
    assert due == {"/p?id&utm_source": ENOUGH_SAMPLES}
    request = stats.request(due, 4.0)
    assert_valid("probe-request", orjson.loads(request.to_bytes()))
    assert ProbeRequest.from_bytes(request.to_bytes()) == request
    assert len(request.urls) == 4
    for second in range(5, 200):
        observe(stats, f"http://a.example/p?id={second}&utm_source=w{second}", float(second))
        assert (
            stats.due(float(second), POLICY, ALLOWLIST, unlearned, trigger="/p?id&utm_source") == {}
        ), "one request, never a storm"


def test_sibling_patterns_join_the_request_their_pooled_evidence_allows() -> None:
    stats = ShapeStats("a.example", "/p")
    for number in range(3):
        observe(stats, f"http://a.example/p?id={number}&utm_source=s{number}", 0.0)
    observe(stats, "http://a.example/p?id=7", 0.0)
    due = stats.due(1.0, POLICY, ALLOWLIST, unlearned, trigger="/p?id")
    assert due == {"/p?id": ENOUGH_SAMPLES, "/p?id&utm_source": ENOUGH_SAMPLES}


def test_low_cardinality_parameters_saturate_and_allowlisted_ones_need_nothing() -> None:
    stats = ShapeStats("a.example", "/p")
    for number in range(3):
        observe(stats, f"http://a.example/p?id={number}&sort=asc&variant=1", 0.0)
    assert stats.due(1.0, POLICY, ALLOWLIST, unlearned, trigger="/p?id&sort&variant") == {}
    observe(stats, "http://a.example/p?id=1&sort=asc&variant=1", 1.0, count=9)
    assert stats.due(2.0, POLICY, ALLOWLIST, unlearned, trigger="/p?id&sort&variant") == {
        "/p?id&sort&variant": ENOUGH_SAMPLES
    }


def test_rare_patterns_are_due_after_the_time_limit() -> None:
    stats = ShapeStats("a.example", "/p")
    observe(stats, "http://a.example/p?id=1&color=red", 100.0)
    assert stats.due(159.0, POLICY, ALLOWLIST, unlearned) == {}
    assert stats.due(160.0, POLICY, ALLOWLIST, unlearned) == {"/p?color&id": TIME_LIMIT}


def test_a_lost_request_is_retried_once_per_interval_and_only_while_unlearned() -> None:
    stats = ShapeStats("a.example", "/p")
    observe(stats, "http://a.example/p?id=1", 0.0)
    due = stats.due(60.0, POLICY, ALLOWLIST, unlearned)
    stats.request(due, 60.0)
    assert stats.due(300.0, POLICY, ALLOWLIST, unlearned) == {}
    assert stats.due(360.0, POLICY, ALLOWLIST, unlearned) == {"/p?id": RETRY}
    assert stats.due(360.0, POLICY, ALLOWLIST, lambda pattern, basis: False) == {}


def test_re_verification_starts_a_new_round() -> None:
    stats = ShapeStats("a.example", "/p")
    observe(stats, "http://a.example/p?id=1", 0.0)
    stats.request(stats.due(60.0, POLICY, ALLOWLIST, unlearned), 60.0)
    basis = "2026-01-01T00:00:00Z"
    assert observe(stats, "http://a.example/p?id=9", 1000.0, basis=basis)
    assert stats.patterns["/p?id"].requested_at == 0.0
    count = POLICY.saturation_urls
    assert not observe(stats, "http://a.example/p?id=10", 1000.0, count, basis=basis)
    due = stats.due(1000.0, POLICY, ALLOWLIST, lambda pattern, b: b == basis, trigger="/p?id")
    assert due == {"/p?id": REVERIFY}
    assert stats.request(due, 1000.0).patterns["/p?id"].basis == basis


def test_state_survives_serialization() -> None:
    stats = ShapeStats("a.example", "/p")
    observe(stats, "http://a.example/p?id=1&utm_source=x", 5.0)
    stats.request({"/p?id&utm_source": TIME_LIMIT}, 70.0)
    again = ShapeStats.loads(stats.dumps())
    assert again == stats
    assert stats_key("a.example", split_pattern("/p/*?id")[0]) == b"a.example\t/p/*"


def test_sample_packs_are_read_item_by_item() -> None:
    import pytest

    from miqps.urls import InvalidURL
    from streams.messages import BadInput, read_observation, read_sample_items

    value = orjson.dumps(
        [
            {
                "kind": "url",
                "domain": "a.example",
                "pattern": "/p?id",
                "url": "http://a.example/p?id=1",
                "count": 2,
                "basis": "",
            },
            {"kind": "count", "domain": "a.example", "pattern": "/p?id", "count": 5, "basis": ""},
            {"kind": "due", "domain": "a.example", "shape": "/p"},
        ]
    )
    assert_valid("pattern-sample", orjson.loads(value))
    url, count, due = (read_observation(item) for item in read_sample_items(value))
    assert url.url is not None and url.count == 2 and url.shape == "/p"
    assert count.url is None and count.count == 5
    assert due.pattern == "" and due.shape == "/p"
    with pytest.raises(BadInput):
        read_sample_items(b'{"kind": "due"}')
    with pytest.raises(BadInput):
        read_observation({"kind": "other", "domain": "a.example"})
    with pytest.raises(InvalidURL):
        read_observation(
            {
                "kind": "url",
                "domain": "a.example",
                "pattern": "/p?id",
                "url": "ftp://a.example/",
                "count": 1,
                "basis": "",
            }
        )


def test_each_retry_waits_twice_as_long_as_the_one_before() -> None:
    stats = ShapeStats("a.example", "/p")
    observe(stats, "http://a.example/p?id=1", 0.0)
    asked = []
    for now in range(60, 5000, 10):
        due = stats.due(float(now), POLICY, ALLOWLIST, unlearned)
        if due:
            stats.request(due, float(now))
            asked.append(now)
    assert asked == [60, 360, 960, 2160, 4560]


def test_records_written_before_requests_were_counted_still_load() -> None:
    old = orjson.dumps(
        {
            "d": "a.example",
            "s": "/p",
            "p": {"/p?id": [5.0, 2, 70.0, ""]},
            "v": {},
            "u": [["/p?id", "http://a.example/p?id=1"]],
        }
    )
    state = ShapeStats.loads(old).patterns["/p?id"]
    assert (state.requested_at, state.requests) == (70.0, 0)
    assert state.waiting(370.0, POLICY)


def test_a_record_written_before_the_pool_moved_to_the_core_keeps_its_pool() -> None:
    old = (
        b'{"d":"a.example","s":"/p","p":{"/p?id&sort":[5.0,3,70.0,"",1],'
        b'"/p?id&ref":[5.0,1,0.0,"",0],"/p?sort&variant":[5.0,9,0.0,"",0]},'
        b'"v":{"id":[9047190719474731810,2062343013187549633,16804225192622926924],'
        b'"sort":[15462139047006935752],"ref":[3943960303782531269]},'
        b'"u":[["/p?id&sort","http://a.example/p?id=1&sort=asc"],'
        b'["/p?id&sort","http://a.example/p?id=2&sort=asc"],'
        b'["/p?id&sort","http://a.example/p?id=3&sort=asc"],'
        b'["/p?id&ref","http://a.example/p?id=4&ref=x"],'
        b'["/p?sort&variant","http://a.example/p?sort=asc&variant=2"]]}'
    )
    stats = ShapeStats.loads(old)
    assert stats.dumps() == old
    assert stats.pool.samples_of("/p?id&sort") == 3
    seen = stats.urls_per_name()
    ready = {p for p in stats.patterns if stats.pool.ready(p, seen, POLICY.sampling, ALLOWLIST)}
    assert ready == {"/p?sort&variant"}, "id has values, but its items are yet to come"
    assert stats.due(30.0, POLICY, ALLOWLIST, unlearned, trigger="/p?sort&variant") == {
        "/p?sort&variant": ENOUGH_SAMPLES
    }
    observe(stats, "http://a.example/p?id=4&ref=x", 31.0)
    assert stats.pool.samples_of("/p?id&ref") == 1, "a stored URL is known after a reload"


def test_the_policy_gives_the_core_its_sampling_rule() -> None:
    assert LearningPolicy().sampling == SamplingRule()
    assert POLICY.sampling == SamplingRule(
        min_distinct_values=3, saturation_urls=10, max_pool_urls=8, urls_per_pattern=2
    )


def test_malformed_samples_and_requests_are_bad_input_not_other_errors() -> None:
    import pytest

    from streams.messages import BadInput, read_observation

    for item in (
        {"kind": "url"},
        {"kind": "count", "domain": "a.example", "pattern": 3},
        {"kind": "count", "domain": "a.example", "pattern": "/p?id", "count": "2", "basis": ""},
        {"kind": "url", "domain": "a.example", "pattern": "/p?id", "count": 1, "basis": ""},
        {"kind": "count", "domain": "a.example", "pattern": "/p?id", "count": 1},
    ):
        with pytest.raises(BadInput):
            read_observation(item)
    documents: list[object] = [
        [],
        {"domain": "a.example"},
        {"domain": "a.example", "shape": "/p", "patterns": {"/p?id": 1}, "urls": []},
        {"domain": "a.example", "shape": "/p", "patterns": {}, "urls": [], "requested_at": "now"},
    ]
    for document in documents:
        with pytest.raises(BadInput):
            ProbeRequest.from_bytes(orjson.dumps(document))
