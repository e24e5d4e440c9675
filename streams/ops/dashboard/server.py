"""The dashboard's HTTP side: one page (``streams/ops/assets/dashboard.*``: plain HTML, JS
and inline SVG, with the report's styles and explain view) and a small JSON API behind it,
from the standard library's threading HTTP server."""

from __future__ import annotations

import logging
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson

from streams.ops.dashboard.state import DOMAIN_ROWS, DashboardState

log = logging.getLogger(__name__)

DEFAULT_PORT = 8050
ASSETS = {
    "/": ("dashboard.html", "text/html"),
    "/dashboard.js": ("dashboard.js", "text/javascript"),
    "/dashboard.css": ("dashboard.css", "text/css"),
    "/report.css": ("report.css", "text/css"),
    "/report.explain.js": ("report.explain.js", "text/javascript"),
}
CSP = (
    "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'"
)


def _asset(name: str) -> bytes:
    """The dashboard's own files, or the report's styles and explain view it shares."""
    if name.startswith("report."):
        return resources.files("miqps").joinpath(f"data/{name}").read_bytes()
    return resources.files("streams.ops").joinpath(f"assets/{name}").read_bytes()


def _first(query: dict[str, list[str]], name: str, default: str = "") -> str:
    values = query.get(name)
    return values[0] if values else default


def _number(text: str, default: int) -> int:
    try:
        return max(int(text), 0)
    except ValueError:
        return default


class DashboardServer:
    """The page and its JSON API on ``host:port`` (port 0: any free port), in a thread."""

    def __init__(
        self, state: DashboardState, host: str = "127.0.0.1", port: int = DEFAULT_PORT
    ) -> None:
        self.state = state
        handler = type("Handler", (_Handler,), {"state": state})
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},  # stop() returns within 50 ms
            name="miqps-dashboard-http",
            daemon=True,
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/"

    def start(self) -> DashboardServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5.0)


class _Handler(BaseHTTPRequestHandler):
    state: DashboardState
    server_version = "miqps-dashboard"

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        asset = ASSETS.get(parts.path)
        if asset is not None:
            name, kind = asset
            self._send(HTTPStatus.OK, _asset(name), f"{kind}; charset=utf-8")
            return
        api = self._api(parts.path, query)
        if api is None:
            self._json(HTTPStatus.NOT_FOUND, {"error": f"no such page: {parts.path}"})
        else:
            self._json(*api)

    def _api(
        self,
        path: str,
        query: dict[str, list[str]],
    ) -> tuple[HTTPStatus, Any] | None:
        state = self.state
        if path == "/api/summary":
            return HTTPStatus.OK, state.summary()
        if path == "/api/domains":
            return HTTPStatus.OK, state.domains(
                _first(query, "filter"), _number(_first(query, "limit"), DOMAIN_ROWS)
            )
        if path == "/api/domain":
            name = _first(query, "name")
            view = state.domain(name)
            if view is None:
                return HTTPStatus.NOT_FOUND, {"error": f"no map and no URL of {name!r} yet"}
            return HTTPStatus.OK, view
        if path == "/api/feed":
            return HTTPStatus.OK, state.feed(_number(_first(query, "after"), 0))
        if path == "/api/explain":
            if "url" not in query:
                return HTTPStatus.BAD_REQUEST, {"error": "give the URL as ?url="}
            return HTTPStatus.OK, state.explain(_first(query, "url"))
        if path == "/api/plots":
            return HTTPStatus.OK, state.plots()
        return None

    def _json(self, status: HTTPStatus, body: Any) -> None:
        self._send(status, orjson.dumps(body), "application/json")

    def _send(self, status: HTTPStatus, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("dashboard http: " + format, *args)
