"""``miqps learn`` stopped in the middle of a domain, then run again: real processes against
a real loopback server that counts every request. The probes the interrupted run made are
served from its journal, so the rerun asks the server for nothing it was asked already,
and ends with the maps an uninterrupted run writes, evidence counts included."""

from __future__ import annotations

import hashlib
import json
import re
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from html import escape
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qsl, urlsplit

import pytest

from tests.miqps.cli.support import MIQPS, run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

HOSTS = ("shop.test", "tiny.test")
# Requests per second per host: shop.test takes about 15 s, tiny.test 2 s.
RATE = "10"


class _Shop(BaseHTTPRequestHandler):
    """A proxy playing two shops whose pages depend on the URL alone, but for a promotion
    that changes on every fetch of a product page (noise the learner has to learn by
    fetching pages again). ``/p?id=N`` is a product (``color`` shows on every third one),
    ``/list?page=N&sort=new|old`` a listing; every other parameter is tracking."""

    lock: ClassVar[threading.Lock] = threading.Lock()
    requests: ClassVar[Counter[str]] = Counter()
    """Every request since the last :func:`_reset`, by target."""
    visits: ClassVar[Counter[str]] = Counter()
    """Fetches of each target since the server started its current run."""

    def do_GET(self) -> None:
        with self.lock:
            self.requests[self.path] += 1
            self.visits[self.path] += 1
            visit = self.visits[self.path]
        parts = urlsplit(self.path)
        if parts.path == "/robots.txt":
            self._answer(404, b"")
            return
        query = dict(parse_qsl(parts.query))
        if parts.path == "/p":
            item = query.get("id", "0")
            if visit == 1 and item.isdigit() and int(item) % 4 == 0:
                self._answer(503, "<html><body>Busy</body></html>")
                return
            promo = hashlib.blake2b(f"{self.path}|{visit}".encode(), digest_size=4).hexdigest()
            body = f"<h1>Product {escape(item)}</h1><p>About product {escape(item)}.</p>"
            if item.isdigit() and int(item) % 3 == 0 and "color" in query:
                body += f"<p class='color'>In {escape(query['color'])}</p>"
            body += f"<p class='promo'>Today: offer {promo}</p>"
        elif parts.path == "/list":
            page = query.get("page", "1")
            start = int(page) * 10 if page.isdigit() else 0
            items = [f"<li>Item {start + i}</li>" for i in range(5)]
            if query.get("sort") == "old":
                items.reverse()
            body = f"<h1>Listing, page {escape(page)}</h1><ul>{''.join(items)}</ul>"
        else:
            body = f"<h1>Nothing at {escape(parts.path)}</h1>"
        title = escape(parts.hostname or "")
        self._answer(
            200, f"<html><head><title>{title}</title></head><body><main>{body}</main></body></html>"
        )

    def _answer(self, status: int, html: str | bytes) -> None:
        body = html.encode() if isinstance(html, str) else html
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


def _reset(*, visits: bool) -> None:
    with _Shop.lock:
        _Shop.requests.clear()
        if visits:
            _Shop.visits.clear()


def _probes() -> Counter[str]:
    """The requests since the last reset, robots.txt aside (a rerun asks for it again)."""
    with _Shop.lock:
        return Counter(
            {target: n for target, n in _Shop.requests.items() if "/robots.txt" not in target}
        )


@pytest.fixture(scope="module")
def proxy() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Shop)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def urls_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    urls: list[str] = []
    for n in range(1, 31):
        urls.append(f"http://shop.test/p?id={n}&utm_source=mail{n % 4}")
        if n % 2:
            urls.append(f"http://shop.test/p?id={n}&ref=r{n % 5}")
        if n % 3 == 0:
            urls += [f"http://shop.test/p?id={n}&color={color}" for color in ("red", "blue")]
    for page in range(1, 9):
        for sort in ("new", "old"):
            urls.append(f"http://shop.test/list?page={page}&sort={sort}")
            urls.append(f"http://shop.test/list?page={page}&sort={sort}&utm_medium=m{page % 3}")
    urls += [f"http://tiny.test/p?id={n}&utm_source=x{n}" for n in range(1, 5)]
    path = tmp_path_factory.mktemp("mid-domain") / "urls.txt"
    path.write_text("\n".join(urls) + "\n", encoding="utf-8")
    return path


def _command(urls: Path, out: Path, proxy: str) -> list[str]:
    return [
        "learn",
        "--urls",
        str(urls),
        "--out",
        str(out),
        "--proxy",
        proxy,
        "--rate",
        RATE,
        "--no-progress",
        "--checkpoint-every",
        "0.2",
    ]


def _maps(path: Path) -> dict[str, Any]:
    """Every map of ``path``, whole but for its times."""

    def timeless(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: timeless(v) for k, v in value.items() if not k.endswith("_at")}
        if isinstance(value, list):
            return [timeless(v) for v in value]
        return value

    lines = path.read_text(encoding="utf-8").splitlines()
    return {json.loads(line)["domain"]: timeless(json.loads(line)) for line in lines}


@pytest.fixture(scope="module")
def uninterrupted(
    proxy: str, urls_file: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, Any], Counter[str]]:
    """The maps of an uninterrupted run, and the probes it made."""
    out = tmp_path_factory.mktemp("uninterrupted") / "maps.jsonl"
    _reset(visits=True)
    result = run(*_command(urls_file, out, proxy))
    assert result.returncode == 0, result.stderr
    return _maps(out), _probes()


def test_a_domain_stopped_midway_resumes_without_asking_again_what_it_was_asked(
    proxy: str,
    urls_file: Path,
    uninterrupted: tuple[dict[str, Any], Counter[str]],
    tmp_path: Path,
) -> None:
    maps, made = uninterrupted
    shop_probes = sum(n for target, n in made.items() if target.startswith("http://shop.test/"))
    out, errors = tmp_path / "maps.jsonl", tmp_path / "stderr.txt"
    _reset(visits=True)
    with errors.open("w") as stderr:
        process = subprocess.Popen(
            [MIQPS, *_command(urls_file, out, proxy)],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            text=True,
        )
    deadline = time.monotonic() + 60
    while sum(_probes().values()) < shop_probes // 2:  # shop.test half learned
        assert process.poll() is None, errors.read_text()
        assert time.monotonic() < deadline, "the run made too few probes in time"
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    process.wait(timeout=30)
    assert process.returncode == 130, errors.read_text()
    interrupted = _probes()
    assert "Traceback" not in errors.read_text()
    done = json.loads(Path(f"{out}.progress.json").read_text(encoding="utf-8"))["done"]
    assert "shop.test" not in done
    to_go = sum(n for target, n in interrupted.items() if urlsplit(target).hostname not in done)

    _reset(visits=False)  # the same web, as it is now: its noise goes on
    result = run(*_command(urls_file, out, proxy))
    assert result.returncode == 0, result.stderr
    resumed = _probes()

    # The rerun asks only for what the interrupted run did not get: at most the one request
    # per host that was on its way when the signal came, never one it had an answer to.
    asked_again = (interrupted + resumed) - made
    assert sum(asked_again.values()) <= len(HOSTS), (
        f"{sum(asked_again.values())} probes asked again: {sorted(asked_again)[:10]}"
    )
    # and it made the same choices: every probe of the uninterrupted run was made once
    assert not made - (interrupted + resumed), sorted(made - (interrupted + resumed))[:10]
    assert _maps(out) == maps

    *_, interrupt_line = errors.read_text().strip().splitlines()
    said = re.search(r"\((\d+) fetches journaled for them\); ", interrupt_line)
    assert said is not None, interrupt_line
    journaled = int(said[1])
    assert interrupt_line.startswith("miqps learn: interrupted (SIGINT): saved the maps of ")
    assert "run the same command again to resume" in interrupt_line
    # the requests answered, of the domains to go (not those on their way)
    assert 0 < journaled <= to_go, (to_go, interrupt_line)
    assert "resuming:" in result.stderr and "replayed" in result.stderr, result.stderr
    replayed = next(line for line in result.stdout.splitlines() if line.startswith("resumed:"))
    assert f"{journaled} fetches replayed from the journal" in replayed, replayed
    assert not Path(f"{out}.progress.json").exists()
    assert not Path(f"{out}.probes.jsonl").exists(), "a finished run removes its journal"
