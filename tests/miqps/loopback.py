"""Loopback servers for tests: raw listeners that count connections, and HTML answers."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from html import escape
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

NO_ROBOTS_TXT = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class CountingListener:
    """Accepts connections on 127.0.0.1, counts them and answers each with ``response``;
    with ``read_request``, a request for ``/robots.txt`` gets a 404 (no rules) instead."""

    def __init__(
        self,
        response: bytes = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
        *,
        read_request: bool = False,
    ) -> None:
        self.response = response
        self.read_request = read_request
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            with conn:
                conn.settimeout(1.0)
                try:
                    if self.read_request and conn.recv(65536).startswith(b"GET /robots.txt "):
                        conn.sendall(NO_ROBOTS_TXT)  # so the answer under test is the page's
                    else:
                        conn.sendall(self.response)
                    conn.shutdown(socket.SHUT_WR)
                except OSError:
                    continue

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()


def send_html(handler: BaseHTTPRequestHandler, status: int, body: bytes) -> None:
    """Answer a test server's request with an HTML page."""
    handler.send_response(status)
    handler.send_header("Content-Type", "text/html")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A threading HTTP server on loopback for ``handler``: yields its URL (to use as the
    fetcher's proxy) once, then shuts it down."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class AliasShop(BaseHTTPRequestHandler):
    """Products under ``/p?id=N``, ``/p?pid=N`` or both (aliases); ``/p`` without either
    is the home page."""

    @staticmethod
    def page(url: str) -> str:
        """The page ``url`` shows: a product number, or ``home``."""
        query = dict(parse_qsl(urlsplit(url).query))
        return query.get("id") or query.get("pid") or "home"

    def do_GET(self) -> None:
        item = self.page(self.path)
        title = "Welcome to our shop" if item == "home" else f"Product {escape(item)}"
        send_html(
            self, 200, f"<html><body><h1>{title}</h1><p>Fine goods.</p></body></html>".encode()
        )

    def log_message(self, format: str, *args: object) -> None:
        return
