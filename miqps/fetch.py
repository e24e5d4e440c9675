"""A polite, guarded HTTP client for probing URLs that come from an untrusted stream.

- Per host: at most ``per_host_concurrency`` requests in flight and ``per_host_rate`` per
  second (aiolimiter's leaky bucket).
- 429 and 503 are honoured with ``Retry-After``; other 5xx, timeouts and transport errors
  back off exponentially; tenacity bounds the attempts.
- Every request has a total time cap, a body cap and at most ``max_redirects`` hops; every
  hop's target passes the address guard again.
- The guard refuses loopback (in every spelling: the WHATWG parser already turns ``127.1``,
  ``2130706433`` and ``0x7f000001`` into ``127.0.0.1``), private, link-local, multicast,
  reserved and metadata addresses, for IP literals and for the addresses a name resolves
  to. Without a proxy, the client connects only to an address it has just checked (its
  network backend resolves, checks and connects in one step), so a name that resolves to
  a public address for the check and to an internal one for the connection (DNS
  rebinding) is refused too. Through a proxy, names are resolved by the proxy, but IP
  literals and ``localhost`` are still refused.
"""

from __future__ import annotations

import asyncio
import email.utils
import ipaddress
import socket
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field

import httpcore
import httpx
from aiolimiter import AsyncLimiter
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
)

from miqps.urls import InvalidURL, parse

REDIRECT_STATUSES = frozenset((301, 302, 303, 307, 308))
METADATA_HOSTS = frozenset(("metadata.google.internal", "metadata", "instance-data"))


@dataclass(frozen=True, slots=True)
class FetchConfig:
    """Limits of the probing client. Defaults are justified in the README (Probing)."""

    timeout: float = 10.0
    max_bytes: int = 4 * 1024 * 1024
    max_redirects: int = 5
    per_host_concurrency: int = 2
    per_host_rate: float = 10.0
    max_attempts: int = 3
    backoff_base: float = 0.5
    max_retry_after: float = 30.0
    proxy: str | None = None
    allow_private: bool = False
    user_agent: str = "miqps/0.1 (query-parameter learner; polite crawler)"


class FetchFailed(Exception):
    """A fetch that gave no usable page: the evidence is inconclusive."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class AddressRefused(FetchFailed):
    """The target is an internal address and private targets are not allowed."""


class _Retryable(FetchFailed):
    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.retry_after = retry_after


@dataclass(frozen=True, slots=True)
class FetchResult:
    url: str
    final_url: str
    status: int
    content_type: str
    body: bytes
    redirects: int


def refusal_reason(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Why an address must not be fetched, or None if it is a public unicast address."""
    if isinstance(address, ipaddress.IPv6Address):
        mapped = address.ipv4_mapped or address.sixtofour
        if mapped is not None:
            return refusal_reason(mapped)
    if address.is_loopback:
        return "loopback address"
    if address.is_link_local:
        return "link-local or metadata address"
    if address.is_multicast:
        return "multicast address"
    if address.is_unspecified:
        return "unspecified address"
    if address.is_private or not address.is_global:
        return "private or reserved address"
    return None


def _literal_address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


Resolver = Callable[[str], Awaitable[list[ipaddress.IPv4Address | ipaddress.IPv6Address]]]


class AddressGuard:
    def __init__(
        self, *, allow_private: bool, via_proxy: bool, resolver: Resolver | None = None
    ) -> None:
        self.allow_private = allow_private
        self.via_proxy = via_proxy
        self.resolver = resolver or _resolve

    async def check(self, url: str) -> None:
        """Raise :class:`AddressRefused` if ``url`` points at an internal address."""
        try:
            host = parse(url).host.rstrip(".")
        except InvalidURL as error:
            raise FetchFailed(f"invalid URL: {error.reason}") from None
        if self.allow_private:
            return
        if self.via_proxy and _literal_address(host) is None:
            _refuse_local_name(host)
            return
        await self.approved_address(host)

    async def approved_address(self, host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
        """The address to connect to for ``host``, if every address it has is public."""
        host = host.rstrip(".")
        _refuse_local_name(host)
        literal = _literal_address(host)
        if literal is not None:
            reason = refusal_reason(literal)
            if reason:
                raise AddressRefused(f"refused {host}: {reason}")
            return literal
        addresses = await self.resolver(host)
        if not addresses:
            raise FetchFailed(f"cannot resolve {host}: no address")
        for address in addresses:
            reason = refusal_reason(address)
            if reason:
                raise AddressRefused(f"refused {host}: resolves to {address}, {reason}")
        return addresses[0]


def _refuse_local_name(host: str) -> None:
    if host == "localhost" or host.endswith(".localhost") or host in METADATA_HOSTS:
        raise AddressRefused(f"refused {host}: local name")


class PinnedBackend(httpcore.AsyncNetworkBackend):
    """An httpcore network backend that connects only to an address the guard has just
    approved for the host, so the address checked is the address connected to."""

    def __init__(
        self, guard: AddressGuard, inner: httpcore.AsyncNetworkBackend | None = None
    ) -> None:
        self.guard = guard
        self.inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        address = await self.guard.approved_address(host)
        return await self.inner.connect_tcp(
            str(address), port, timeout=timeout, local_address=local_address,
            socket_options=socket_options,
        )

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise AddressRefused("refused a unix socket")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


async def _resolve(host: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError as error:
        raise FetchFailed(f"cannot resolve {host}: {error}") from None
    return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]


def _retry_after_seconds(value: str | None) -> float | None:
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


@dataclass(slots=True)
class FetchStats:
    requests: int = 0
    by_host: Counter[str] = field(default_factory=Counter)
    refused: int = 0
    failed: int = 0
    retries: int = 0

    def to_json(self) -> dict[str, int]:
        return {
            "requests": self.requests,
            "refused": self.refused,
            "failed": self.failed,
            "retries": self.retries,
        }


class Fetcher:
    """Fetches pages politely. Use as an async context manager."""

    def __init__(self, config: FetchConfig | None = None, resolver: Resolver | None = None) -> None:
        self.config = config or FetchConfig()
        self.stats = FetchStats()
        self.guard = AddressGuard(
            allow_private=self.config.allow_private,
            via_proxy=self.config.proxy is not None,
            resolver=resolver,
        )
        self._client: httpx.AsyncClient | None = None
        self._slots: dict[str, asyncio.Semaphore] = {}
        self._limiters: dict[str, AsyncLimiter] = {}

    async def __aenter__(self) -> Fetcher:
        config = self.config
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=50)
        transport = None
        if config.proxy is None and not config.allow_private:
            transport = httpx.AsyncHTTPTransport(limits=limits, trust_env=False)
            # httpx takes no network backend: give its transport a pool that uses ours.
            transport._pool = httpcore.AsyncConnectionPool(
                ssl_context=httpx.create_ssl_context(trust_env=False),
                max_connections=limits.max_connections,
                max_keepalive_connections=limits.max_keepalive_connections,
                keepalive_expiry=limits.keepalive_expiry,
                network_backend=PinnedBackend(self.guard),
            )
        self._client = httpx.AsyncClient(
            proxy=config.proxy,
            transport=transport,
            timeout=httpx.Timeout(config.timeout),
            follow_redirects=False,
            headers={"User-Agent": config.user_agent, "Accept": "text/html,*/*;q=0.5"},
            limits=limits,
            trust_env=False,
        )
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def _politeness(self, host: str) -> tuple[asyncio.Semaphore, AsyncLimiter]:
        slot = self._slots.get(host)
        if slot is None:
            slot = self._slots[host] = asyncio.Semaphore(self.config.per_host_concurrency)
            rate = self.config.per_host_rate
            self._limiters[host] = AsyncLimiter(max(rate, 1e-3), 1.0)
        return slot, self._limiters[host]

    async def fetch(self, url: str) -> FetchResult:
        """Fetch ``url`` following guarded redirects, or raise :class:`FetchFailed`."""
        try:
            return await self._fetch_with_redirects(url)
        except AddressRefused:
            self.stats.refused += 1
            raise
        except FetchFailed:
            self.stats.failed += 1
            raise

    async def _fetch_with_redirects(self, url: str) -> FetchResult:
        current = url
        for hop in range(self.config.max_redirects + 1):
            await self.guard.check(current)
            status, headers, body = await self._fetch_one(current)
            if status in REDIRECT_STATUSES and "location" in headers:
                current = str(httpx.URL(current).join(headers["location"]))
                continue
            return FetchResult(
                url=url,
                final_url=current,
                status=status,
                content_type=headers.get("content-type", ""),
                body=body,
                redirects=hop,
            )
        raise FetchFailed(f"more than {self.config.max_redirects} redirects")

    async def _fetch_one(self, url: str) -> tuple[int, Mapping[str, str], bytes]:
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.config.max_attempts),
            wait=self._wait,
            retry=retry_if_exception_type(_Retryable),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                if attempt.retry_state.attempt_number > 1:
                    self.stats.retries += 1
                return await self._attempt(url)
        raise FetchFailed("no attempt made")

    def _wait(self, state: RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome else None
        if isinstance(error, _Retryable) and error.retry_after is not None:
            return error.retry_after
        return float(self.config.backoff_base * 2 ** (state.attempt_number - 1))

    async def _attempt(self, url: str) -> tuple[int, Mapping[str, str], bytes]:
        assert self._client is not None, "use Fetcher as an async context manager"
        host = httpx.URL(url).host
        slot, limiter = self._politeness(host)
        async with slot:
            await limiter.acquire()
            self.stats.requests += 1
            self.stats.by_host[host] += 1
            try:
                async with asyncio.timeout(self.config.timeout):
                    return await self._read(url)
            except TimeoutError:
                raise _Retryable(f"timed out after {self.config.timeout:g}s") from None
            except httpx.HTTPError as error:
                raise _Retryable(f"transport error: {type(error).__name__}") from None

    async def _read(self, url: str) -> tuple[int, Mapping[str, str], bytes]:
        assert self._client is not None
        async with self._client.stream("GET", url) as response:
            status = response.status_code
            if status in (429, 503):
                retry_after = _retry_after_seconds(response.headers.get("retry-after"))
                if retry_after is not None and retry_after > self.config.max_retry_after:
                    raise FetchFailed(f"HTTP {status}, Retry-After {retry_after:.0f}s too long")
                raise _Retryable(f"HTTP {status}", retry_after)
            if status >= 500:
                raise _Retryable(f"HTTP {status}")
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > self.config.max_bytes:
                    raise FetchFailed(f"body larger than {self.config.max_bytes} bytes")
                chunks.append(chunk)
            headers = {key.lower(): value for key, value in response.headers.items()}
            return status, headers, b"".join(chunks)
