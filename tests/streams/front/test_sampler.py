import time
from collections.abc import Callable, Mapping
from dataclasses import replace

import orjson

from miqps.audit import AuditRule
from miqps.canonical import Canonicalizer
from miqps.maps import DecisionSummary, DomainMap
from miqps.urls import parse
from simweb.store import wrong_map
from streams.front.sampler import AuditForwarder, LocalSampler
from streams.messages import ProbeRequest
from tests.streams.support import assert_valid

Dropping = Callable[[str], tuple[int, Mapping[str, DecisionSummary]] | None]


def maps_of(domain_map: DomainMap | None) -> Dropping:
    """The audit targets of ``domain_map`` as the front reads them: from its JSON document."""
    canonicalizer = Canonicalizer()
    if domain_map is not None:
        canonicalizer.update(domain_map, domain_map.dumps().encode())
    return canonicalizer.dropping_decisions


def offer(sampler: LocalSampler, text: str, basis: str = "") -> int:
    url = parse(text)
    return sampler.offer(url.host, url.pattern, url, basis)


def test_only_new_values_and_items_are_forwarded_and_the_rest_is_counted() -> None:
    sampler = LocalSampler(max_entries=10, values_per_name=2, items_per_name=2)
    assert offer(sampler, "http://a.example/p?id=1&utm_source=x") == 1
    assert offer(sampler, "http://a.example/p?id=1&utm_source=x") == 0
    assert offer(sampler, "http://a.example/p?id=1&utm_source=x") == 0
    assert offer(sampler, "http://a.example/p?id=2&utm_source=x") == 3, "carries the two counted"
    assert offer(sampler, "http://a.example/p?id=3&utm_source=x") == 0, "id has its 2 values"
    assert offer(sampler, "http://a.example/p?id=3&utm_source=y") == 2
    counts = sampler.drain_counts()
    assert counts == []
    assert offer(sampler, "http://a.example/p?id=9&utm_source=z") == 0
    [pending] = sampler.drain_counts()
    assert (pending.domain, pending.pattern, pending.count) == ("a.example", "/p?id&utm_source", 1)
    assert sampler.drain_counts() == []


def test_a_single_valued_parameter_is_forwarded_on_each_new_item_up_to_the_limit() -> None:
    sampler = LocalSampler(max_entries=10, values_per_name=2, items_per_name=4)
    forwarded = [offer(sampler, f"http://a.example/a/{n}?print=1") for n in range(6)]
    assert forwarded == [1, 1, 1, 1, 0, 0], "one value, but a new article is a new item"
    assert offer(sampler, "http://a.example/a/0?print=1&ref=x") == 1, "another pattern"


def test_re_verification_is_a_separate_round() -> None:
    sampler = LocalSampler(max_entries=10, values_per_name=2)
    assert offer(sampler, "http://a.example/p?id=1") == 1
    assert offer(sampler, "http://a.example/p?id=1", basis="2026-01-01T00:00:00Z") == 1


def test_memory_is_bounded_and_evicted_counts_still_go_out() -> None:
    sampler = LocalSampler(max_entries=3, values_per_name=4)
    offer(sampler, "http://a.example/p?id=1")
    offer(sampler, "http://a.example/p?id=1")
    for host in ("b", "c", "d", "e"):
        assert offer(sampler, f"http://{host}.example/p?id=1") == 1
    assert len(sampler) == 3
    [pending] = sampler.drain_counts()
    assert (pending.domain, pending.count) == ("a.example", 1)
    assert offer(sampler, "http://a.example/p?id=1") == 1, "forgotten, so forwarded again"


def test_a_forwarded_sample_is_forwarded_again_while_its_pattern_needs_learning() -> None:
    """A sample may be lost on its way (Faust's consumer drops messages around a
    rebalance): its first URL goes again after ``resend_after``, then after twice as
    long, until the pattern is learned; an evicted pattern is forgotten."""
    sampler = LocalSampler(max_entries=2, values_per_name=3, resend_after=10.0)
    first = parse("http://shop.test/p?id=1")
    assert sampler.offer("shop.test", "/p?id", first, "") == 1
    sampler.offer("shop.test", "/p?id", parse("http://shop.test/p?id=2"), "")
    started = time.monotonic()
    learned: set[str] = set()

    def needs(domain: str, pattern: str, basis: str) -> bool:
        return pattern not in learned

    assert sampler.due_resends(needs, started + 5) == []
    again = sampler.due_resends(needs, started + 11)
    assert [(r.domain, r.pattern, r.url, r.basis) for r in again] == [
        ("shop.test", "/p?id", first.url, "")
    ]
    assert sampler.due_resends(needs, started + 20) == []  # the next wait is 20 s
    assert len(sampler.due_resends(needs, started + 32)) == 1
    learned.add("/p?id")
    assert sampler.due_resends(needs, started + 1000) == []
    sampler.offer("shop.test", "/q?id", parse("http://shop.test/q?id=1"), "")
    sampler.offer("shop.test", "/r?id", parse("http://shop.test/r?id=1"), "")
    sampler.offer("shop.test", "/s?id", parse("http://shop.test/s?id=1"), "")  # evicts /q
    due = sampler.due_resends(needs, time.monotonic() + 11)
    assert sorted(r.pattern for r in due) == ["/r?id", "/s?id"]


def test_the_resend_times_stay_bounded_by_the_patterns_remembered() -> None:
    sampler = LocalSampler(max_entries=10, values_per_name=3, resend_after=60.0)
    for number in range(1000):
        sampler.offer("shop.test", f"/p{number}?id", parse(f"http://shop.test/p{number}?id=1"), "")
    assert len(sampler._resends) <= 2 * 10 + 1
    due = sampler.due_resends(lambda *_: True, time.monotonic() + 61)
    assert len(due) == 10


def test_without_resend_after_nothing_is_forwarded_again() -> None:
    sampler = LocalSampler(max_entries=2, values_per_name=3)
    sampler.offer("shop.test", "/p?id", parse("http://shop.test/p?id=1"), "")
    assert sampler.due_resends(lambda *_: True, time.monotonic() + 1e9) == []


def test_audits_forward_each_chosen_item_of_a_learned_pattern_once() -> None:
    domain_map = wrong_map("shop.test")
    forwarder = AuditForwarder(AuditRule(0.05), max_items=100)
    sent: list[ProbeRequest] = []
    items = 2000
    for number in range(items):
        for size in ("S", "M"):
            url = parse(f"http://shop.test/product?id={number}&size={size}")
            request = forwarder.offer(maps_of(domain_map), 1, url, url.pattern, 5.0)
            if request is not None:
                assert_valid("probe-request", orjson.loads(request))
                sent.append(ProbeRequest.from_bytes(request))
    assert 60 <= len(sent) <= 140  # 5% of the items, each once
    assert len({request.urls for request in sent}) == len(sent)
    assert {
        (request.shape, pattern, info.reason, info.basis)
        for request in sent
        for pattern, info in request.patterns.items()
    } == {("/product", "/product?id&size", "audit", domain_map.updated_at)}
    unlearned = parse("http://shop.test/other?id=1&size=M")
    forwarder = AuditForwarder(AuditRule(1.0), 10)
    assert forwarder.offer(maps_of(domain_map), 1, unlearned, unlearned.pattern, 5.0) is None
    assert forwarder.offer(maps_of(None), 1, unlearned, unlearned.pattern, 5.0) is None
    assert (
        AuditForwarder(AuditRule(0.0), 10).offer(maps_of(domain_map), 1, url, url.pattern, 5.0)
        is None
    )


def test_audits_read_each_map_version_once_and_follow_a_new_one() -> None:
    domain_map = wrong_map("shop.test")
    reads: list[str] = []

    def live(domain: str) -> tuple[int, Mapping[str, DecisionSummary]] | None:
        reads.append(domain)
        return maps_of(current)(domain)

    current: DomainMap | None = domain_map
    forwarder = AuditForwarder(AuditRule(1.0), max_items=10_000)
    urls = [parse(f"http://shop.test/product?id={n}&size=S") for n in range(50)]
    sent = [forwarder.offer(live, domain_map.version, url, url.pattern, 5.0) for url in urls]
    assert all(request is not None for request in sent)
    assert reads == ["shop.test"], "one decode for the version, however many URLs"

    pattern = urls[0].pattern
    restored = replace(
        domain_map.patterns[pattern], kept=frozenset({"id", "size"}), dropped=frozenset()
    )
    current = replace(
        domain_map,
        version=domain_map.version + 1,
        patterns={**domain_map.patterns, pattern: restored},
    )
    later = parse("http://shop.test/product?id=999&size=S")
    assert forwarder.offer(live, current.version, later, pattern, 6.0) is None
    assert reads == ["shop.test", "shop.test"]
