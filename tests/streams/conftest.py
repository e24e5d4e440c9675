"""Fixtures of the stream tests: a tiny web whose behaviour can change, and Kafka access."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from streams.localbroker import LocalBroker


@dataclass
class DriftingSite:
    """``/p?id=N`` pages on ``drift.test``; ``ref`` is tracking noise until ``ref_matters``;
    ``lang`` is shown, ``default_lang`` when absent, and so is ``start`` (``0``). With
    ``wall`` every URL shows the same login wall (but for a request number, which is
    noise); with ``ids_ignored`` every ``id`` shows item 0; with ``down`` every answer is
    503."""

    ref_matters: bool = False
    wall: bool = False
    ids_ignored: bool = False
    down: bool = False
    default_lang: str = "en"
    requests: int = 0
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
            return 200, ("<html><head><title>Members only</title></head>"
                         "<body><main><h1>Sign in to continue</h1></main>"
                         f"<footer>Request {self.requests}</footer></body></html>").encode()
        query = parse_qs(parts.query)
        item = "0" if self.ids_ignored else query.get("id", ["0"])[0]
        ref = query.get("ref", ["none"])[0]
        lang = query.get("lang", [self.default_lang])[0]
        start = query.get("start", ["0"])[0]
        extra = f"<p class='edition'>Edition {ref}</p>" if self.ref_matters else ""
        html = (f"<html><head><title>Item {item}</title></head><body><main>"
                f"<h1>Item {item}</h1><p class='text'>Description of item {item}.</p>{extra}"
                f"<p class='lang'>Language: {lang}</p><p class='from'>From post {start}</p>"
                f"</main><footer>Drift Test Shop</footer></body></html>")
        return 200, html.encode()


class _ProxyHandler(BaseHTTPRequestHandler):
    site: DriftingSite

    def do_GET(self) -> None:
        status, body = self.site.page(self.path)
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def drifting_web() -> Iterator[tuple[DriftingSite, str]]:
    """A loopback HTTP proxy that serves :class:`DriftingSite`; yields it and the proxy URL."""
    site = DriftingSite()
    handler = type("Handler", (_ProxyHandler,), {"site": site})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield site, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture(scope="session")
def bootstrap() -> str:
    """The test broker (scripts/test starts it); Kafka tests fail fast without it."""
    servers = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    from confluent_kafka.admin import AdminClient

    try:
        AdminClient({"bootstrap.servers": servers, "log_level": 0}).list_topics(timeout=10)
    except Exception as error:
        pytest.fail(f"no Kafka broker at {servers} (run scripts/kafka-local start): {error}")
    return servers


@pytest.fixture(scope="module")
def private_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    """A broker of this module's own (free ports, temporary home) that its tests may stop
    and start; always stopped at the end. The shared broker is never touched."""
    broker = LocalBroker(tmp_path_factory.mktemp("private-kafka"))
    try:
        yield broker.start()
    finally:
        broker.stop()
