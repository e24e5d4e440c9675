from __future__ import annotations

import random
import re
import socket
import threading
import time
from collections import Counter, defaultdict

import httpx
import pytest
from selectolax.lexbor import LexborHTMLParser

from simweb.corpus import content_key_for, generate_corpus
from simweb.resolve import canonical_url, page_shown, resolve, split_target
from simweb.server import SimWeb
from simweb.sites import CanonicalMode, MissingKey, PageKind, Role, Site, UnknownKey
from tests.simweb.support import (
    attr_value,
    canonical_href,
    css_text,
    find_site,
    item_route,
    item_url,
    keyed_route,
    main_text,
    main_view,
    tracking_name,
    unknown_item_url,
)

RENDER_TIME = re.compile(r"\d\d:\d\d:\d\d|Rendered at \d+\.\d{6}")


def _sample_urls(sites: list[Site], per_site: int, seed: int) -> list[str]:
    """Corpus URLs of server-rendered routes, and each with one parameter removed (unless
    that leaves a keyed URL without its key on a site that answers it with a terse 404)."""
    rng = random.Random(seed)
    shown = page_shown(sites)
    urls: list[str] = []
    for item in generate_corpus(sites, per_site, seed=seed):
        if "/attachments" in item.url or "/download" in item.url:
            continue
        if item.traps & {"data-item", "shell"}:
            continue
        urls.append(item.url)
        base, _, query = item.url.partition("?")
        pairs = query.split("&") if query else []
        if pairs:
            drop = rng.randrange(len(pairs))
            rest = pairs[:drop] + pairs[drop + 1 :]
            reduced = base + ("?" + "&".join(rest) if rest else "")
            if not shown(reduced).endswith("|error"):
                urls.append(reduced)
    return urls


def test_content_key_agrees_with_rendered_main_content(
    client: httpx.Client, all_sites: list[Site]
) -> None:
    sites = {s.host: s for s in all_sites}
    texts: dict[str, set[str]] = defaultdict(set)
    keys: dict[tuple[str, str], set[str]] = defaultdict(set)
    for url in _sample_urls(all_sites, 25, seed=4):
        site = sites[split_target(url)[0]]
        response = client.get(url, follow_redirects=True)
        assert response.status_code in (200, 404), url
        key = content_key_for(site, url)
        text = main_view(site, response.text)
        texts[key].add(text)
        keys[(site.host, text)].add(key)
    assert len(texts) > 150
    assert all(len(v) == 1 for v in texts.values()), "one page rendered two ways"
    assert all(len(v) == 1 for v in keys.values()), "two pages rendered alike"


def test_item_content_is_visible_text(client: httpx.Client, tuning_sites: list[Site]) -> None:
    site = find_site(tuning_sites, lambda s: s.tracking_redirect == 301)
    route = item_route(site)
    variant = next(p for p in route.params if p.role is Role.VARIANT)
    item = site.catalog.items[5]
    plain = client.get(item_url(site, route, 5))
    chosen = client.get(item_url(site, route, 5, f"{variant.name}={variant.values[1]}"))
    assert item.name in css_text(plain.text, "h1")
    assert variant.values[1] in main_text(site, chosen.text).lower()
    assert main_text(site, plain.text) != main_text(site, chosen.text)


def test_noise_changes_on_every_fetch(client: httpx.Client, all_sites: list[Site]) -> None:
    for site in all_sites:
        route = item_route(site)
        url = item_url(site, route, 2)
        first, second = client.get(url), client.get(url)
        assert first.status_code == second.status_code == 200
        assert first.text != second.text
        assert main_text(site, first.text) == main_text(site, second.text)
        t = site.template
        for selector in (f".{t.reqid_class}", f".{t.recs_class}"):
            assert css_text(first.text, selector) != css_text(second.text, selector), selector
        # The render time is a clock: two fetches within one tick may show the same one.
        assert RENDER_TIME.search(css_text(first.text, f".{t.time_class}")), site.host
        token = f'input[name="{t.csrf_name}"]'
        assert attr_value(first.text, token, "value") != attr_value(second.text, token, "value")
        assert css_text(first.text, f".{t.ads_class}")


def test_tracking_values_are_echoed_into_the_page(
    client: httpx.Client, all_sites: list[Site]
) -> None:
    site = find_site(all_sites, lambda s: s.tracking_redirect == 0)
    route = item_route(site)
    name = tracking_name(site, route)
    clean = client.get(item_url(site, route, 1))
    tagged = client.get(item_url(site, route, 1, f"{name}=zz-echo-42"))
    assert tagged.status_code == 200
    assert "zz-echo-42" not in clean.text
    assert tagged.text.count("zz-echo-42") >= 5
    assert f'<input type="hidden" name="{name}" value="zz-echo-42">' in tagged.text
    assert f'src="/static/app.js?build=7&amp;{name}=zz-echo-42"' in tagged.text or (
        f'src="/static/app.js?build=7&{name}=zz-echo-42"' in tagged.text
    )
    assert main_text(site, clean.text) == main_text(site, tagged.text)


@pytest.mark.parametrize("status", [301, 302])
def test_tracking_redirects(client: httpx.Client, all_sites: list[Site], status: int) -> None:
    site = find_site(all_sites, lambda s: s.tracking_redirect == status)
    route = item_route(site)
    name = tracking_name(site, route)
    clean = item_url(site, route, 4)
    response = client.get(item_url(site, route, 4, f"{name}=mail"))
    assert response.status_code == status
    assert response.headers["location"] == clean
    session = next(n.name for n in site.noise if n.role is not Role.TRACKING)
    kept = client.get(item_url(site, route, 4, f"{session}=abc"))
    assert kept.status_code == 200
    other = find_site(all_sites, lambda s: s.tracking_redirect == 0)
    other_route = item_route(other)
    url = item_url(other, other_route, 4, f"{tracking_name(other, other_route)}=mail")
    assert client.get(url).status_code == 200


def test_missing_key_bounces_home(client: httpx.Client, all_sites: list[Site]) -> None:
    for site in all_sites:
        route = keyed_route(site)
        response = client.get(f"http://{site.host}{route.path}?utm_source=x")
        redirect = site.tracking_redirect
        if redirect:
            assert response.status_code == redirect
            response = client.get(response.headers["location"])
        if site.missing_key is MissingKey.TERSE:
            assert response.status_code == 404 and len(response.text) < 300
            continue
        assert response.status_code == 302
        assert response.headers["location"] == f"http://{site.host}/"
        home = client.get(response.headers["location"])
        assert home.status_code == 200
        assert "Welcome to" in main_text(site, home.text)


def test_unknown_keys_404_or_soft_404(client: httpx.Client, all_sites: list[Site]) -> None:
    seen = set()
    for site in all_sites:
        response = client.get(unknown_item_url(site, item_route(site)))
        text = main_text(site, response.text)
        assert "Page not found" in text
        if site.unknown_key is UnknownKey.SOFT:
            assert response.status_code == 200
        else:
            assert response.status_code == 404
        seen.add(response.status_code)
    assert seen == {200, 404}


def test_lying_canonicals(client: httpx.Client, all_sites: list[Site]) -> None:
    for site in all_sites:
        route = item_route(site)
        name = tracking_name(site, route)
        url = item_url(site, route, 6, "" if site.tracking_redirect else f"{name}=s123")
        response = client.get(url)
        assert response.status_code == 200
        href = canonical_href(response.text)
        _, path, query = split_target(url)
        correct = canonical_url(site, resolve(site, path, query).page)
        if site.canonical is CanonicalMode.HOME:
            assert href == f"http://{site.host}/" != correct
        elif site.canonical is CanonicalMode.TRACKING:
            assert href.startswith(correct)
            assert f"{name}=s123" in href
        else:
            assert href == correct
            assert content_key_for(site, href) == content_key_for(site, url)


def _found(site: Site, html: str) -> tuple[int, list[str]]:
    tree = LexborHTMLParser(html)
    main = tree.css_first(site.template.main_selector)
    assert main is not None
    hrefs = [str(a.attributes["href"]) for a in main.css(f"ul.{site.template.list_class} li a")]
    count = re.search(r"(\d+) \w+s found", main.text())
    assert count is not None
    return int(count.group(1)), hrefs


def test_listing_filters_and_pages_differ(client: httpx.Client, all_sites: list[Site]) -> None:
    site = find_site(all_sites, lambda s: s.tracking_redirect == 301)
    search = next(r for r in site.routes if r.kind is PageKind.LISTING)
    q, color, _, page, _ = (p.name for p in search.params)
    item = site.catalog.items[0]
    base = f"http://{site.host}{search.path}?{q}={item.tags[1]}"
    total, first = _found(site, client.get(base).text)
    filtered, coloured = _found(site, client.get(f"{base}&{color}={item.colors[0]}").text)
    _, second = _found(site, client.get(f"{base}&{page}=2").text)
    assert total > site.template.per_page
    assert 0 < filtered < total
    assert coloured != first[: len(coloured)]
    assert second and not set(second) & set(first)
    assert _found(site, client.get(f"{base}&{page}=1").text)[1] == first
    category = next(r for s in all_sites for r in s.routes if r.path_key == "category")
    owner = next(s for s in all_sites if category in s.routes)
    cats = owner.catalog.categories
    one = _found(owner, client.get(f"http://{owner.host}{category.path}{cats[0]}").text)
    two = _found(owner, client.get(f"http://{owner.host}{category.path}{cats[1]}").text)
    assert one != two


def test_proxy_protocol_details(web: SimWeb, all_sites: list[Site]) -> None:
    site = all_sites[0]
    host, port = web.address
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.sendall(f"GET / HTTP/1.1\r\nHost: {site.host}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 200")
    assert b"Welcome to" in data
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.sendall(f"CONNECT {site.host}:443 HTTP/1.1\r\nHost: {site.host}:443\r\n\r\n".encode())
        assert sock.recv(65536).startswith(b"HTTP/1.1 405")
    with httpx.Client(proxy=web.proxy_url) as c:
        assert c.get("http://unknown-host.sim/").status_code == 502
        head = c.head(f"http://{site.host}/")
        assert head.status_code == 200 and head.content == b""
        assert c.post(f"http://{site.host}/").status_code == 405


def test_page_sizes(client: httpx.Client, all_sites: list[Site]) -> None:
    sizes = [
        len(client.get(url, follow_redirects=True).content)
        for url in _sample_urls(all_sites, 6, seed=8)
    ]
    sizes.sort()
    assert sizes[0] >= 4_000
    assert 5_000 <= sizes[len(sizes) // 2] <= 20_000
    assert sizes[-1] <= 25_000


def test_counters(all_sites: list[Site]) -> None:
    with (
        SimWeb(all_sites, rate_limit_per_second=0, flaky_rate=0) as web,
        httpx.Client(proxy=web.proxy_url) as c,
    ):
        for _ in range(3):
            c.get(f"http://{all_sites[0].host}/")
        c.get(f"http://{all_sites[1].host}/")
        assert web.requests_total() == 4
        assert web.requests_by_host() == {all_sites[0].host: 3, all_sites[1].host: 1}
        assert web.repeated_requests() == 2
        web.reset_counters()
        assert web.requests_total() == 0 and web.requests_by_host() == {}
        assert web.repeated_requests() == 0
        c.get(f"http://{all_sites[0].host}/")  # asked before the reset, once since
        c.get(f"http://{all_sites[1].host}/")
        c.get(f"http://{all_sites[1].host}/")
        assert web.repeated_requests() == 1


def _statuses(sites: list[Site], urls: list[str], seed: int) -> list[tuple[int, str | None]]:
    with (
        SimWeb(sites, rate_limit_per_second=0, flaky_rate=0.3, seed=seed) as web,
        httpx.Client(proxy=web.proxy_url) as c,
    ):
        out = []
        for url in urls:
            r = c.get(url)
            out.append((r.status_code, r.headers.get("retry-after")))
        return out


def test_flaky_errors_are_deterministic(all_sites: list[Site]) -> None:
    site = next(s for s in all_sites if s.tracking_redirect == 0)
    route = item_route(site)
    urls = [item_url(site, route, i) for i in range(60)] * 2
    first = _statuses(all_sites, urls, seed=1)
    assert first == _statuses(all_sites, urls, seed=1)
    assert first != _statuses(all_sites, urls, seed=2)
    kinds = Counter(first)
    failures = sum(n for (status, _), n in kinds.items() if status >= 500)
    assert 0.15 * len(urls) <= failures <= 0.45 * len(urls)
    assert kinds[(503, "1")] and kinds[(503, None)] and kinds[(500, None)]
    assert first[:60] != first[60:]


def test_rate_limit_answers_429(all_sites: list[Site]) -> None:
    one, two = all_sites[0].host, all_sites[1].host
    with (
        SimWeb(all_sites, rate_limit_per_second=5, flaky_rate=0) as web,
        httpx.Client(proxy=web.proxy_url) as c,
    ):
        statuses = [c.get(f"http://{one}/").status_code for _ in range(5)]
        assert statuses == [200] * 5
        for _ in range(20):
            limited = c.get(f"http://{one}/")
            statuses.append(limited.status_code)
            if limited.status_code == 429:
                break
        assert limited.status_code == 429
        assert limited.headers["retry-after"] == "1"
        assert c.get(f"http://{two}/").status_code == 200
        time.sleep(1.05)
        assert c.get(f"http://{one}/").status_code == 200
        assert web.requests_by_host()[one] == len(statuses) + 1


def _hang_url(sites: list[Site]) -> tuple[Site, str]:
    site = next(s for s in sites if any(r.hang for r in s.routes))
    route = next(r for r in site.routes if r.hang)
    return site, item_url(site, route, 0)


def test_hanging_route_does_not_block_others(web: SimWeb, all_sites: list[Site]) -> None:
    site, url = _hang_url(all_sites)
    result: dict[str, float] = {}

    def slow() -> None:
        with httpx.Client(proxy=web.proxy_url, timeout=5) as c:
            start = time.monotonic()
            assert c.get(url).status_code == 200
            result["slow"] = time.monotonic() - start

    thread = threading.Thread(target=slow)
    thread.start()
    time.sleep(0.05)
    with httpx.Client(proxy=web.proxy_url, timeout=5) as c:
        start = time.monotonic()
        assert c.get(f"http://{site.host}/").status_code == 200
        fast = time.monotonic() - start
    thread.join()
    assert fast < 0.5
    assert result["slow"] >= 1.0


def test_stop_returns_promptly_while_a_request_hangs(all_sites: list[Site]) -> None:
    _, url = _hang_url(all_sites)
    web = SimWeb(all_sites, flaky_rate=0, hang_seconds=30).start()
    outcome: list[str] = []

    def hang() -> None:
        try:
            with httpx.Client(proxy=web.proxy_url, timeout=20) as c:
                outcome.append(str(c.get(url).status_code))
        except httpx.HTTPError as exc:
            outcome.append(type(exc).__name__)

    thread = threading.Thread(target=hang)
    thread.start()
    time.sleep(0.3)
    start = time.monotonic()
    web.stop()
    assert time.monotonic() - start < 2
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert outcome and outcome[0] != "200"
    with pytest.raises(RuntimeError):
        _ = web.proxy_url
