"""A hostile server can make a fetch inconclusive, never crash it or exhaust memory.

Every server here is a real one on loopback: ``HostileWeb`` for the responses of issue 9,
and a raw socket server that writes whatever bytes a test (or Hypothesis) gives it.
"""

from __future__ import annotations

import asyncio
import gzip
import ipaddress
import tracemalloc
import zlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from miqps.cli import main
from miqps.fetch import AddressGuard, AddressRefused, FetchConfig, Fetcher, FetchFailed
from simweb.hostile import MIB, HostileWeb
from tests.miqps.loopback import CountingListener

pytestmark = pytest.mark.timeout(60)

CAP = MIB


@pytest.fixture(scope="module")
def hostile() -> Iterator[HostileWeb]:
    with HostileWeb(bomb_size=64 * MIB, slow_seconds=5.0) as web:
        yield web


def fetch_failure(url: str, config: FetchConfig) -> FetchFailed:
    async def run() -> FetchFailed:
        async with Fetcher(config) as fetcher:
            with pytest.raises(FetchFailed) as raised:
                await fetcher.fetch(url)
            assert fetcher.stats.failures_by_kind[raised.value.kind] == 1
            return raised.value

    return asyncio.run(run())


def peak_memory_of(url: str, config: FetchConfig) -> tuple[FetchFailed, int]:
    tracemalloc.start()
    try:
        failure = fetch_failure(url, config)
        return failure, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("route", ["gzip-gzip-bomb", "gzip-gzip-bomb-4x"])
def test_a_stacked_encoding_bomb_is_refused_before_it_inflates(
    hostile: HostileWeb, route: str
) -> None:
    config = FetchConfig(allow_private=True, max_bytes=CAP, max_attempts=1)
    failure, peak = peak_memory_of(f"{hostile.base_url}/{route}?item=1", config)
    assert failure.kind == "stacked content encodings"
    assert peak < 8 * CAP


def test_a_gzip_bomb_stops_at_the_cap_as_it_inflates(hostile: HostileWeb) -> None:
    config = FetchConfig(allow_private=True, max_bytes=CAP, max_attempts=1)
    failure, peak = peak_memory_of(f"{hostile.base_url}/gzip-bomb?item=1", config)
    assert failure.kind == "body too large"
    # One 64 KiB chunk of this bomb inflates to 64 MiB: the cap must apply inside it.
    assert peak < 8 * CAP


@pytest.mark.parametrize(
    ("route", "kind"),
    [
        ("retry-after-superscript", "HTTP 503"),
        ("retry-after-circled", "HTTP 503"),
        ("retry-after-huge", "Retry-After too long"),
    ],
)
def test_a_malformed_retry_after_is_an_inconclusive_fetch(
    hostile: HostileWeb, route: str, kind: str
) -> None:
    config = FetchConfig(allow_private=True, max_attempts=2, backoff_base=0.01)
    assert fetch_failure(f"{hostile.base_url}/{route}", config).kind == kind


@pytest.mark.parametrize("route", ["redirect-idna", "redirect-slashes", "redirect-bad-escape"])
def test_a_malformed_redirect_is_an_inconclusive_fetch(hostile: HostileWeb, route: str) -> None:
    config = FetchConfig(allow_private=True, max_attempts=1)
    failure = fetch_failure(f"{hostile.base_url}/{route}", config)
    assert failure.kind in ("malformed redirect Location", "malformed response", "invalid URL")


async def _public(host: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    return [ipaddress.ip_address("93.184.216.34")]


@pytest.mark.parametrize("allow_private", [True, False])
def test_a_host_the_http_client_rejects_is_an_inconclusive_fetch(allow_private: bool) -> None:
    async def run() -> FetchFailed:
        async with Fetcher(FetchConfig(allow_private=allow_private), _public) as fetcher:
            with pytest.raises(FetchFailed) as raised:
                await fetcher.fetch("http://xn--zz-.attacker.test/p?id=1")
            assert fetcher.stats.requests == 0
            return raised.value

    assert asyncio.run(run()).kind == "URL refused by the HTTP client"


def test_a_slow_body_is_cut_by_the_time_cap(hostile: HostileWeb) -> None:
    config = FetchConfig(allow_private=True, timeout=1.0, max_attempts=1)
    assert fetch_failure(f"{hostile.base_url}/slow-body", config).kind == "timed out"


@pytest.fixture(scope="module")
def raw_server() -> Iterator[CountingListener]:
    server = CountingListener(read_request=True)
    yield server
    server.close()


class _OnlyThisServer(AddressGuard):
    """Keeps the fuzzed redirects on the test's server: any other target is refused."""

    def __init__(self, port: int) -> None:
        super().__init__(allow_private=True, via_proxy=False)
        self.port = port

    async def check(self, url: str) -> None:
        await super().check(url)
        try:
            target = httpx.URL(url)
        except (httpx.InvalidURL, ValueError):
            raise AddressRefused("not the test server") from None
        if (target.host, target.port) != ("127.0.0.1", self.port):
            raise AddressRefused("not the test server")


def raw_fetch(server: CountingListener, response: bytes) -> httpx.Response | FetchFailed:
    """Fetch from ``server`` answering ``response``: the page as a Response, or the failure."""
    server.response = response
    config = FetchConfig(
        allow_private=True, max_attempts=1, timeout=2.0, max_bytes=CAP, per_host_rate=1000
    )

    async def run() -> httpx.Response | FetchFailed:
        fetcher = Fetcher(config)
        fetcher.guard = _OnlyThisServer(server.port)
        async with fetcher:
            try:
                result = await fetcher.fetch(f"http://127.0.0.1:{server.port}/page?id=1")
            except FetchFailed as failure:
                return failure
        return httpx.Response(result.status, content=result.body)

    return asyncio.run(run())


def _head(encoding: str, body: bytes) -> bytes:
    return (
        f"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Encoding: {encoding}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


PAGE = b"<html><body><p>" + b"a page " * 500 + b"</p></body></html>"


def _raw_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


@pytest.mark.parametrize(
    ("encoding", "body"),
    [
        ("identity", PAGE),
        ("gzip", gzip.compress(PAGE)),
        ("x-gzip", gzip.compress(PAGE)),
        ("GZIP , identity", gzip.compress(PAGE)),
        ("deflate", zlib.compress(PAGE)),
        ("deflate", _raw_deflate(PAGE)),
        ("", PAGE),
    ],
)
def test_one_content_encoding_is_decoded(
    raw_server: CountingListener, encoding: str, body: bytes
) -> None:
    page = raw_fetch(raw_server, _head(encoding, body))
    assert isinstance(page, httpx.Response) and page.content == PAGE


@pytest.mark.parametrize(
    ("encoding", "body", "kind"),
    [
        ("br", PAGE, "unsupported content encoding"),
        ("gzip, deflate", zlib.compress(gzip.compress(PAGE)), "stacked content encodings"),
        ("gzip", b"\x1f\x8b\x08\x00garbage" * 10, "corrupt compressed body"),
        ("deflate", b"\xff" * 100, "corrupt compressed body"),
    ],
)
def test_other_encodings_and_corrupt_bodies_are_inconclusive(
    raw_server: CountingListener, encoding: str, body: bytes, kind: str
) -> None:
    failure = raw_fetch(raw_server, _head(encoding, body))
    assert isinstance(failure, FetchFailed) and failure.kind == kind


def test_a_body_at_the_cap_is_kept_and_one_byte_more_is_refused(
    raw_server: CountingListener,
) -> None:
    exact = bytes(CAP)
    page = raw_fetch(raw_server, _head("gzip", gzip.compress(exact)))
    assert isinstance(page, httpx.Response) and page.content == exact
    failure = raw_fetch(raw_server, _head("gzip", gzip.compress(exact + b"x")))
    assert isinstance(failure, FetchFailed) and failure.kind == "body too large"


def _mostly(
    values: st.SearchStrategy[bytes], others: st.SearchStrategy[bytes]
) -> st.SearchStrategy[bytes]:
    """``values`` three times in four: hostile values must meet the statuses that use them."""
    return st.one_of(values, values, values, others)


def _either(*values: bytes) -> st.SearchStrategy[bytes]:
    return _mostly(st.sampled_from(values), st.binary(max_size=48))


_KNOWN_HEADERS: dict[bytes, st.SearchStrategy[bytes]] = {
    b"Content-Type": _either(b"text/html", b"application/json", b"text/html; charset=utf-7"),
    b"Content-Encoding": _either(
        b"gzip",
        b"gzip, gzip",
        b"deflate",
        b"br",
        b"x-gzip",
        b"identity",
        b"gzip, identity",
        b"zstd",
    ),
    b"Content-Length": _either(b"0", b"-1", b"5", b"99999999999999999999", b"1, 2"),
    b"Transfer-Encoding": _either(b"chunked", b"gzip, chunked", b"identity"),
    b"Location": _either(
        b"http://xn--/",
        b"https:////~0::1",
        b"https:////[%zz",
        b"/again",
        b"//127.0.0.1:1/",
        b"http://[::1]/",
        b"http://xn--zz-.attacker.test/",
        "http://éxample.test/".encode(),
        b"?id=2",
        b"\\evil/",
    ),
    b"Retry-After": _either(
        "²".encode(),
        "①".encode(),
        b"9" * 400,
        b"-1",
        b"1.5",
        b"Mon, 01 Jan 99999 00:00:00 GMT",
        b"0",
    ),
    b"Connection": _either(b"close", b"keep-alive", b"upgrade"),
}
_STATUS_CODES = st.sampled_from([200, 204, 301, 302, 303, 307, 308, 404, 429, 500, 503, 101])
_STATUS_LINES = _mostly(
    _STATUS_CODES.map(lambda code: f"HTTP/1.1 {code} Fuzz".encode()),
    st.integers(0, 1000).map(lambda code: f"HTTP/1.1 {code} Fuzz".encode())
    | st.binary(max_size=32),
)
_BODIES = (
    st.binary(max_size=3000)
    | st.binary(max_size=3000).map(gzip.compress)
    | st.binary(max_size=3000).map(zlib.compress)
    | st.binary(max_size=3000).map(_raw_deflate)
)


@st.composite
def raw_responses(draw: st.DrawFn) -> bytes:
    headers = [
        (name, draw(values)) for name, values in _KNOWN_HEADERS.items() if draw(st.booleans())
    ]
    headers += draw(
        st.lists(st.tuples(st.binary(min_size=1, max_size=16), st.binary(max_size=48)), max_size=3)
    )
    head = (
        draw(_STATUS_LINES)
        + b"\r\n"
        + b"".join(name + b": " + value + b"\r\n" for name, value in headers)
    )
    return head + b"\r\n" + draw(_BODIES)


@pytest.mark.slow  # 300 raw responses, one fetch each
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(response=raw_responses())
def test_no_response_makes_a_fetch_raise_anything_but_fetch_failed(
    raw_server: CountingListener, response: bytes
) -> None:
    outcome = raw_fetch(raw_server, response)
    if isinstance(outcome, FetchFailed):
        assert outcome.kind != "unexpected error", outcome.__cause__
    else:
        assert len(outcome.content) <= CAP


def test_learn_on_a_hostile_site_writes_maps_and_counts_failures_by_kind(
    hostile: HostileWeb, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fetch_only = [
        route
        for route in HostileWeb.ROUTES
        if not route.startswith(("nested-divs", "random-bytes", "slow-body"))
    ]
    urls = [
        f"{hostile.base_url}/{route}?item={n}&ref=r{n}" for route in fetch_only for n in range(2)
    ]
    urls += ["http://xn--zz-.attacker.test/p?item=1&ref=2", *hostile.benign_urls(8)]
    url_file, maps_file = tmp_path / "urls.txt", tmp_path / "maps.jsonl"
    url_file.write_text("\n".join(urls) + "\n")
    code = main(
        [
            "learn",
            "--urls",
            str(url_file),
            "--out",
            str(maps_file),
            "--allow-private",
            "--no-progress",
            "--rate",
            "500",
            "--concurrency",
            "8",
            "--timeout",
            "2",
        ]
    )
    summary = capsys.readouterr().out
    assert code == 0
    assert "127.0.0.1" in maps_file.read_text()
    for kind in (
        "stacked content encodings",
        "body too large",
        "HTTP 503",
        "Retry-After too long",
        "URL refused by the HTTP client",
    ):
        assert f"inconclusive fetches, {kind}: " in summary
