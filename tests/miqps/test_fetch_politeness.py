"""Politeness measured at a real server: requests in flight, the pace per host, robots.txt,
Retry-After for the whole host, the adaptive pace and the never-probe list."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from miqps import politeness
from miqps.fetch import FetchConfig, Fetcher, FetchFailed, FetchStats
from miqps.politeness import HostPace
from simweb.polite import PoliteWeb

pytestmark = pytest.mark.timeout(60)


class _Recorder:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0
        self.arrivals: list[float] = []
        self.robots = 0


def _server(
    recorder: _Recorder, delay: float, status: int = 200, headers: tuple[tuple[str, str], ...] = ()
) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/robots.txt":
                with recorder.lock:
                    recorder.robots += 1
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            with recorder.lock:
                recorder.in_flight += 1
                recorder.max_in_flight = max(recorder.max_in_flight, recorder.in_flight)
                recorder.arrivals.append(time.monotonic())
            time.sleep(delay)
            # Out of flight before answering: once the answer is written, the client may
            # send its next request before this thread runs again.
            with recorder.lock:
                recorder.in_flight -= 1
            body = b"<html><body><p>ok</p></body></html>"
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    return ThreadingHTTPServer(("127.0.0.1", 0), Handler)


@pytest.fixture
def serve() -> Iterator[list[ThreadingHTTPServer]]:
    servers: list[ThreadingHTTPServer] = []
    yield servers
    for server in servers:
        server.shutdown()
        server.server_close()


def _start(servers: list[ThreadingHTTPServer], server: ThreadingHTTPServer) -> int:
    servers.append(server)
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    return server.server_address[1]


def test_at_most_one_request_in_flight_per_host_by_default(
    serve: list[ThreadingHTTPServer],
) -> None:
    recorder = _Recorder()
    port = _start(serve, _server(recorder, delay=0.15))

    async def run() -> None:
        config = FetchConfig(allow_private=True, per_host_rate=1000)
        async with Fetcher(config) as fetcher:
            await asyncio.gather(
                *(fetcher.fetch(f"http://127.0.0.1:{port}/{i}") for i in range(10))
            )

    asyncio.run(run())
    assert len(recorder.arrivals) == 10
    assert recorder.robots == 1
    assert recorder.max_in_flight == 1


@pytest.mark.slow  # waits out the rate limit
def test_the_rate_limit_spaces_requests_to_one_host(serve: list[ThreadingHTTPServer]) -> None:
    recorder = _Recorder()
    port = _start(serve, _server(recorder, delay=0.0))
    rate, count = 5.0, 15

    async def run() -> None:
        config = FetchConfig(allow_private=True, per_host_rate=rate, per_host_concurrency=8)
        async with Fetcher(config) as fetcher:
            await asyncio.gather(
                *(fetcher.fetch(f"http://127.0.0.1:{port}/{i}") for i in range(count))
            )

    asyncio.run(run())
    gaps = [b - a for a, b in zip(recorder.arrivals, recorder.arrivals[1:], strict=False)]
    assert min(gaps) >= 1 / rate * 0.9


def test_retry_after_is_honoured_and_bounded(serve: list[ThreadingHTTPServer]) -> None:
    recorder = _Recorder()
    port = _start(serve, _server(recorder, 0.0, 503, (("Retry-After", "1"),)))

    async def run() -> float:
        config = FetchConfig(allow_private=True, max_attempts=2)
        async with Fetcher(config) as fetcher:
            started = time.monotonic()
            with pytest.raises(FetchFailed, match="HTTP 503"):
                await fetcher.fetch(f"http://127.0.0.1:{port}/busy")
            return time.monotonic() - started

    asyncio.run(run())
    assert len(recorder.arrivals) == 2
    assert recorder.arrivals[1] - recorder.arrivals[0] >= 0.9


def test_a_retry_after_longer_than_the_cap_is_inconclusive_at_once(
    serve: list[ThreadingHTTPServer],
) -> None:
    recorder = _Recorder()
    port = _start(serve, _server(recorder, 0.0, 429, (("Retry-After", "3600"),)))

    async def run() -> None:
        async with Fetcher(FetchConfig(allow_private=True)) as fetcher:
            with pytest.raises(FetchFailed, match="too long"):
                await fetcher.fetch(f"http://127.0.0.1:{port}/slow-down")

    asyncio.run(run())
    assert len(recorder.arrivals) == 1


@pytest.mark.slow  # slow pages run into the time cap
def test_bodies_over_the_cap_and_slow_pages_are_failures(serve: list[ThreadingHTTPServer]) -> None:
    recorder = _Recorder()
    port = _start(serve, _server(recorder, delay=1.5))

    async def run() -> None:
        config = FetchConfig(allow_private=True, timeout=0.3, max_attempts=1)
        async with Fetcher(config) as fetcher:
            with pytest.raises(FetchFailed, match="timed out"):
                await fetcher.fetch(f"http://127.0.0.1:{port}/hang")
        config = FetchConfig(allow_private=True, max_bytes=10)
        async with Fetcher(config) as fetcher:
            with pytest.raises(FetchFailed, match="body larger"):
                await fetcher.fetch(f"http://127.0.0.1:{port}/big")

    asyncio.run(run())


def test_redirect_loops_stop_after_five_hops(serve: list[ThreadingHTTPServer]) -> None:
    recorder = _Recorder()
    port = _start(serve, _server(recorder, 0.0, 302, (("Location", "/again"),)))

    async def run() -> None:
        async with Fetcher(FetchConfig(allow_private=True, per_host_rate=1000)) as fetcher:
            with pytest.raises(FetchFailed, match="more than 5 redirects"):
                await fetcher.fetch(f"http://127.0.0.1:{port}/start")

    asyncio.run(run())
    assert len(recorder.arrivals) == 6


def test_the_stats_count_pages_fetched_and_the_time_each_host_made_us_wait(
    serve: list[ThreadingHTTPServer],
) -> None:
    recorder = _Recorder()
    port = _start(serve, _server(recorder, delay=0.0))
    rate, count = 4.0, 8

    async def run() -> tuple[int, dict[str, float]]:
        config = FetchConfig(allow_private=True, per_host_rate=rate, per_host_concurrency=8)
        async with Fetcher(config) as fetcher:
            await asyncio.gather(
                *(fetcher.fetch(f"http://127.0.0.1:{port}/{i}") for i in range(count))
            )
            return fetcher.stats.fetched, fetcher.stats.politeness_wait_seconds

    fetched, waits = asyncio.run(run())
    assert fetched == count
    assert list(waits) == ["127.0.0.1"]
    # robots.txt takes the first turn; then request k starts (k + 1) / rate seconds later.
    expected = sum((k + 1) / rate for k in range(count))
    assert expected * 0.8 <= waits["127.0.0.1"] <= expected * 1.5 + 0.5


@pytest.fixture
def polite_web() -> Iterator[PoliteWeb]:
    with PoliteWeb(crawl_delay=1.0, retry_after=1, busy_window=0.5, slow_seconds=0.3) as web:
        yield web


def _fast(web: PoliteWeb, **changes: Any) -> FetchConfig:
    """A fetcher through the polite web at a loopback pace; robots.txt is still obeyed."""
    return replace(
        FetchConfig(proxy=web.proxy_url, per_host_rate=100.0, backoff_base=0.01), **changes
    )


async def _fetch_all(config: FetchConfig, urls: list[str]) -> tuple[list[object], FetchStats]:
    async with Fetcher(config) as fetcher:
        results = await asyncio.gather(
            *(fetcher.fetch(url) for url in urls), return_exceptions=True
        )
        return list(results), fetcher.stats


def _kinds(results: list[object]) -> set[str]:
    return {r.kind for r in results if isinstance(r, FetchFailed)}


def test_disallowed_paths_are_never_fetched_and_robots_is_fetched_once_per_host(
    polite_web: PoliteWeb,
) -> None:
    urls = [
        f"http://{host}{path}?id={n}&utm_source=s{n}"
        for host in ("private.polite.test", "moved.polite.test")
        for path in ("/account/orders", "/p/1")
        for n in range(4)
    ] + [f"http://private.polite.test/staff/list?id={n}" for n in range(3)]
    results, stats = asyncio.run(_fetch_all(_fast(polite_web), urls))
    for host in ("private.polite.test", "moved.polite.test"):
        log = polite_web.log(host)
        assert log.under("/account/") == 0
        assert log.paths["/p/1"] == 4
        assert log.paths["/robots.txt"] == 1
    assert polite_web.log("private.polite.test").under("/staff/") == 0  # the miqps group
    assert polite_web.log("moved.polite.test").paths["/rules/robots.txt"] == 1
    assert _kinds(results) == {"disallowed by robots.txt"}
    assert stats.disallowed == 4 + 4 + 3
    assert stats.robots_fetches == {"rules": 2}


def test_the_robots_group_is_matched_on_the_product_token(polite_web: PoliteWeb) -> None:
    config = _fast(polite_web, user_agent="otherbot/2.0", contact_url="https://ops.example/bot")
    results, _ = asyncio.run(_fetch_all(config, ["http://private.polite.test/staff/list?id=1"]))
    assert not _kinds(results)
    assert polite_web.log("private.polite.test").agents == {
        "otherbot/2.0 (+https://ops.example/bot)": 2
    }


def test_the_user_agent_names_the_product_and_the_contact(polite_web: PoliteWeb) -> None:
    config = _fast(polite_web, contact_url="https://ops.example/bot")
    asyncio.run(_fetch_all(config, ["http://open.polite.test/p?id=1"]))
    [agent] = polite_web.log("open.polite.test").agents
    assert agent.startswith("miqps/") and agent.endswith("; +https://ops.example/bot)")


def test_a_robots_txt_answering_5xx_closes_the_host_until_it_answers(
    polite_web: PoliteWeb,
) -> None:
    urls = [f"http://broken.polite.test/p/{n}?id={n}" for n in range(5)]
    results, stats = asyncio.run(_fetch_all(_fast(polite_web), urls))
    log = polite_web.log("broken.polite.test")
    assert log.pages == 0
    assert 1 <= log.paths["/robots.txt"] <= FetchConfig().max_attempts
    assert _kinds(results) == {"robots.txt unreachable"}
    assert stats.robots_fetches == {"unreachable": 1}


@pytest.mark.slow  # waits out the crawl delays
def test_no_request_comes_faster_than_the_crawl_delay(polite_web: PoliteWeb) -> None:
    urls = [f"http://spaced.polite.test/p/{n}?id={n}" for n in range(4)]
    config = _fast(polite_web, per_host_concurrency=4)
    results, _ = asyncio.run(_fetch_all(config, urls))
    log = polite_web.log("spaced.polite.test")
    assert not _kinds(results)
    assert log.pages == 4
    assert log.shortest_gap() >= polite_web.crawl_delay * 0.95


def test_a_host_asking_for_a_crawl_delay_over_the_cap_is_not_probed(
    polite_web: PoliteWeb,
) -> None:
    urls = [f"http://greedy.polite.test/p/{n}?id={n}" for n in range(3)]
    results, stats = asyncio.run(_fetch_all(_fast(polite_web), urls))
    assert polite_web.log("greedy.polite.test").pages == 0
    assert _kinds(results) == {"Crawl-delay over the cap"}
    assert stats.not_probed == {"Crawl-delay over the cap": 3}


@pytest.mark.slow  # waits out a Retry-After
def test_no_request_arrives_while_a_retry_after_is_in_force(polite_web: PoliteWeb) -> None:
    urls = [f"http://busy.polite.test/p/{n}?id={n}" for n in range(6)]
    results, stats = asyncio.run(_fetch_all(_fast(polite_web), urls))
    log = polite_web.log("busy.polite.test")
    assert log.retry_after_until > 0, "the server never asked to slow down"
    assert log.during_retry_after == 0
    assert _kinds(results) <= {"HTTP 429"}
    assert stats.deferred_seconds >= polite_web.retry_after


def test_the_pace_slows_down_on_a_slow_server(polite_web: PoliteWeb) -> None:
    urls = [f"http://slow.polite.test/p/{n}?id={n}" for n in range(8)]
    config = _fast(polite_web, per_host_concurrency=4)
    results, stats = asyncio.run(_fetch_all(config, urls))
    arrivals = polite_web.log("slow.polite.test").arrivals
    assert not _kinds(results)
    late = arrivals[-4:]
    gaps = [b - a for a, b in itertools.pairwise(late)]
    assert min(gaps) >= polite_web.slow_seconds * 0.8, gaps
    assert stats.delay_by_host["slow.polite.test"] >= polite_web.slow_seconds * 0.8


def test_domains_on_the_never_probe_list_are_never_fetched(
    polite_web: PoliteWeb, tmp_path: Path
) -> None:
    listed = tmp_path / "never-probe.txt"
    listed.write_text("# operators' opt-outs\nPOLITE.test\n", encoding="utf-8")
    urls = [f"http://open.polite.test/p/{n}?id={n}" for n in range(3)]
    results, stats = asyncio.run(_fetch_all(_fast(polite_web, never_probe=listed), urls))
    assert sum(polite_web.log("open.polite.test").paths.values()) == 0
    assert _kinds(results) == {"opted out"}
    assert stats.requests == 0


def test_a_never_probe_line_that_is_no_domain_is_an_error(tmp_path: Path) -> None:
    listed = tmp_path / "never-probe.txt"
    listed.write_text("shop.example\nhttps://other.example/\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"never-probe.txt:2: not a domain"):
        Fetcher(FetchConfig(never_probe=listed))


def test_robots_txt_is_read_up_to_500_kib(serve: list[ThreadingHTTPServer]) -> None:
    padding = "# " + "x" * 1000 + "\n"
    robots = ("User-agent: *\nDisallow: /early/\n" + padding * 600 + "Disallow: /late/\n").encode()
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            body = robots if self.path == "/robots.txt" else b"<html><body>ok</body></html>"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    port = _start(serve, ThreadingHTTPServer(("127.0.0.1", 0), Handler))
    urls = [f"http://127.0.0.1:{port}/early/1", f"http://127.0.0.1:{port}/late/1"]
    config = FetchConfig(allow_private=True, per_host_rate=1000)
    results, stats = asyncio.run(_fetch_all(config, urls))
    assert seen.count("/early/1") == 0
    assert seen.count("/late/1") == 1  # its rule lies past the first 500 KiB
    assert _kinds(results) == {"disallowed by robots.txt"}
    assert stats.robots_fetches == {"rules": 1}


def test_a_crawl_delay_holds_where_the_site_receives_a_request_held_up_on_its_way() -> None:
    """A request that reaches the host late (a busy process, a slow network) must not
    arrive closer than the Crawl-delay to the next one: spacing the starts alone lets it."""
    pace = HostPace(0.01, 60.0, 1.0, adaptive=False)
    pace.ask_at_least(0.2)
    arrivals: list[float] = []

    async def request(on_the_way: float) -> None:
        async with pace.request():
            await asyncio.sleep(on_the_way)
            arrivals.append(time.monotonic())
            await asyncio.sleep(0.01)  # the answer

    async def run() -> None:
        await asyncio.gather(request(0.15), request(0.0), request(0.15), request(0.0))

    asyncio.run(run())
    gaps = [later - earlier for earlier, later in itertools.pairwise(sorted(arrivals))]
    assert len(arrivals) == 4 and min(gaps) >= 0.2


class _DelayedHost:
    """A loopback host whose robots.txt asks for a Crawl-delay (``delays[0]`` on its first
    fetch, then each next one): every request's arrival is recorded, robots.txt's too."""

    def __init__(self, delays: list[float]) -> None:
        self.delays = delays
        self.lock = threading.Lock()
        self.arrivals: list[tuple[float, str]] = []

    def handler(self) -> type[BaseHTTPRequestHandler]:
        host = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with host.lock:
                    robots = sum(path == "/robots.txt" for _, path in host.arrivals)
                    host.arrivals.append((time.monotonic(), self.path))
                if self.path == "/robots.txt":
                    delay = host.delays[min(robots, len(host.delays) - 1)]
                    body = f"User-agent: *\nCrawl-delay: {delay:g}\n".encode()
                else:
                    body = b"<html><body><p>ok</p></body></html>"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return

        return Handler

    def gaps(self) -> list[tuple[float, str]]:
        """Between each two arrivals: the seconds, and the later request's path."""
        return [(b - a, path) for (a, _), (b, path) in itertools.pairwise(self.arrivals)]


def test_the_crawl_delay_holds_after_robots_txt(serve: list[ThreadingHTTPServer]) -> None:
    """robots.txt is a request to the host: the first page waits the delay after it too."""
    host = _DelayedHost([0.5])
    port = _start(serve, ThreadingHTTPServer(("127.0.0.1", 0), host.handler()))

    async def run() -> None:
        config = FetchConfig(allow_private=True, per_host_rate=1000, per_host_concurrency=4)
        async with Fetcher(config) as fetcher:
            await asyncio.gather(
                *(fetcher.fetch(f"http://127.0.0.1:{port}/p/{n}") for n in range(3))
            )

    asyncio.run(run())
    assert host.arrivals[0][1] == "/robots.txt"
    assert len(host.arrivals) == 4
    assert min(gap for gap, _ in host.gaps()) >= 0.5 * 0.95, host.gaps()


def test_a_robots_txt_fetched_again_is_paced_and_its_new_delay_holds_from_its_answer(
    serve: list[ThreadingHTTPServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once its cache life is over, robots.txt is fetched again like any request: no closer
    than the delay to the page before it, and a longer delay it now asks for holds from
    its answer on."""
    host = _DelayedHost([0.3, 0.6])
    port = _start(serve, ThreadingHTTPServer(("127.0.0.1", 0), host.handler()))
    monkeypatch.setattr(politeness, "ROBOTS_CACHE_SECONDS", 0.7)

    async def run() -> None:
        config = FetchConfig(allow_private=True, per_host_rate=1000)
        async with Fetcher(config) as fetcher:
            for n in range(4):
                await fetcher.fetch(f"http://127.0.0.1:{port}/p/{n}")

    asyncio.run(run())
    paths = [path for _, path in host.arrivals]
    assert paths[0] == "/robots.txt" and paths.count("/robots.txt") >= 2
    again = paths.index("/robots.txt", 1)
    gaps = host.gaps()
    assert min(gap for gap, _ in gaps[:again]) >= 0.3 * 0.95, gaps
    assert min(gap for gap, _ in gaps[again:]) >= 0.6 * 0.95, gaps
