"""Politeness measured at a real server: requests in flight and request rate per host."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from miqps.fetch import FetchConfig, Fetcher, FetchFailed


class _Recorder:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0
        self.arrivals: list[float] = []


def _server(
    recorder: _Recorder, delay: float, status: int = 200, headers: tuple[tuple[str, str], ...] = ()
) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with recorder.lock:
                recorder.in_flight += 1
                recorder.max_in_flight = max(recorder.max_in_flight, recorder.in_flight)
                recorder.arrivals.append(time.monotonic())
            time.sleep(delay)
            body = b"<html><body><p>ok</p></body></html>"
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            with recorder.lock:
                recorder.in_flight -= 1

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
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_address[1]


def test_at_most_two_requests_in_flight_per_host_by_default(
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
    assert recorder.max_in_flight == 2


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
    span = recorder.arrivals[-1] - recorder.arrivals[0]
    assert span >= (count - rate) / rate * 0.9


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
        async with Fetcher(FetchConfig(allow_private=True)) as fetcher:
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
    # The limiter lets ``rate`` requests through at once, then one every 1/rate seconds:
    # request k (k >= rate) waits about (k - rate + 1) / rate.
    expected = sum((k - rate + 1) / rate for k in range(int(rate), count))
    assert expected * 0.8 <= waits["127.0.0.1"] <= expected * 1.5 + 0.5
