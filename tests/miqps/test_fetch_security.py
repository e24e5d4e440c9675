"""The prober must never touch internal addresses unless allowed: a real listener proves it."""

import ipaddress
import socket
import threading
from collections.abc import Iterator

import httpcore
import pytest

from miqps.fetch import (
    AddressGuard,
    AddressRefused,
    FetchConfig,
    Fetcher,
    PinnedBackend,
    refusal_reason,
)
from tests.miqps.loopback import CountingListener


@pytest.fixture
def listener() -> Iterator[CountingListener]:
    server = CountingListener()
    yield server
    server.close()


# IPv6 forms that carry an internal IPv4 address, and other non-global addresses.
EMBEDDED_AND_NON_GLOBAL = [
    "::127.0.0.1",
    "::169.254.169.254",
    "::ffff:0:127.0.0.1",
    "64:ff9b::7f00:1",
    "64:ff9b::a9fe:a9fe",
    "64:ff9b:1::7f00:1",
    "64:ff9b:1:7f00:1::",
    "2002:7f00:1::",
    "2002:a9fe:a9fe::1",
    "2001:0:4136:e378:8000:63bf:80ff:fffe",
    "fec0::1",
    "192.0.0.192",
]


def host_of(address: str) -> str:
    return f"[{address}]" if ":" in address else address


def loopback_spellings(port: int) -> list[str]:
    return [
        f"http://127.0.0.1:{port}/",
        f"http://127.1:{port}/",
        f"http://2130706433:{port}/",
        f"http://0x7f000001:{port}/",
        f"http://0177.0.0.1:{port}/",
        f"http://[::1]:{port}/",
        f"http://[::ffff:127.0.0.1]:{port}/",
        f"http://localhost:{port}/",
        f"http://LOCALHOST.:{port}/",
        f"http://api.localhost:{port}/",
        *(f"http://{host_of(address)}:{port}/" for address in EMBEDDED_AND_NON_GLOBAL),
    ]


async def test_loopback_in_every_spelling_is_refused_and_never_connected(
    listener: CountingListener,
) -> None:
    async with Fetcher(FetchConfig(max_attempts=1)) as fetcher:
        for url in loopback_spellings(listener.port):
            with pytest.raises(AddressRefused):
                await fetcher.fetch(url)
        assert fetcher.stats.refused == len(loopback_spellings(listener.port))
        assert fetcher.stats.requests == 0
    assert listener.accepted == 0


async def test_through_a_proxy_ip_literals_and_localhost_are_still_refused(
    listener: CountingListener,
) -> None:
    proxy = f"http://127.0.0.1:{listener.port}"
    async with Fetcher(FetchConfig(proxy=proxy, max_attempts=1)) as fetcher:
        for url in [*loopback_spellings(80), "http://10.0.0.1/", "http://169.254.169.254/"]:
            with pytest.raises(AddressRefused):
                await fetcher.fetch(url)
    assert listener.accepted == 0


async def test_allow_private_lifts_the_refusal(listener: CountingListener) -> None:
    async with Fetcher(FetchConfig(allow_private=True, max_attempts=1)) as fetcher:
        result = await fetcher.fetch(f"http://127.1:{listener.port}/")
    assert result.status == 200 and result.body == b"ok"
    assert listener.accepted == 2  # robots.txt first, then the page


@pytest.mark.parametrize("address", ["127.0.0.1", *EMBEDDED_AND_NON_GLOBAL])
async def test_a_redirect_to_an_internal_address_is_refused(
    listener: CountingListener, address: str
) -> None:
    redirector = socket.socket()
    redirector.bind(("127.0.0.1", 0))
    redirector.listen(1)
    port = redirector.getsockname()[1]

    redirected: list[str] = []

    def answer() -> None:
        conn, _ = redirector.accept()
        conn.recv(4096)
        location = f"http://{host_of(address)}:{listener.port}/secret"
        conn.sendall(
            f"HTTP/1.1 302 Found\r\nLocation: {location}\r\n"
            "Content-Length: 0\r\nConnection: close\r\n\r\n".encode()
        )
        conn.close()
        redirected.append(location)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    fetcher = Fetcher(FetchConfig(max_attempts=1))
    fetcher.guard = _FirstHopGuard(port)  # before the client starts: its backend asks it
    async with fetcher:
        with pytest.raises(AddressRefused):
            await fetcher.fetch(f"http://127.0.0.1:{port}/start")
        assert fetcher.stats.requests == 1
    thread.join(timeout=2)
    redirector.close()
    assert redirected, "the first hop never reached the redirecting server"
    assert listener.accepted == 0


class _FirstHopGuard(AddressGuard):
    """Lets URLs of the test's own redirecting server (``port``) through, and the first
    connection (to it: robots.txt is asked for first, and redirected too), then applies the
    real rules."""

    def __init__(self, port: int) -> None:
        super().__init__(allow_private=False, via_proxy=False)
        self.port = port
        self.connected_first = False

    async def check(self, url: str) -> None:
        if f"127.0.0.1:{self.port}/" in url:
            return
        await super().check(url)

    async def approved_address(self, host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
        if not self.connected_first:
            self.connected_first = True
            return ipaddress.ip_address(host)
        return await super().approved_address(host)


@pytest.mark.parametrize(
    "address",
    [
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "224.0.0.1",
        "0.0.0.0",
        "fd00:ec2::254",
        "fe80::1",
        "::ffff:10.0.0.1",
        "2002:7f00:1::",
        "ff02::1",
        *EMBEDDED_AND_NON_GLOBAL,
        "::93.184.216.34",
        "::ffff:0:93.184.216.34",
        "64:ff9b:1::5db8:d822",
        "192.0.0.9",
        "fec0::5db8:d822",
    ],
)
def test_internal_addresses_have_a_refusal_reason(address: str) -> None:
    assert refusal_reason(ipaddress.ip_address(address)) is not None


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("::127.0.0.1", "loopback address inside an IPv4-compatible address"),
        ("::ffff:10.0.0.1", "private or reserved address inside an IPv4-mapped address"),
        ("::ffff:0:169.254.169.254", "link-local or metadata address inside an IPv4-translated"),
        ("64:ff9b::a9fe:a9fe", "link-local or metadata address inside a NAT64 address"),
        ("2002:a9fe:a9fe::", "link-local or metadata address inside a 6to4 address"),
        ("fec0::1", "site-local address"),
        ("192.0.0.192", "IETF protocol assignment"),
    ],
)
def test_the_refusal_reason_names_the_embedded_address(address: str, reason: str) -> None:
    assert (refusal_reason(ipaddress.ip_address(address)) or "").startswith(reason)


@pytest.mark.parametrize(
    "address",
    [
        "93.184.216.34",
        "2606:4700::1111",
        "::ffff:93.184.216.34",
        "64:ff9b::5db8:d822",
        "2002:5db8:d822::1",
    ],
)
def test_public_addresses_are_allowed(address: str) -> None:
    assert refusal_reason(ipaddress.ip_address(address)) is None


async def test_names_resolving_to_private_addresses_are_refused() -> None:
    async def resolver(host: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
        return [ipaddress.ip_address("93.184.216.34"), ipaddress.ip_address("10.0.0.7")]

    guard = AddressGuard(allow_private=False, via_proxy=False, resolver=resolver)
    with pytest.raises(AddressRefused, match=r"10\.0\.0\.7"):
        await guard.check("http://rebind.example/")


async def test_the_real_resolver_is_consulted_for_names() -> None:
    name = socket.gethostname()
    addresses = {str(info[4][0]) for info in socket.getaddrinfo(name, None)}
    guard = AddressGuard(allow_private=False, via_proxy=False)
    internal = any(refusal_reason(ipaddress.ip_address(a.split("%")[0])) for a in addresses)
    if internal:
        with pytest.raises(AddressRefused):
            await guard.check(f"http://{name}/")
    else:
        await guard.check(f"http://{name}/")


async def test_a_name_rebound_to_loopback_after_the_check_is_refused_at_connect(
    listener: CountingListener,
) -> None:
    answers = iter([["93.184.216.34"], ["127.0.0.1"]])

    async def rebinding(host: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
        return [ipaddress.ip_address(a) for a in next(answers)]

    async with Fetcher(FetchConfig(max_attempts=1), resolver=rebinding) as fetcher:
        with pytest.raises(AddressRefused, match=r"127\.0\.0\.1"):
            await fetcher.fetch(f"http://rebind.example:{listener.port}/")
        assert fetcher.stats.refused == 1
    assert listener.accepted == 0


class _RecordingBackend(httpcore.AsyncNetworkBackend):
    def __init__(self) -> None:
        self.hosts: list[str] = []

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: object = None,
    ) -> httpcore.AsyncNetworkStream:
        self.hosts.append(host)
        raise httpcore.ConnectError("recorded")


async def test_the_pinned_backend_connects_to_the_address_it_checked() -> None:
    async def resolver(host: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
        return [ipaddress.ip_address("93.184.216.34")]

    inner = _RecordingBackend()
    guard = AddressGuard(allow_private=False, via_proxy=False, resolver=resolver)
    with pytest.raises(httpcore.ConnectError):
        await PinnedBackend(guard, inner).connect_tcp("shop.example", 443)
    assert inner.hosts == ["93.184.216.34"]
    with pytest.raises(AddressRefused):
        await PinnedBackend(guard, inner).connect_tcp("10.1.2.3", 80)
    assert inner.hosts == ["93.184.216.34"]
