"""A tiny web whose behaviour can change, served by a loopback HTTP proxy."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


@dataclass
class DriftingSite:
    """``/p?id=N`` pages on ``drift.test``; ``ref`` is tracking noise until ``ref_matters``;
    ``lang`` is shown, ``default_lang`` when absent, and so is ``start`` (``0``). With
    ``wall`` every URL shows the same login wall (but for a request number, which is
    noise); with ``promo`` every page shows an offer that changes at every request; with
    ``ids_ignored`` every ``id`` shows item 0; with ``down`` every answer is 503.
    ``fetched`` lists the URLs asked of the proxy, in order."""

    ref_matters: bool = False
    wall: bool = False
    ids_ignored: bool = False
    down: bool = False
    promo: bool = False
    default_lang: str = "en"
    requests: int = 0
    fetched: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def page(self, url: str) -> tuple[int, bytes]:
        with self.lock:
            self.requests += 1
        parts = urlsplit(url)
        if parts.hostname != "drift.test":
            return 404, b"<html><body>unknown host</body></html>"
        if self.down:
            return 503, b"<html><body>maintenance</body></html>"
        if self.wall:
            return 200, (
                "<html><head><title>Members only</title></head>"
                "<body><main><h1>Sign in to continue</h1></main>"
                f"<footer>Request {self.requests}</footer></body></html>"
            ).encode()
        query = parse_qs(parts.query)
        item = "0" if self.ids_ignored else query.get("id", ["0"])[0]
        ref = query.get("ref", ["none"])[0]
        lang = query.get("lang", [self.default_lang])[0]
        start = query.get("start", ["0"])[0]
        extra = f"<p class='edition'>Edition {ref}</p>" if self.ref_matters else ""
        promo = f"<aside class='promo'>Offer {self.requests}</aside>" if self.promo else ""
        html = (
            f"<html><head><title>Item {item}</title></head><body><main>"
            f"<h1>Item {item}</h1><p class='text'>Description of item {item}.</p>{extra}"
            f"<p class='lang'>Language: {lang}</p><p class='from'>From post {start}</p>"
            f"</main>{promo}<footer>Drift Test Shop</footer></body></html>"
        )
        return 200, html.encode()


class _ProxyHandler(BaseHTTPRequestHandler):
    site: DriftingSite

    def do_GET(self) -> None:
        with self.site.lock:
            self.site.fetched.append(self.path)
        status, body = self.site.page(self.path)
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def serve_drifting() -> Iterator[tuple[DriftingSite, str]]:
    """A loopback HTTP proxy that serves :class:`DriftingSite`; yields it and the proxy URL."""
    site = DriftingSite()
    handler = type("Handler", (_ProxyHandler,), {"site": site})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield site, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
