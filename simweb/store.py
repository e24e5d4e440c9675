"""A store on loopback whose ``size`` parameter changes only some products' pages, and the
map that wrongly drops it: the audits' simulated web (``bench.audit`` and the audit tests).

:class:`SometimesStore` shows products at ``/product?id=N``; every link carries ``size`` and
often ``ref``. ``size`` changes the page of a share of the products (named in the host:
:func:`store_host`), ``ref`` none. Every page has a render stamp and a promo rotating among
three variants.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Iterator
from html import escape
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Lock, Thread
from typing import ClassVar
from urllib.parse import parse_qsl, urlsplit

import xxhash

from miqps.maps import DomainMap, Layer, ParamEvidence, PatternDecision, Verification, utc_now
from miqps.urls import NormalizedURL, parse

SIZES = ("XS", "S", "M", "L", "XL")
PROMOS = ("Free shipping this week", "Two for one on socks", "Join our newsletter")


def changes_with_size(host: str, item: str) -> bool:
    """Whether product ``item`` of ``host`` shows its size: hosts are ``s<seed>-p<percent>``
    (``s3-p5.store.test``: seed 3, 5% of the products)."""
    label = host.split(".", 1)[0]
    seed, _, percent = label.partition("-p")
    share = int(percent or "0")
    return xxhash.xxh3_64_intdigest(f"{seed}:{item}".encode()) % 100 < share


def promo_at(target: str, turn: int) -> str:
    """The promo :class:`SometimesStore` shows on turn ``turn`` (from 0) of the request
    target ``target`` (through a proxy, the whole URL)."""
    return PROMOS[xxhash.xxh3_64_intdigest(f"{target}\t{turn}".encode()) % len(PROMOS)]


class SometimesStore(BaseHTTPRequestHandler):
    """``/product?id=N`` on any host; ``size`` matters only where :func:`changes_with_size`
    says so, ``ref`` nowhere. Other paths are a 404.

    The promo of each fetch is picked by a hash of the URL and of how often it was fetched
    before, so a run sees the same noise however its requests interleave: the ``n``-th
    fetch of a URL shows the same promo in every run (the same ``promo_turns`` fetches in a
    row, as a promo rotating every few seconds shows to quick refetches)."""

    promo_turns = 1
    _fetches: ClassVar[Counter[str]] = Counter()
    _fetches_lock: ClassVar[Lock] = Lock()

    def promo(self) -> str:
        with self._fetches_lock:
            before = self._fetches[self.path]
            self._fetches[self.path] += 1
        return promo_at(self.path, before // self.promo_turns)

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        query = dict(parse_qsl(parts.query))
        item = query.get("id", "")
        if parts.path != "/product" or not item.isdigit():
            self._send(404, "<h1>Not found</h1><p>There is no such page in this store.</p>")
            return
        price = 1000 + int(item) % 97 * 10
        detail = ""
        if changes_with_size(parts.hostname or "", item):
            size = query.get("size", "M")
            if size in SIZES:
                price += SIZES.index(size) * 150
                detail = f"<p class=size>Size: {escape(size)}</p>"
        promo = self.promo()
        self._send(
            200,
            f"<header><nav>Store</nav></header><main><h1>Product {escape(item)}</h1>"
            f"<p class=desc>A fine product, number {escape(item)}, made to last.</p>{detail}"
            f"<p class=price>{price / 100:.2f} EUR</p></main>"
            f"<aside class=promo><p>{promo}</p></aside>"
            f"<footer><p class=stamp>rendered {time.time_ns()}</p></footer>",
        )

    def _send(self, status: int, body: str) -> None:
        data = f"<!doctype html><html><body>{body}</body></html>".encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        return


def serve_store() -> Iterator[str]:
    """Serve :class:`SometimesStore` on loopback; yields its URL (the fetcher's proxy)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), SometimesStore)
    thread = Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def store_host(seed: int, percent: int) -> str:
    return f"s{seed}-p{percent}.store.test"


def wrong_map(host: str) -> DomainMap:
    """A map of the store that keeps ``id`` and drops ``size`` and ``ref``, as learned on
    products none of which shows its size."""
    decided = utc_now()

    def decision(names: set[str]) -> PatternDecision:
        params = {"id": ParamEvidence("keep", Layer.LEARNED, 5, 5, 0, 0)}
        for name in names:
            params[name] = ParamEvidence("drop", Layer.LEARNED, 5, 0, 5, 0)
        return PatternDecision(
            frozenset({"id"}), frozenset(names), params, Verification(samples=1), decided, 100
        )

    patterns = {
        "/product?id&ref&size": decision({"ref", "size"}),
        "/product?id&size": decision({"size"}),
    }
    return DomainMap(host, 1, decided, patterns)


def store_urls(host: str, count: int, items: int, seed: int) -> list[NormalizedURL]:
    """``count`` URLs of random products, each with a size, half of them with a ``ref``."""
    rng = random.Random(seed)
    urls: list[NormalizedURL] = []
    for _ in range(count):
        query = f"id={rng.randrange(1, items + 1)}&size={rng.choice(SIZES)}"
        if rng.random() < 0.5:
            query += f"&ref={rng.choice(('home', 'mail', 'search', 'ad'))}{rng.randrange(50)}"
        urls.append(parse(f"http://{host}/product?{query}"))
    return urls
