"""The repartition hop's routing, without Kafka: a URL goes to its domain's partition under
its domain, as Java's partitioner puts that key in every domain-keyed topic; input with no
readable URL keeps its key and its partition number; the source header names the input."""

from __future__ import annotations

import orjson
import pytest

from miqps.urls import parse
from streams.front.repartition import DomainRepartitioner
from streams.kafka.partitioning import key_partition
from streams.messages import Source
from streams.settings import Settings

PARTITIONS = 6


@pytest.fixture
def hop() -> DomainRepartitioner:
    repartitioner = DomainRepartitioner(Settings().with_overrides(repartition_input=True))
    repartitioner.partitions = PARTITIONS
    return repartitioner


@pytest.mark.parametrize(
    "value",
    [
        b"https://Shop.Example/p?id=7&utm_source=x",
        b'{"url": "https://b\\u00fccher.example:8443/a?b=1", "crawl": 3}',
        b"http://[2001:db8::1]/x?y=2",
        b"https://shop.example./p",
    ],
)
def test_a_url_goes_to_its_domains_partition_under_its_domain(
    hop: DomainRepartitioner, value: bytes
) -> None:
    url = orjson.loads(value)["url"] if value.startswith(b"{") else value.decode()
    domain = parse(url).host.encode()
    assert hop.route(value, b"any key", 5) == (domain, key_partition(domain, PARTITIONS))
    assert hop.counters.rekeyed == 1 and hop.counters.unreadable == 0


@pytest.mark.parametrize("value", [b"not a url", b'{"url": 7}', b"", None, b"\xff\xfe"])
def test_input_with_no_readable_url_keeps_its_key_and_partition_number(
    hop: DomainRepartitioner, value: bytes | None
) -> None:
    assert hop.route(value, b"k", 9) == (b"k", 9 % PARTITIONS)
    assert hop.route(value, None, 2) == (None, 2)
    assert hop.counters.unreadable == 2 and hop.counters.rekeyed == 0


def test_a_source_travels_in_its_header() -> None:
    source = Source("urls.raw", 3, 1234, 1_700_000_000_000)
    headers = [("trace", b"x"), (Source.HEADER, source.to_header())]
    assert Source.from_headers(headers) == source
    assert Source.from_headers(dict(headers)) == source
    assert Source.from_headers([("trace", b"x")]) is None
    assert Source.from_headers(None) is None
    for garbage in (b"[", b'["t", "1", 2, null]', b"{}", b"[1, 2]"):
        assert Source.from_headers([(Source.HEADER, garbage)]) is None
