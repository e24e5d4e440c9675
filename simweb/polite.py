"""Sites that ask something of a crawler, and count whether it was done.

A loopback HTTP proxy (point a client's proxy at :attr:`PoliteWeb.proxy_url`) plays each
site of :data:`SITES` by its host name. Every site counts what it receives, so tests and
benchmarks can check, at the server, that nothing was fetched that should not have been:

- ``open.polite.test``: a robots.txt that allows everything;
- ``private.polite.test``: ``Disallow: /account/`` for every crawler, ``Disallow: /staff/``
  for miqps alone;
- ``spaced.polite.test``: ``Crawl-delay`` of :attr:`PoliteWeb.crawl_delay` seconds;
- ``broken.polite.test``: robots.txt answers 503;
- ``moved.polite.test``: robots.txt redirects to ``/rules/robots.txt``, which disallows
  ``/account/``;
- ``greedy.polite.test``: ``Crawl-delay: 3600``, more than a careful crawler waits;
- ``busy.polite.test``: no robots.txt (404); answers 429 with ``Retry-After`` when two
  requests come within :attr:`PoliteWeb.busy_window` seconds, and counts the requests that
  arrive while a Retry-After it sent is in force;
- ``slow.polite.test``: no robots.txt; every page takes :attr:`PoliteWeb.slow_seconds`.

Pages show the value of ``id`` (so it matters) and nothing of any other parameter.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from urllib.parse import parse_qs, urlsplit

ROBOTS: dict[str, str] = {
    "open.polite.test": "User-agent: *\nDisallow:\n",
    "private.polite.test": (
        "User-agent: *\nDisallow: /account/\n\nUser-agent: miqps\nDisallow: /account/\n"
        "Disallow: /staff/\n"
    ),
    "spaced.polite.test": "User-agent: *\nCrawl-delay: {crawl_delay}\n",
    "moved.polite.test": "",
    "greedy.polite.test": "User-agent: *\nCrawl-delay: 3600\n",
}
MOVED_RULES = "User-agent: *\nDisallow: /account/\n"
SITES = (
    "open.polite.test",
    "private.polite.test",
    "spaced.polite.test",
    "broken.polite.test",
    "moved.polite.test",
    "greedy.polite.test",
    "busy.polite.test",
    "slow.polite.test",
)


@dataclass(slots=True)
class SiteLog:
    """What one site received."""

    paths: Counter[str] = field(default_factory=Counter)
    agents: Counter[str] = field(default_factory=Counter)
    arrivals: list[float] = field(default_factory=list)
    """Monotonic arrival time of every request but robots.txt."""
    during_retry_after: int = 0
    retry_after_until: float = 0.0

    @property
    def pages(self) -> int:
        """Requests for anything but robots.txt."""
        return len(self.arrivals)

    def under(self, prefix: str) -> int:
        return sum(count for path, count in self.paths.items() if path.startswith(prefix))

    def shortest_gap(self) -> float:
        gaps = [b - a for a, b in itertools.pairwise(self.arrivals)]
        return min(gaps) if gaps else float("inf")


class PoliteWeb:
    """Serve :data:`SITES` on loopback as a proxy. Use as a context manager."""

    def __init__(
        self,
        *,
        crawl_delay: float = 1.0,
        retry_after: int = 2,
        busy_window: float = 0.5,
        slow_seconds: float = 0.3,
    ) -> None:
        self.crawl_delay = crawl_delay
        self.retry_after = retry_after
        self.busy_window = busy_window
        self.slow_seconds = slow_seconds
        self.logs = {site: SiteLog() for site in SITES}
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    def __enter__(self) -> PoliteWeb:
        web = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                web.handle(self)

            def log_message(self, format: str, *args: object) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def proxy_url(self) -> str:
        assert self._server is not None, "use PoliteWeb as a context manager"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def log(self, site: str) -> SiteLog:
        return self.logs[site]

    def handle(self, handler: BaseHTTPRequestHandler) -> None:
        target = urlsplit(handler.path)
        host = (target.hostname or handler.headers.get("Host") or "").lower()
        path = target.path or "/"
        log = self.logs.get(host)
        if log is None:
            _send(handler, 502, b"unknown host\n")
            return
        now = time.monotonic()
        with self._lock:
            log.paths[path] += 1
            log.agents[handler.headers.get("User-Agent", "")] += 1
            if path != "/robots.txt":
                previous = log.arrivals[-1] if log.arrivals else None
                log.arrivals.append(now)
                if host == "busy.polite.test":
                    if now < log.retry_after_until:
                        log.during_retry_after += 1
                    if previous is not None and now - previous < self.busy_window:
                        log.retry_after_until = now + self.retry_after
                        retry = str(self.retry_after)
                        _send(handler, 429, b"slow down\n", [("Retry-After", retry)])
                        return
        if path in ("/robots.txt", "/rules/robots.txt"):
            self._robots(handler, host, path)
            return
        if host == "slow.polite.test":
            time.sleep(self.slow_seconds)
        item = parse_qs(target.query).get("id", ["none"])[0]
        body = (
            f"<html><head><title>{host}{path}</title></head><body><main><h1>Item {item}"
            f"</h1><p>{'The page of this item, described at length. ' * 6}</p></main>"
            "</body></html>"
        ).encode()
        _send(handler, 200, body, [("Content-Type", "text/html; charset=utf-8")])

    def _robots(self, handler: BaseHTTPRequestHandler, host: str, path: str) -> None:
        if host == "broken.polite.test":
            _send(handler, 503, b"robots.txt is down\n")
        elif host == "moved.polite.test" and path == "/robots.txt":
            _send(handler, 301, b"", [("Location", "/rules/robots.txt")])
        elif host == "moved.polite.test":
            _send(handler, 200, MOVED_RULES.encode(), [("Content-Type", "text/plain")])
        elif host in ROBOTS and path == "/robots.txt":
            text = ROBOTS[host].format(crawl_delay=f"{self.crawl_delay:g}")
            _send(handler, 200, text.encode(), [("Content-Type", "text/plain")])
        else:
            _send(handler, 404, b"no robots.txt\n")


def _send(
    handler: BaseHTTPRequestHandler,
    status: int,
    body: bytes,
    headers: list[tuple[str, str]] | None = None,
) -> None:
    handler.send_response(status)
    for name, value in headers or []:
        handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)
