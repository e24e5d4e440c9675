"""A loopback HTTP proxy that plays every simulated site itself."""

from __future__ import annotations

import contextlib
import hashlib
import random
import socket
import threading
import time
from collections import Counter, deque
from collections.abc import Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import cast

from simweb.challenge import client_shell, interstitial
from simweb.render import render_document, render_main
from simweb.resolve import Page, normalize_host, resolve, split_target
from simweb.sites import Interstitial, PageKind, Rendering, Site

_MAX_CACHED_PAGES = 50_000
_FAILURES: tuple[tuple[int, list[tuple[str, str]]], ...] = (
    (503, [("Retry-After", "1")]),
    (503, []),
    (500, []),
)


class SimWeb:
    """Serve ``sites`` on loopback; point an HTTP client's proxy at ``proxy_url``.

    ``rate_limit_per_second`` <= 0 or infinite disables the 429 answers; ``flaky_rate`` is
    the fraction of page requests answered with a 5xx (robots.txt always answers), chosen by
    a seeded hash of the URL and of how often it has been fetched; routes marked ``hang``
    answer after ``hang_seconds``.
    With ``interstitials``, sites that have them answer their ``interstitial_rate`` of
    requests (drawn the same way) with a challenge or consent page instead.
    """

    def __init__(
        self,
        sites: Sequence[Site],
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        rate_limit_per_second: float = 50.0,
        flaky_rate: float = 0.02,
        hang_seconds: float = 30.0,
        seed: int = 0,
        interstitials: bool = True,
    ) -> None:
        self.sites: dict[str, Site] = {}
        for site in sites:
            if site.host in self.sites:
                raise ValueError(f"duplicate host {site.host}")
            self.sites[site.host] = site
        self.rate_limit_per_second = rate_limit_per_second
        self.flaky_rate = flaky_rate
        self.hang_seconds = hang_seconds
        self.seed = seed
        self.interstitials = interstitials
        self._bind = (host, port)
        self._lock = threading.Lock()
        self._total = 0
        self._by_host: Counter[str] = Counter()
        self._windows: dict[str, deque[float]] = {}
        self._fetches: Counter[str] = Counter()
        self._fetches_at_reset: Counter[str] = Counter()
        self._pages: dict[str, str] = {}
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        if self._server is None:
            raise RuntimeError("SimWeb is not started")
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    @property
    def proxy_url(self) -> str:
        host, port = self.address
        return f"http://{host}:{port}"

    def start(self) -> SimWeb:
        if self._server is not None:
            raise RuntimeError("SimWeb is already started")
        self._stopping.clear()
        self._server = _Server(self._bind, self)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"simweb:{self.address[1]}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, thread = self._server, self._thread
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        server.server_close()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if thread is not None:
            thread.join(timeout=5)
        self._server = None
        self._thread = None

    def __enter__(self) -> SimWeb:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def requests_total(self) -> int:
        with self._lock:
            return self._total

    def requests_by_host(self) -> dict[str, int]:
        with self._lock:
            return dict(self._by_host)

    def reset_counters(self) -> None:
        with self._lock:
            self._total = 0
            self._by_host.clear()
            self._fetches_at_reset = self._fetches.copy()

    def repeated_requests(self) -> int:
        """Requests since :meth:`reset_counters` for a URL already asked for since then: a
        prober learning noise or confirming a change, or a later run asking for it again."""
        with self._lock:
            since = self._fetches - self._fetches_at_reset
        return sum(count - 1 for count in since.values())

    def _track(self, conn: socket.socket, add: bool) -> None:
        with self._lock:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    def _admit(self, host: str, url: str) -> tuple[bool, int]:
        """Count the request; return (within the rate limit, earlier fetches of ``url``)."""
        now = time.monotonic()
        limit = self.rate_limit_per_second
        with self._lock:
            self._total += 1
            self._by_host[host] += 1
            if 0 < limit < float("inf"):
                window = self._windows.setdefault(host, deque())
                while window and window[0] <= now - 1.0:
                    window.popleft()
                if len(window) >= limit:
                    return False, 0
                window.append(now)
            fetches = self._fetches[url]
            self._fetches[url] = fetches + 1
        return True, fetches

    def _draw(self, url: str, fetches: int, salt: str) -> bytes:
        """Random bytes for this fetch of ``url``: the same in every run with this seed."""
        text = f"{self.seed}|{fetches}|{url}{salt}"
        return hashlib.blake2b(text.encode(), digest_size=16).digest()

    def _flaky(self, url: str, fetches: int) -> tuple[int, list[tuple[str, str]]] | None:
        if self.flaky_rate <= 0:
            return None
        digest = self._draw(url, fetches, "")
        if int.from_bytes(digest[:8], "big") / 2**64 >= self.flaky_rate:
            return None
        return _FAILURES[digest[8] % len(_FAILURES)]

    def _interstitial(self, site: Site, url: str, fetches: int) -> Interstitial | None:
        if not self.interstitials or site.interstitial_rate <= 0 or not site.interstitials:
            return None
        digest = self._draw(url, fetches, "|challenge")
        if int.from_bytes(digest[:8], "big") / 2**64 >= site.interstitial_rate:
            return None
        return site.interstitials[digest[8] % len(site.interstitials)]

    def document(
        self,
        site: Site,
        page: Page,
        main: str,
        echo: Sequence[tuple[str, str]],
        rng: random.Random,
        request_url: str,
    ) -> str:
        """The HTML of one fetch of ``page`` (a hook for modes that add to it)."""
        return render_document(site, page, main, echo, rng, request_url)

    def handle(self, handler: _Handler, head: bool) -> None:
        target = handler.path
        try:
            if target.startswith("/"):
                host = normalize_host(handler.headers.get("Host", ""))
                path, _, query = target.partition("?")
                query = query.split("#", 1)[0]
            else:
                host, path, query = split_target(target)
        except ValueError:
            with self._lock:
                self._total += 1
            _send(handler, 400, [], b"bad request target\n", head)
            return
        site = self.sites.get(host)
        if site is None:
            with self._lock:
                self._total += 1
            _send(handler, 502, [], f"simweb: unknown host {host}\n".encode(), head)
            return
        url = f"http://{host}{path}?{query}"
        allowed, fetches = self._admit(host, url)
        if not allowed:
            _send(handler, 429, [("Retry-After", "1")], b"Too many requests\n", head)
            return
        failure = None if path == "/robots.txt" else self._flaky(url, fetches)
        if failure is not None:
            status, headers = failure
            _send(handler, status, headers, f"{HTTPStatus(status).phrase}\n".encode(), head)
            return
        request_url = f"http://{host}{path}" + (f"?{query}" if query else "")
        # A page's noise is that of this fetch of this URL, whatever came before: two runs
        # that fetch a URL as often see the same pages, in whatever order their requests
        # interleave.
        rng = random.Random(self._draw(url, fetches, "|page"))
        challenge = self._interstitial(site, url, fetches)
        if challenge is not None:
            answer = interstitial(site, challenge, request_url, rng)
            _send(handler, answer.status, answer.headers, answer.html.encode(), head)
            return
        result = resolve(site, path, query)
        if result.location:
            body = f'<a href="{result.location}">Moved</a>\n'.encode()
            _send(handler, result.status, [("Location", result.location)], body, head)
            return
        page = result.page
        if page.route is not None and page.route.hang and self._stopping.wait(self.hang_seconds):
            handler.close_connection = True
            return
        headers = [("Content-Type", "text/html; charset=utf-8"), ("Cache-Control", "no-store")]
        if page.route is not None and page.route.rendering is Rendering.SHELL:
            _send(handler, result.status, headers, client_shell(site, rng).encode(), head)
            return
        main = self._pages.get(page.key)
        if main is None:
            main = render_main(site, page)
            if len(self._pages) >= _MAX_CACHED_PAGES:
                self._pages.clear()
            self._pages[page.key] = main
        html = self.document(site, page, main, result.echo, rng, request_url)
        if page.kind is PageKind.NOT_FOUND:
            headers.append(("X-Robots-Tag", "noindex"))
        _send(handler, result.status, headers, html.encode(), head)


def _send(
    handler: BaseHTTPRequestHandler,
    status: int,
    headers: list[tuple[str, str]],
    body: bytes,
    head: bool,
) -> None:
    names = {name for name, _ in headers}
    lines = [
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}",
        f"Date: {handler.date_time_string()}",
        f"Content-Length: {len(body)}",
    ]
    if "Server" not in names:
        lines.append("Server: SimWeb/1.0")
    if "Content-Type" not in names:
        lines.append("Content-Type: text/plain; charset=utf-8")
    lines.extend(f"{name}: {value}" for name, value in headers)
    if handler.close_connection:
        lines.append("Connection: close")
    data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    handler.wfile.write(data if head else data + body)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "SimWeb/1.0"
    disable_nagle_algorithm = True
    timeout = 30

    @property
    def web(self) -> SimWeb:
        return cast(_Server, self.server).web

    def setup(self) -> None:
        super().setup()
        self.web._track(self.connection, True)

    def finish(self) -> None:
        self.web._track(self.connection, False)
        with contextlib.suppress(OSError):
            super().finish()

    def handle(self) -> None:
        try:
            super().handle()
        except OSError:
            self.close_connection = True

    def do_GET(self) -> None:
        self.web.handle(self, head=False)

    def do_HEAD(self) -> None:
        self.web.handle(self, head=True)

    def _not_allowed(self) -> None:
        _send(self, 405, [("Allow", "GET, HEAD")], b"Method not allowed\n", False)

    do_CONNECT = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _not_allowed

    def log_message(self, format: str, *args: object) -> None:
        return


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 256

    def __init__(self, address: tuple[str, int], web: SimWeb) -> None:
        self.web = web
        super().__init__(address, _Handler)
