"""The front's check of inputs keyed by domain (``MIQPS_INPUT_KEYED_BY_DOMAIN``): the
domain read from an output record, the mismatches counted by reason, the warning at most
once per interval."""

from __future__ import annotations

import logging
from typing import Any

import orjson
import pytest

from streams.front.keycheck import KEY, PARTITION, DomainKeyCheck, record_domain
from streams.kafka.partitioning import key_partition
from streams.messages import CanonicalOutput


def output(url: str, domain: str, meta: dict[str, Any] | None = None) -> bytes:
    return CanonicalOutput.encode(url, url, domain, "/p?id", ("id",), (), "learned", 3, meta)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_domain_is_read_from_the_record_whatever_the_url_and_meta_hold() -> None:
    tricky = 'https://shop.example/p?q=,"domain":"evil.example"&x=\\'
    assert record_domain(output(tricky, "shop.example")) == b"shop.example"
    meta = {"domain": "other.example", "url": ',"domain":"x"'}
    assert record_domain(output("https://xn--bcher-kva.example/", "xn--bcher-kva.example", meta))
    assert record_domain(output("https://a.example/", "a.example", meta)) == b"a.example"
    quoted = output('https://a"b.example/', 'a"b.example')
    assert orjson.loads(quoted)["domain"] == 'a"b.example'
    assert record_domain(quoted) == b'a"b.example'
    assert record_domain(b'{"url":"x"}') is None


def test_inputs_keyed_by_their_domain_in_its_partition_pass() -> None:
    check = DomainKeyCheck("urls.raw", 7)
    for domain in (b"shop.example", b"news.example", b"xn--bcher-kva.example"):
        check.check(domain, domain, key_partition(domain, 7), 0)
        check.record(
            domain,
            output(f"https://{domain.decode()}/", domain.decode()),
            key_partition(domain, 7),
            1,
        )
    assert check.mismatches == {KEY: 0, PARTITION: 0}


def test_mismatches_are_counted_by_reason_and_warned_of_once_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    check = DomainKeyCheck("urls.raw", 4, interval=10.0, clock=clock)
    right = key_partition(b"shop.example", 4)
    wrong = (right + 1) % 4
    with caplog.at_level(logging.WARNING, logger="streams.front.keycheck"):
        check.check(None, b"shop.example", right, 5)
        check.check(b"Shop.Example", b"shop.example", right, 6)
        check.check(b"shop.example", b"shop.example", wrong, 7)
        assert check.mismatches == {KEY: 2, PARTITION: 1}
        assert len(caplog.messages) == 1
        assert (
            f"urls.raw[{right}]@5 is keyed None, not by its domain 'shop.example'"
            in (caplog.messages[0])
        )
        clock.now += 10.0
        check.check(b"shop.example", b"shop.example", wrong, 8)
    assert len(caplog.messages) == 2
    assert f"murmur2 puts that key in partition {right}" in caplog.messages[1]
    assert "partitioner=murmur2_random" in caplog.messages[1]
    assert "(2 more in the last 10s)" in caplog.messages[1]
    assert check.mismatches == {KEY: 2, PARTITION: 2}


def test_a_new_partition_count_moves_the_expected_partitions() -> None:
    check = DomainKeyCheck("urls.raw", 4)
    domain = next(
        d
        for d in (f"d{i}.example".encode() for i in range(100))
        if key_partition(d, 4) != key_partition(d, 6)
    )
    check.check(domain, domain, key_partition(domain, 4), 0)
    check.set_partitions(6)
    check.check(domain, domain, key_partition(domain, 4), 1)
    assert check.mismatches[PARTITION] == 1


def test_a_key_that_only_starts_the_domain_or_sits_elsewhere_is_a_mismatch() -> None:
    check = DomainKeyCheck("urls.raw", 4)
    record = output("https://shop.example.org/p?id=1", "shop.example.org")
    right = key_partition(b"shop.example.org", 4)
    check.record(b"shop.example.org", record, right, 0)  # both known from now on
    check.record(
        b"shop.example",
        output("https://shop.example/", "shop.example"),
        key_partition(b"shop.example", 4),
        0,
    )
    check.record(b"shop.example", record, key_partition(b"shop.example", 4), 1)
    check.record(b"shop.example.org", record, (right + 1) % 4, 2)
    check.record(b"shop.example.org", record, right, 3)
    assert check.mismatches == {KEY: 1, PARTITION: 1}
