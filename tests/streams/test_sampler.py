from miqps.urls import parse
from streams.sampler import LocalSampler


def offer(sampler: LocalSampler, text: str, basis: str = "") -> int:
    url = parse(text)
    return sampler.offer(url.host, url.pattern, url, basis)


def test_only_new_values_are_forwarded_and_the_rest_is_counted() -> None:
    sampler = LocalSampler(max_entries=10, values_per_name=2)
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
