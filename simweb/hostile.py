"""A loopback HTTP server that answers with the hostile responses of issue 9.

Every route ignores its query, so a URL list can point many URLs (with parameters for the
learner to probe) at each response::

    with HostileWeb() as web:
        urls = web.hostile_urls(per_route=4)

Routes (``HostileWeb.ROUTES``): compression bombs (1 GiB ``gzip``, 1 GiB ``gzip, gzip``, 4
GiB ``gzip, gzip``), deeply nested ``<div>`` pages, random bytes served as ``text/html``,
malformed ``Retry-After`` values, malformed redirect ``Location`` values and a slow body.
``/benign`` is a plain product page whose content follows its ``item`` parameter: a
baseline of the same size and shape for comparisons.
"""

from __future__ import annotations

import random
import struct
import threading
import time
import zlib
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from urllib.parse import parse_qs, urlsplit

MIB = 1 << 20
GIB = 1 << 30

Answer = tuple[int, list[tuple[str, str]], bytes]

_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"


def gzip_bomb(decoded_size: int) -> bytes:
    """One gzip member that inflates to ``decoded_size`` zero bytes (a whole number of MiB).

    Built from one compressed MiB repeated: a full flush resets the compressor, so every
    MiB compresses to the same bytes, and only the CRC needs the whole length.
    """
    if decoded_size <= 0 or decoded_size % MIB:
        raise ValueError("decoded_size must be a positive whole number of MiB")
    zeros = bytes(MIB)
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    block = compressor.compress(zeros) + compressor.flush(zlib.Z_FULL_FLUSH)
    end = compressor.flush(zlib.Z_FINISH)
    crc = 0
    for _ in range(decoded_size // MIB):
        crc = zlib.crc32(zeros, crc)
    trailer = struct.pack("<II", crc, decoded_size & 0xFFFFFFFF)
    return _GZIP_HEADER + block * (decoded_size // MIB) + end + trailer


def gzip_once(data: bytes) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


def nested_divs(depth: int) -> bytes:
    return (
        b"<!doctype html><html><body>"
        + b"<div>" * depth
        + b"deep"
        + b"</div>" * depth
        + b"</body></html>"
    )


def benign_page(item: str) -> bytes:
    rows = "".join(f"<li>feature {n} of item {item}</li>" for n in range(40))
    return (
        f"<!doctype html><html><head><title>Item {item}</title></head><body>"
        f"<h1>Item {item}</h1><ul>{rows}</ul></body></html>"
    ).encode()


def _html(body: bytes, *headers: tuple[str, str]) -> Answer:
    return 200, [("Content-Type", "text/html; charset=utf-8"), *headers], body


class HostileWeb:
    """Serve the hostile routes on loopback; ``bomb_size`` scales the 1 GiB bombs (the 4
    GiB one is four times it), so tests can use small ones."""

    ROUTES = (
        "gzip-bomb",
        "gzip-gzip-bomb",
        "gzip-gzip-bomb-4x",
        "nested-divs-40k",
        "nested-divs-100k",
        "random-bytes",
        "retry-after-superscript",
        "retry-after-circled",
        "retry-after-huge",
        "redirect-idna",
        "redirect-slashes",
        "redirect-bad-escape",
        "slow-body",
    )

    def __init__(self, *, bomb_size: int = GIB, slow_seconds: float = 60.0, seed: int = 9) -> None:
        self.slow_seconds = slow_seconds
        bomb = gzip_bomb(bomb_size)
        big_bomb = gzip_bomb(4 * bomb_size)
        gzip_header = ("Content-Encoding", "gzip")
        stacked_header = ("Content-Encoding", "gzip, gzip")
        self._answers: dict[str, Answer] = {
            "gzip-bomb": _html(bomb, gzip_header),
            "gzip-gzip-bomb": _html(gzip_once(bomb), stacked_header),
            "gzip-gzip-bomb-4x": _html(gzip_once(big_bomb), stacked_header),
            "nested-divs-40k": _html(nested_divs(40_000)),
            "nested-divs-100k": _html(nested_divs(100_000)),
            "random-bytes": _html(random.Random(seed).randbytes(3 * MIB)),
            "retry-after-superscript": (503, [("Retry-After", "\u00b2")], b"busy"),
            "retry-after-circled": (503, [("Retry-After", "\u2460")], b"busy"),
            "retry-after-huge": (503, [("Retry-After", "9" * 400)], b"busy"),
            "redirect-idna": (302, [("Location", "http://xn--/")], b""),
            "redirect-slashes": (302, [("Location", "https:////~0::1")], b""),
            "redirect-bad-escape": (302, [("Location", "https:////[%zz")], b""),
        }
        self.requests: dict[str, int] = dict.fromkeys((*self.ROUTES, "benign"), 0)
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def hostile_urls(self, per_route: int) -> list[str]:
        return [
            f"{self.base_url}/{route}?item={n}&ref=r{n}"
            for route in self.ROUTES
            for n in range(per_route)
        ]

    def benign_urls(self, count: int) -> list[str]:
        return [f"{self.base_url}/benign?item={n % 7}&ref=r{n}" for n in range(count)]

    def __enter__(self) -> HostileWeb:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _answer(self, path: str, query: str) -> Answer | Callable[[BaseHTTPRequestHandler], None]:
        route = path.strip("/")
        with self._lock:
            if route in self.requests:
                self.requests[route] += 1
        if route == "slow-body":
            return self._dribble
        if route in self._answers:
            return self._answers[route]
        item = parse_qs(query).get("item", ["0"])[0][:40]
        return _html(benign_page(item))

    def _dribble(self, handler: BaseHTTPRequestHandler) -> None:
        """Promise a megabyte and send a byte every half second, until the client leaves."""
        handler.send_response(200)
        handler.send_header("Content-Type", "text/html")
        handler.send_header("Content-Length", str(MIB))
        handler.end_headers()
        deadline = time.monotonic() + self.slow_seconds
        while time.monotonic() < deadline:
            handler.wfile.write(b"<")
            handler.wfile.flush()
            time.sleep(0.5)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        web = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                target = urlsplit(self.path)
                answer = web._answer(target.path, target.query)
                try:
                    if callable(answer):
                        answer(self)
                        return
                    status, headers, body = answer
                    # Raw bytes: http.server would refuse a header value outside latin-1.
                    lines = [
                        f"HTTP/1.1 {status} Hostile",
                        *(f"{n}: {v}" for n, v in headers),
                        f"Content-Length: {len(body)}",
                        "Connection: close",
                        "",
                        "",
                    ]
                    self.wfile.write("\r\n".join(lines).encode() + body)
                except OSError:  # the client gave up, as it should on a hostile answer
                    return

            def log_message(self, format: str, *args: object) -> None:
                return

        return Handler
