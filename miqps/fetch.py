"""A polite, guarded HTTP client for probing URLs that come from an untrusted stream.

- Per host and scheme, robots.txt is fetched before the first request, through the same
  guard, and obeyed (:mod:`miqps.politeness`); a disallowed URL, a host whose robots.txt
  does not answer, a host asking for a Crawl-delay over ``max_crawl_delay`` and a domain
  of the operator's never-probe list are never fetched (:class:`NotProbed`).
- Per host: at most ``per_host_concurrency`` requests in flight, and request starts
  spaced by the host's delay: ``1 / per_host_rate`` at first, never below its Crawl-delay,
  then following its latency and errors (:class:`~miqps.politeness.HostPace`). A host
  that asks for a Crawl-delay (or Request-rate) gets one request at a time, each starting
  that long after the previous one's answer, robots.txt's own included.
- 429 and 503 with ``Retry-After`` pause the whole host, for every task; a longer
  ``Retry-After`` than ``max_retry_after`` defers the host. Other 5xx, timeouts and
  transport errors back off exponentially; tenacity bounds the attempts.
- Every request has a total time cap, a body cap and at most ``max_redirects`` hops; every
  hop's target passes the address guard again.
- The guard refuses every address that is not global (in every spelling: the WHATWG parser
  already turns ``127.1``, ``2130706433`` and ``0x7f000001`` into ``127.0.0.1``), and looks
  inside the IPv6 forms that carry an IPv4 address (IPv4-mapped, -compatible, -translated,
  NAT64, 6to4, Teredo), for IP literals and for the addresses a name resolves to.
  Without a proxy, the client connects only to an address it has just checked (its
  network backend resolves, checks and connects in one step), so a name that resolves to
  a public address for the check and to an internal one for the connection (DNS
  rebinding) is refused too. Through a proxy, names are resolved by the proxy, but IP
  literals and ``localhost`` are still refused.
- A body is capped as it is decoded, so a compression bomb stops at the cap; at most one
  content encoding (gzip or deflate) is accepted.
- No response can end a run: whatever a server sends, :meth:`Fetcher.fetch` returns a
  result or raises :class:`FetchFailed` with a reason and a short ``kind`` for summaries.
"""

from __future__ import annotations

import asyncio
import email.utils
import ipaddress
import socket
import time
import zlib
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpcore
import httpx
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
)

from miqps.politeness import (
    ROBOTS_MAX_BYTES,
    HostPace,
    NotProbedKind,
    RobotsRules,
    RobotsStatus,
    opted_out,
    product_token,
    read_never_probe,
)
from miqps.urls import InvalidURL, parse

REDIRECT_STATUSES = frozenset((301, 302, 303, 307, 308))
METADATA_HOSTS = frozenset(("metadata.google.internal", "metadata", "instance-data"))
ACCEPTED_ENCODINGS = "gzip, deflate"
PACE_TARGET_CONCURRENCY = 1.0
"""Requests a host should be working on at once, on average (AutoThrottle's default)."""
_GZIP_WBITS = 16 + zlib.MAX_WBITS
_ZLIB_WBITS = {"gzip": _GZIP_WBITS, "x-gzip": _GZIP_WBITS, "deflate": zlib.MAX_WBITS}
_RAW_DEFLATE_WBITS = -zlib.MAX_WBITS

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_IETF_PROTOCOL_ASSIGNMENTS = ipaddress.IPv4Network("192.0.0.0/24")
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
_IPV4_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")
_NAT64_WELL_KNOWN = ipaddress.IPv6Network("64:ff9b::/96")
# RFC 8215: inside this prefix the IPv4 address may sit at any RFC 6052 offset.
_NAT64_LOCAL_USE = ipaddress.IPv6Network("64:ff9b:1::/48")


@dataclass(frozen=True, slots=True)
class FetchConfig:
    """Limits of the probing client. Defaults are justified in the README (Probing)."""

    timeout: float = 10.0
    max_bytes: int = 4 * 1024 * 1024
    max_redirects: int = 5
    per_host_concurrency: int = 1
    per_host_rate: float = 1.0
    adaptive_pace: bool = True
    max_delay: float = 60.0
    max_crawl_delay: float = 30.0
    max_attempts: int = 3
    backoff_base: float = 0.5
    max_retry_after: float = 30.0
    proxy: str | None = None
    allow_private: bool = False
    user_agent: str = "miqps/0.4 (query-parameter learner)"
    contact_url: str | None = None
    never_probe: Path | None = None

    @property
    def agent(self) -> str:
        """The User-Agent sent: ``user_agent``, with the contact URL when there is one."""
        if not self.contact_url:
            return self.user_agent
        if self.user_agent.endswith(")"):
            return f"{self.user_agent[:-1]}; +{self.contact_url})"
        return f"{self.user_agent} (+{self.contact_url})"


class FetchFailed(Exception):
    """A fetch that gave no usable page: the evidence is inconclusive.

    ``reason`` says what happened to this fetch; ``kind`` is the same without its details
    (hosts, sizes), so that failures can be counted by kind.
    """

    def __init__(self, reason: str, kind: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.kind = kind or reason
        self.requests = 0
        """Requests this fetch sent to the host (:attr:`FetchResult.requests`)."""


class NotProbed(FetchFailed):
    """A URL the site or the operator does not let us fetch: nothing was sent."""


class AddressRefused(FetchFailed):
    """The target is an internal address and private targets are not allowed."""


class _Retryable(FetchFailed):
    def __init__(
        self, reason: str, retry_after: float | None = None, kind: str | None = None
    ) -> None:
        super().__init__(reason, kind)
        self.retry_after = retry_after


@dataclass(frozen=True, slots=True)
class FetchResult:
    url: str
    final_url: str
    status: int
    content_type: str
    body: bytes
    redirects: int
    requests: int = 1
    """Requests this fetch sent to the host: one per hop and per retry."""


def refusal_reason(address: IPAddress) -> str | None:
    """Why an address must not be fetched, or None if it is a global unicast address."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        inner = refusal_reason(address.ipv4_mapped)  # the very same host, reached over IPv6
        return None if inner is None else f"{inner} inside an IPv4-mapped address"
    reason = _own_refusal_reason(address)
    if reason is None and isinstance(address, ipaddress.IPv6Address):
        for form, embedded in _embedded_ipv4(address):
            inner = refusal_reason(embedded)
            if inner:
                return f"{inner} inside {form}"
        reason = _refused_ipv6_form(address)
    if reason is None and (address.is_private or not address.is_global):
        reason = "private or reserved address"
    return reason


def _own_refusal_reason(address: IPAddress) -> str | None:
    if address.is_loopback:
        return "loopback address"
    if address.is_link_local:
        return "link-local or metadata address"
    if address.is_multicast:
        return "multicast address"
    if address.is_unspecified:
        return "unspecified address"
    if isinstance(address, ipaddress.IPv6Address) and address.is_site_local:
        return "site-local address"
    if address in _IETF_PROTOCOL_ASSIGNMENTS:
        return "IETF protocol assignment"
    return None


def _embedded_ipv4(address: ipaddress.IPv6Address) -> list[tuple[str, ipaddress.IPv4Address]]:
    """The IPv4 addresses an IPv6 address carries, each with the name of its form."""
    low32 = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    found: list[tuple[str, ipaddress.IPv4Address]] = []
    if address in _IPV4_COMPATIBLE:
        found.append(("an IPv4-compatible address", low32))
    if address in _IPV4_TRANSLATED:
        found.append(("an IPv4-translated address", low32))
    if address in _NAT64_WELL_KNOWN or address in _NAT64_LOCAL_USE:
        found.append(("a NAT64 address", low32))
    if address.sixtofour is not None:
        found.append(("a 6to4 address", address.sixtofour))
    if address.teredo is not None:
        server, client = address.teredo
        found += [("a Teredo address", server), ("a Teredo address", client)]
    return found


def _refused_ipv6_form(address: ipaddress.IPv6Address) -> str | None:
    """Forms refused whatever they carry: none of them reaches a web server."""
    if address in _IPV4_COMPATIBLE:
        return "deprecated IPv4-compatible address"
    if address in _IPV4_TRANSLATED:
        return "IPv4-translated address"
    if address in _NAT64_LOCAL_USE:
        return "local-use NAT64 address"
    return None


def _literal_address(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


Resolver = Callable[[str], Awaitable[list[IPAddress]]]


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
            raise FetchFailed(f"invalid URL: {error.reason}", "invalid URL") from None
        if self.allow_private:
            return
        if self.via_proxy and _literal_address(host) is None:
            _refuse_local_name(host)
            return
        await self.approved_address(host)

    async def approved_address(self, host: str) -> IPAddress:
        """The address to connect to for ``host``, if every address it has is public."""
        host = host.rstrip(".")
        _refuse_local_name(host)
        literal = _literal_address(host)
        if literal is not None:
            reason = refusal_reason(literal)
            if reason:
                raise AddressRefused(f"refused {host}: {reason}", f"refused: {reason}")
            return literal
        addresses = await self.resolver(host)
        if not addresses:
            raise FetchFailed(f"cannot resolve {host}: no address", "cannot resolve")
        for address in addresses:
            reason = refusal_reason(address)
            if reason:
                raise AddressRefused(
                    f"refused {host}: resolves to {address}, {reason}", f"refused: {reason}"
                )
        return addresses[0]


def _refuse_local_name(host: str) -> None:
    if host == "localhost" or host.endswith(".localhost") or host in METADATA_HOSTS:
        raise AddressRefused(f"refused {host}: local name", "refused: local name")


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
            str(address),
            port,
            timeout=timeout,
            local_address=local_address,
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


async def _resolve(host: str) -> list[IPAddress]:
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError as error:
        raise FetchFailed(f"cannot resolve {host}: {error}", "cannot resolve") from None
    return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]


def _retry_after_seconds(value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value, or None if it is absent or malformed."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, OverflowError, OSError):
        return None
    return max(0.0, when - time.time())


class BoundedDecoder:
    """Decodes a body with at most one content encoding, and fails as soon as the decoded
    or the raw body grows past ``limit`` bytes: output is produced ``limit + 1`` bytes at a
    time at most, so a compression bomb never gets to inflate. With ``truncate``, the body is
    cut at ``limit`` instead (:attr:`full` says so), as robots.txt is read."""

    def __init__(self, content_encoding: str, limit: int, *, truncate: bool = False) -> None:
        codings = [
            coding.strip().lower()
            for coding in content_encoding.split(",")
            if coding.strip() and coding.strip().lower() != "identity"
        ]
        if len(codings) > 1:
            raise FetchFailed(
                f"{len(codings)} stacked content encodings", "stacked content encodings"
            )
        if codings and codings[0] not in _ZLIB_WBITS:
            raise FetchFailed(
                f"unsupported content encoding {codings[0][:32]!r}", "unsupported content encoding"
            )
        self.coding = codings[0] if codings else "identity"
        self.limit = limit
        self.truncate = truncate
        self.full = False
        self.raw_size = 0
        self.size = 0
        self._inflater = zlib.decompressobj(_ZLIB_WBITS[self.coding]) if codings else None
        self._fed_any = False

    def feed(self, raw: bytes) -> bytes:
        self.raw_size += len(raw)
        if self.raw_size > self.limit and not self.truncate:
            raise self._too_large()
        if self._inflater is None:
            return self._counted(raw)
        try:
            return self._inflate(raw)
        except zlib.error:
            if self.coding != "deflate" or self._fed_any:
                raise self._corrupt() from None
            # "deflate" is often sent without its zlib wrapper: read it as raw deflate.
            self._inflater = zlib.decompressobj(_RAW_DEFLATE_WBITS)
            self.size = 0
            try:
                return self._inflate(raw)
            except zlib.error:
                raise self._corrupt() from None
        finally:
            self._fed_any = True

    def finish(self) -> bytes:
        if self._inflater is None or self._inflater.eof:
            return b""
        try:
            return self._counted(self._inflater.flush(self._room()))
        except zlib.error:
            raise self._corrupt() from None

    def _inflate(self, data: bytes) -> bytes:
        assert self._inflater is not None
        pieces: list[bytes] = []
        while data and not self._inflater.eof:
            piece = self._inflater.decompress(data, self._room())
            pieces.append(self._counted(piece))
            if not piece and self._inflater.unconsumed_tail == data:
                break
            data = self._inflater.unconsumed_tail
        return b"".join(pieces)

    def _room(self) -> int:
        return max(1, self.limit - self.size + 1)

    def _counted(self, decoded: bytes) -> bytes:
        self.size += len(decoded)
        if self.size > self.limit:
            if not self.truncate:
                raise self._too_large()
            self.full = True
            decoded = decoded[: len(decoded) - (self.size - self.limit)]
            self.size = self.limit
        return decoded

    def _too_large(self) -> FetchFailed:
        return FetchFailed(f"body larger than {self.limit} bytes", "body too large")

    def _corrupt(self) -> FetchFailed:
        return FetchFailed(f"corrupt {self.coding} body", "corrupt compressed body")


@dataclass(slots=True)
class FetchStats:
    requests: int = 0
    by_host: Counter[str] = field(default_factory=Counter)
    refused: int = 0
    failed: int = 0
    retries: int = 0
    failures_by_kind: Counter[str] = field(default_factory=Counter)
    fetched: int = 0
    """Fetches that returned a page (after redirects and retries)."""
    unjudgeable: int = 0
    """Pages fetched that a prober could not judge (interstitial, shell, unparsable...)."""
    politeness_wait_seconds: dict[str, float] = field(default_factory=dict)
    """Per host, seconds spent waiting for its concurrency slot and its turn."""
    not_probed: Counter[str] = field(default_factory=Counter)
    """URLs not fetched because the site or the operator does not let us, by kind."""
    disallowed: int = 0
    """URLs not fetched because robots.txt disallows them (or does not answer)."""
    deferred_seconds: float = 0.0
    """Seconds hosts were paused or deferred for, at their request (Retry-After)."""
    robots_fetches: Counter[str] = field(default_factory=Counter)
    """robots.txt fetches by result (:class:`~miqps.politeness.RobotsStatus`)."""
    robots_by_host: dict[str, str] = field(default_factory=dict)
    """Per host, the status of its robots.txt as last fetched."""
    robots_unanswered: dict[str, str] = field(default_factory=dict)
    """Per host whose robots.txt did not answer when last fetched, why (a failure's kind,
    ``HTTP 502``): what a run that reached nothing tells its user."""
    delay_by_host: dict[str, float] = field(default_factory=dict)
    """Per host, the current seconds between request starts (its pace)."""

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
        self._paces: dict[str, HostPace] = {}
        self._robots: dict[tuple[str, str], asyncio.Future[RobotsRules]] = {}
        self._deferred_until: dict[str, float] = {}
        self.product_token = product_token(self.config.agent)
        never_probe = self.config.never_probe
        self.never_probe = read_never_probe(never_probe) if never_probe else frozenset()

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
            headers={
                "User-Agent": config.agent,
                "Accept": "text/html,*/*;q=0.5",
                "Accept-Encoding": ACCEPTED_ENCODINGS,
            },
            limits=limits,
            trust_env=False,
        )
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def _politeness(self, host: str) -> tuple[asyncio.Semaphore, HostPace]:
        slot = self._slots.get(host)
        if slot is None:
            config = self.config
            slot = self._slots[host] = asyncio.Semaphore(config.per_host_concurrency)
            self._paces[host] = HostPace(
                1.0 / max(config.per_host_rate, 1e-3),
                config.max_delay,
                PACE_TARGET_CONCURRENCY,
                config.adaptive_pace,
            )
        return slot, self._paces[host]

    async def fetch(self, url: str) -> FetchResult:
        """Fetch ``url`` following guarded redirects, or raise :class:`FetchFailed`.

        Nothing else escapes: whatever the server sends is at worst an inconclusive fetch.
        """
        sent = _Sent()
        try:
            result = await self._fetch_with_redirects(url, sent=sent)
        except NotProbed as error:
            self.stats.not_probed[error.kind] += 1
            error.requests = sent.requests
            raise
        except AddressRefused as error:
            self.stats.refused += 1
            self.stats.failures_by_kind[error.kind] += 1
            error.requests = sent.requests
            raise
        except FetchFailed as error:
            self._count_failure(error)
            error.requests = sent.requests
            raise
        except Exception as error:  # a response no rule above foresaw must not end a run
            failure = FetchFailed(f"unexpected {type(error).__name__}", "unexpected error")
            self._count_failure(failure)
            failure.requests = sent.requests
            raise failure from error
        self.stats.fetched += 1
        return result

    def _count_failure(self, error: FetchFailed) -> None:
        self.stats.failed += 1
        self.stats.failures_by_kind[error.kind] += 1

    async def _fetch_with_redirects(
        self,
        url: str,
        *,
        robots_file: bool = False,
        body_limit: int | None = None,
        sent: _Sent | None = None,
    ) -> FetchResult:
        current = url
        sent = sent if sent is not None else _Sent()
        for hop in range(self.config.max_redirects + 1):
            await self.guard.check(current)
            target = _client_url(current)
            if not robots_file:
                await self._admit(target)
            status, headers, body = await self._fetch_one(target, body_limit, sent)
            if status in REDIRECT_STATUSES and "location" in headers:
                current = _redirect_target(target, headers["location"])
                continue
            return FetchResult(
                url=url,
                final_url=current,
                status=status,
                content_type=headers.get("content-type", ""),
                body=body,
                redirects=hop,
                requests=sent.requests,
            )
        raise FetchFailed(f"more than {self.config.max_redirects} redirects", "too many redirects")

    async def _admit(self, url: httpx.URL) -> None:
        """Raise :class:`NotProbed` unless the operator and the site let us fetch ``url``."""
        host = url.host
        listed = opted_out(host, self.never_probe)
        if listed is not None:
            raise NotProbed(f"{host}: {listed} is on the never-probe list", NotProbedKind.OPTED_OUT)
        rules = await self._robots_rules(url)
        if rules.refusal_kind:
            raise AddressRefused(f"robots.txt of {host}: {rules.reason}", rules.refusal_kind)
        if not rules.allows(str(url), self.product_token):
            self.stats.disallowed += 1
            if rules.status is RobotsStatus.UNREACHABLE:
                raise NotProbed(
                    f"robots.txt of {host} does not answer ({rules.reason}): nothing is "
                    "fetched until it does",
                    NotProbedKind.ROBOTS_UNREACHABLE,
                )
            raise NotProbed(f"disallowed by the robots.txt of {host}", NotProbedKind.DISALLOWED)
        asked = rules.delay(self.product_token)
        if asked > self.config.max_crawl_delay:
            raise NotProbed(
                f"{host} asks for {asked:g}s between requests, more than the "
                f"{self.config.max_crawl_delay:g}s allowed",
                NotProbedKind.CRAWL_DELAY_OVER_CAP,
            )
        if asked:
            self._politeness(host)[1].ask_at_least(asked)
        until = self._deferred_until.get(host, 0.0)
        if until > time.monotonic():
            raise NotProbed(
                f"{host} asked for a pause longer than {self.config.max_retry_after:g}s; "
                f"deferred for {until - time.monotonic():.0f}s more",
                NotProbedKind.HOST_DEFERRED,
            )

    def ask_robots_again(self, host: str) -> None:
        """Forget a robots.txt of ``host`` that did not answer, so that the next fetch asks
        for it again: a new learning run of the host's patterns does."""
        for key, known in list(self._robots.items()):
            if (
                key[1].split(":")[0] == host
                and known.done()
                and (known.cancelled() or known.result().status is RobotsStatus.UNREACHABLE)
            ):
                del self._robots[key]

    async def _robots_rules(self, url: httpx.URL) -> RobotsRules:
        """The robots.txt rules of ``url``'s scheme and host, fetched once per cache life
        and shared by every task."""
        key = (url.scheme, url.netloc.decode("ascii"))
        known = self._robots.get(key)
        if (
            known is not None
            and known.done()
            and (known.cancelled() or known.result().expired(time.monotonic()))
        ):
            known = None
        if known is None:
            known = self._robots[key] = asyncio.ensure_future(self._fetch_robots(url))
        return await asyncio.shield(known)

    async def _fetch_robots(self, url: httpx.URL) -> RobotsRules:
        robots_url = str(url.copy_with(path="/robots.txt", query=None, fragment=None))
        unanswered = ""
        try:
            result = await self._fetch_with_redirects(
                robots_url, robots_file=True, body_limit=ROBOTS_MAX_BYTES
            )
        except AddressRefused as error:
            rules = RobotsRules(
                RobotsStatus.UNREACHABLE,
                time.monotonic(),
                reason=error.reason,
                refusal_kind=error.kind,
            )
            unanswered = error.kind
        except FetchFailed as error:
            # RFC 9309: after five redirects, robots.txt may be taken as unavailable.
            status = RobotsStatus.NONE if error.kind == "too many redirects" else None
            rules = RobotsRules(
                status or RobotsStatus.UNREACHABLE, time.monotonic(), reason=error.reason
            )
            unanswered = error.kind
        except Exception as error:  # a response no rule foresaw: as if it did not answer
            reason = f"unexpected {type(error).__name__}"
            rules = RobotsRules(RobotsStatus.UNREACHABLE, time.monotonic(), reason=reason)
        else:
            if 200 <= result.status < 300:
                text = result.body.decode("utf-8", errors="replace")
                rules = RobotsRules.parse(text, time.monotonic())
            elif 400 <= result.status < 500:
                rules = RobotsRules(RobotsStatus.NONE, time.monotonic())
            else:
                reason = f"HTTP {result.status}"
                rules = RobotsRules(RobotsStatus.UNREACHABLE, time.monotonic(), reason=reason)
        asked = rules.delay(self.product_token)
        if 0.0 < asked <= self.config.max_crawl_delay:
            self._politeness(url.host)[1].ask_at_least(asked, answered_at=time.monotonic())
        self.stats.robots_fetches[rules.status] += 1
        self.stats.robots_by_host[url.host] = rules.status
        if rules.status is RobotsStatus.UNREACHABLE:
            self.stats.robots_unanswered[url.host] = unanswered or rules.reason
        else:
            self.stats.robots_unanswered.pop(url.host, None)
        return rules

    async def _fetch_one(
        self, url: httpx.URL, body_limit: int | None, sent: _Sent
    ) -> tuple[int, Mapping[str, str], bytes]:
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
                return await self._attempt(url, body_limit, sent)
        raise FetchFailed("no attempt made")

    def _wait(self, state: RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome else None
        if isinstance(error, _Retryable) and error.retry_after is not None:
            return 0.0  # the host is paused for every task: its next turn waits
        return float(self.config.backoff_base * 2 ** (state.attempt_number - 1))

    async def _attempt(
        self, url: httpx.URL, body_limit: int | None, sent: _Sent
    ) -> tuple[int, Mapping[str, str], bytes]:
        assert self._client is not None, "use Fetcher as an async context manager"
        host = url.host
        slot, pace = self._politeness(host)
        waiting_since = time.monotonic()
        async with slot, pace.request():
            started = time.monotonic()
            waits = self.stats.politeness_wait_seconds
            waits[host] = waits.get(host, 0.0) + started - waiting_since
            self.stats.requests += 1
            self.stats.by_host[host] += 1
            sent.requests += 1
            try:
                async with asyncio.timeout(self.config.timeout):
                    status, headers, body = await self._read(url, pace, body_limit)
            except TimeoutError:
                pace.struggled()
                raise _Retryable(
                    f"timed out after {self.config.timeout:g}s", kind="timed out"
                ) from None
            except httpx.HTTPError as error:
                pace.struggled()
                raise _Retryable(f"transport error: {type(error).__name__}") from None
            except (httpx.InvalidURL, ValueError) as error:
                # The URL was checked: the client choked on the response, such as a
                # redirect Location it cannot parse while it prepares the next request.
                raise FetchFailed(
                    f"malformed response: {type(error).__name__}: {error}"[:200],
                    "malformed response",
                ) from None
            finally:
                self.stats.delay_by_host[host] = pace.delay
            pace.answered(time.monotonic() - started, 200 <= status < 300)
            self.stats.delay_by_host[host] = pace.delay
            return status, headers, body

    async def _read(
        self, url: httpx.URL, pace: HostPace, body_limit: int | None
    ) -> tuple[int, Mapping[str, str], bytes]:
        assert self._client is not None
        async with self._client.stream("GET", url) as response:
            status = response.status_code
            if status in (429, 503):
                retry_after = _retry_after_seconds(response.headers.get("retry-after"))
                if retry_after is not None and retry_after > self.config.max_retry_after:
                    self._defer(url.host, retry_after)
                    raise FetchFailed(
                        f"HTTP {status}, Retry-After {retry_after:.0f}s too long",
                        "Retry-After too long",
                    )
                if retry_after is not None:
                    self.stats.deferred_seconds += pace.pause(retry_after)
                pace.struggled()
                raise _Retryable(f"HTTP {status}", retry_after)
            if status >= 500:
                pace.struggled()
                raise _Retryable(f"HTTP {status}")
            decoder = BoundedDecoder(
                response.headers.get("content-encoding", ""),
                body_limit or self.config.max_bytes,
                truncate=body_limit is not None,
            )
            chunks: list[bytes] = []
            async for raw in response.aiter_raw():
                chunks.append(decoder.feed(raw))
                if decoder.full:
                    break
            if not decoder.full:
                chunks.append(decoder.finish())
            headers = {key.lower(): value for key, value in response.headers.items()}
            return status, headers, b"".join(chunks)

    def _defer(self, host: str, seconds: float) -> None:
        """No task fetches ``host`` for ``seconds``: it asked for more than we wait."""
        now = time.monotonic()
        until = now + seconds
        before = max(self._deferred_until.get(host, 0.0), now)
        if until > before:
            self.stats.deferred_seconds += until - before
            self._deferred_until[host] = until


@dataclass(slots=True)
class _Sent:
    """The requests one fetch has sent so far."""

    requests: int = 0


def _client_url(url: str) -> httpx.URL:
    """``url`` as the HTTP client takes it; some hosts the WHATWG parser accepts, it refuses."""
    try:
        parsed = httpx.URL(url)
        if parsed.host:  # httpx decodes an IDNA host only when asked for it
            return parsed
    except (httpx.InvalidURL, ValueError) as error:
        raise FetchFailed(
            f"URL refused by the HTTP client: {error}"[:200], "URL refused by the HTTP client"
        ) from None
    raise FetchFailed("URL refused by the HTTP client: no host", "URL refused by the HTTP client")


def _redirect_target(url: httpx.URL, location: str) -> str:
    try:
        return str(url.join(location))
    except (httpx.InvalidURL, ValueError) as error:
        raise FetchFailed(
            f"malformed redirect Location: {error}"[:200], "malformed redirect Location"
        ) from None
