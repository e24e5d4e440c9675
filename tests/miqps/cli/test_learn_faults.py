"""``miqps learn`` when nothing can be reached, and the true cause of what is left
undecided: real processes against real loopback servers."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest

from tests.miqps.cli.support import run
from tests.miqps.loopback import send_html, serve

pytestmark = pytest.mark.timeout(60)


def _closed_port() -> int:
    """A loopback port nothing listens on: connections to it are refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _learn(tmp_path: Path, urls: list[str], *extra: str) -> tuple[int, str, str, Path]:
    listed = tmp_path / "urls.txt"
    listed.write_text("\n".join(urls) + "\n", encoding="utf-8")
    out = tmp_path / "maps.jsonl"
    result = run("learn", "--urls", str(listed), "--out", str(out), "--no-progress", *extra)
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, result.stdout, result.stderr, out


def _undecided(out: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in out.read_text(encoding="utf-8").splitlines():
        found.update(json.loads(line).get("undecided", {}))
    return found


SHOP_URLS = [f"http://shop.example/p/{n}?id={n}&utm_source=s{n}" for n in range(6)]


@pytest.mark.slow
def test_a_dead_proxy_exits_3_and_names_the_proxy(tmp_path: Path) -> None:
    proxy = f"http://127.0.0.1:{_closed_port()}"
    code, summary, errors, out = _learn(tmp_path, SHOP_URLS, "--proxy", proxy, "--rate", "50")
    assert code == 3, summary + errors
    assert "nothing could be decided" in errors
    assert f"the proxy {proxy}" in errors and "ConnectError" in errors, errors
    assert "robots.txt of 1 host did not answer: transport error: ConnectError" in summary
    assert _undecided(out) == {"/p/*?id&utm_source": "robots-unreachable"}


class _BadGateway(BaseHTTPRequestHandler):
    """A working proxy that reaches no host: 502 for every request, as for an unknown
    name."""

    def do_GET(self) -> None:
        send_html(self, 502, b"<html><body>cannot reach the host</body></html>")

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def bad_gateway() -> Iterator[str]:
    yield from serve(_BadGateway)


@pytest.mark.slow
def test_a_proxy_answering_502_exits_3_and_names_the_proxy(
    tmp_path: Path, bad_gateway: str
) -> None:
    code, summary, errors, _ = _learn(tmp_path, SHOP_URLS, "--proxy", bad_gateway, "--rate", "50")
    assert code == 3, summary + errors
    assert f"the proxy {bad_gateway}" in errors and "HTTP 502" in errors, errors
    assert "robots.txt of 1 host did not answer: HTTP 502" in summary


@pytest.mark.slow
def test_a_closed_port_exits_3(tmp_path: Path) -> None:
    port = _closed_port()
    urls = [f"http://127.0.0.1:{port}/p/{n}?id={n}&utm_source=s{n}" for n in range(6)]
    code, summary, errors, _ = _learn(tmp_path, urls, "--allow-private", "--rate", "50")
    assert code == 3, summary + errors
    assert "nothing could be decided" in errors and "ConnectError" in errors
    assert "through the proxy" not in errors, "no proxy was used"


class _TerseShop(BaseHTTPRequestHandler):
    """``/p?id=N`` is item N; ``/p`` without ``id`` is a terse 404 (a script and one line:
    evidence of nothing); no robots.txt."""

    def do_GET(self) -> None:
        target = urlsplit(self.path)
        if target.path == "/robots.txt":
            send_html(self, 404, b"")
            return
        item = dict(parse_qsl(target.query)).get("id")
        if item is None:
            send_html(self, 404, b"<script src='/e.js'></script><p>Missing item.</p>")
            return
        words = " ".join(f"item {item} detail {n}" for n in range(20))
        send_html(self, 200, f"<html><body><h1>{item}</h1><p>{words}</p></body></html>".encode())

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def terse_shop() -> Iterator[str]:
    yield from serve(_TerseShop)


def test_a_parameter_whose_removal_shows_a_terse_404_is_kept_and_not_asked_again(
    tmp_path: Path, terse_shop: str
) -> None:
    urls = [f"http://terse.example/p?id={n}" for n in range(8)]
    code, summary, errors, out = _learn(tmp_path, urls, "--proxy", terse_shop, "--rate", "200")
    assert code == 0, summary + errors
    assert "every fetch failed" not in summary and "0 failed" in summary
    assert "patterns: 1 decided" in summary, summary
    [document] = [json.loads(line) for line in out.read_text().splitlines()]
    assert document["patterns"]["/p?id"]["kept"] == ["id"]
    assert document.get("undecided", {}) == {}
    code, again, _, _ = _learn(tmp_path, urls, "--proxy", terse_shop, "--rate", "200")
    assert code == 0 and "fetches: 0 " in again and "1 already in the map" in again, again
