"""The learner against the simulated web: every trap of every archetype, with ground truth."""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from collections.abc import Iterator
from html import escape
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qsl, urlsplit

import pytest

from miqps.canonical import Canonicalizer, StaticLayers
from miqps.fetch import FetchConfig, Fetcher
from miqps.learner import LearnConfig, Learner, _aliases
from miqps.maps import DomainMap, Layer, anomaly_gate, merge_update
from miqps.prober import Outcome, PageProber
from miqps.urls import NormalizedURL, parse
from simweb.corpus import CorpusURL, generate_corpus
from simweb.resolve import match_route, page_shown
from simweb.server import SimWeb
from simweb.sites import Role, Site, build_sites
from tests.miqps.conftest import LearnedRun, learn_on
from tests.miqps.loopback import AliasShop, send_html, serve

pytestmark = pytest.mark.timeout(300)

CONTENT_ROLES = {
    Role.IDENTITY,
    Role.VARIANT,
    Role.FILTER,
    Role.PAGINATION,
    Role.SORT,
    Role.DEFAULTED,
}


def test_no_two_pages_are_ever_merged(tuning_run: LearnedRun) -> None:
    pages_by_canonical: dict[str, set[str]] = defaultdict(set)
    for entry in tuning_run.corpus:
        canonical = tuning_run.canonicalizer.canonical_url(parse(entry.url))
        pages_by_canonical[canonical].add(entry.content_key)
    merged = {c: keys for c, keys in pages_by_canonical.items() if len(keys) > 1}
    assert not merged, list(merged.items())[:5]


def pages_shown_elsewhere(
    sites: list[Site], corpus: list[CorpusURL], canonicalizer: Canonicalizer
) -> list[tuple[str, str, str, str]]:
    """The corpus URLs whose canonical URL, fetched, shows another page than their own."""
    shown = page_shown(sites)
    wrong = []
    for entry in corpus:
        canonical = canonicalizer.canonical_url(parse(entry.url))
        page = shown(canonical)
        if page != entry.content_key:
            wrong.append((entry.url, canonical, entry.content_key, page))
    return wrong


def test_every_canonical_url_shows_the_page_of_its_url(tuning_run: LearnedRun) -> None:
    """A canonical URL is fetched in place of the URL: it must show the same page, even when
    no other URL of the corpus shares it (``/product?pid=7`` must not become ``/product``)."""
    wrong = pages_shown_elsewhere(tuning_run.sites, tuning_run.corpus, tuning_run.canonicalizer)
    assert not wrong, wrong[:5]


def test_a_popular_product_with_aliases_keeps_its_identifier() -> None:
    """A shop whose best seller (``id=64210&pid=64210``) makes its identifiers look like they
    have a default value: its URLs must not canonicalize to the bare ``/product``."""
    sites = build_sites("tuning", 3, seed=0)
    corpus = [e for e in generate_corpus(sites, 250, seed=0) if "-shop." in e.url]
    with SimWeb(sites, seed=0, rate_limit_per_second=0, flaky_rate=0.0) as web:
        fetch_config = FetchConfig(proxy=web.proxy_url, per_host_rate=500)
        maps, _, _, _ = learn_on(web, corpus, LearnConfig(), fetch_config)
    canonicalizer = Canonicalizer()
    canonicalizer.load({d: merge_update(None, m) for d, m in maps.items()})
    wrong = pages_shown_elsewhere(sites, corpus, canonicalizer)
    assert not wrong, wrong[:5]


def test_learning_removes_most_redundant_urls(tuning_run: LearnedRun) -> None:
    distinct = {entry.url: entry.content_key for entry in tuning_run.corpus}
    canonicals = {tuning_run.canonicalizer.canonical_url(parse(url)) for url in distinct}
    redundant = len(distinct) - len(set(distinct.values()))
    removed = len(distinct) - len(canonicals)
    assert removed / redundant > 0.6


def test_every_fetch_is_counted(tuning_run: LearnedRun) -> None:
    assert tuning_run.stats.requests == tuning_run.server_requests
    assert sum(r.fetches for r in tuning_run.reports) == tuning_run.stats.requests


def test_content_parameters_are_never_dropped(tuning_run: LearnedRun) -> None:
    wrong = []
    for domain, domain_map in tuning_run.maps.items():
        for key, decision in domain_map.patterns.items():
            url = tuning_run.first_url_of_pattern[(domain, key)]
            for name in decision.dropped:
                role = tuning_run.role(url, name)
                if role in CONTENT_ROLES:
                    wrong.append((domain, key, name, role))
    assert not wrong, wrong[:10]


def test_alias_pairs_keep_one_and_never_drop_both(tuning_run: LearnedRun) -> None:
    checked = 0
    for domain, domain_map in tuning_run.maps.items():
        for key, decision in domain_map.patterns.items():
            url = tuning_run.first_url_of_pattern[(domain, key)]
            aliases = [n for n in url.names if tuning_run.role(url, n) is Role.ALIAS]
            if len(aliases) == 2:
                checked += 1
                assert set(aliases) & decision.kept, (domain, key)
                if decision.verification.restored:
                    assert decision.params[decision.verification.restored[0]].layer in (
                        Layer.VERIFICATION,
                        Layer.LEARNED,
                    )
    assert checked >= 2, "the alias trap was not exercised"


def test_tracking_session_and_cache_busters_are_dropped_in_large_patterns(
    tuning_run: LearnedRun,
) -> None:
    neutral_seen = 0
    kept_neutral = []
    for domain, domain_map in tuning_run.maps.items():
        for key, decision in domain_map.patterns.items():
            if decision.urls_seen < 15:
                continue
            entry = next(
                e
                for e in tuning_run.corpus
                if parse(e.url).host == domain and parse(e.url).pattern == key
            )
            if "shell" in entry.traps:
                continue  # a client-side shell is evidence of nothing: it keeps everything
            url = parse(entry.url)
            for name in url.names:
                role = tuning_run.role(url, name)
                if role is not None and role.neutral:
                    neutral_seen += 1
                    if name in decision.kept:
                        kept_neutral.append((domain, key, name, decision.params[name].layer))
    assert neutral_seen > 10
    assert not kept_neutral, kept_neutral


def test_one_name_is_content_on_one_site_and_noise_on_another(tuning_run: LearnedRun) -> None:
    docs, shop = tuning_run.host_of("docs"), tuning_run.host_of("shop")
    docs_v = [d for k, d in tuning_run.maps[docs].patterns.items() if "v" in d.params]
    shop_v = [
        d for k, d in tuning_run.maps[shop].patterns.items() if "v" in d.params and d.urls_seen >= 3
    ]
    assert docs_v and shop_v
    assert all("v" in d.kept for d in docs_v)
    assert any("v" in d.dropped for d in shop_v)
    assert all(d.params["v"].decision == "drop" for d in shop_v)


def test_one_parameter_set_means_different_things_under_different_paths(
    tuning_run: LearnedRun,
) -> None:
    """A name that is noise under one path is left out of canonical URLs there (dropped,
    or its only values elided as defaults), and kept where it means content."""
    by_role: dict[tuple[str, str], dict[bool, list[tuple[str, bool, bool]]]] = defaultdict(
        lambda: {True: [], False: []}
    )
    for entry in tuning_run.corpus:
        url = parse(entry.url)
        if not url.pairs:
            continue
        decision = tuning_run.maps[url.host].patterns[url.pattern]
        canonical = parse(tuning_run.canonicalizer.canonical_url(url))
        for name in url.names:
            role = tuning_run.role(url, name)
            if role is None or role is Role.ALIAS:
                continue
            by_role[(url.host, name)][role.neutral].append(
                (url.pattern, name in decision.kept, name not in canonical.names)
            )
    mixed = {k: v for k, v in by_role.items() if v[True] and v[False]}
    assert mixed, "no site uses one name for content under one path and noise under another"
    for (host, name), sides in mixed.items():
        assert all(kept for _, kept, _ in sides[False]), (host, name)
        assert any(left_out for _, _, left_out in sides[True]), (host, name, sides[True])


def test_default_values_are_elided_and_other_values_kept(tuning_run: LearnedRun) -> None:
    elided: Counter[bool] = Counter()
    for entry in tuning_run.corpus:
        url = parse(entry.url)
        for name in url.names:
            if tuning_run.role(url, name) is not Role.DEFAULTED:
                continue
            site = tuning_run.site(url.host)
            route, _ = match_route(site, url.path) or (None, None)
            assert route is not None
            param = route.param(name)
            assert param is not None
            canonical = tuning_run.canonicalizer.canonical_url(url)
            present = name + "=" in canonical
            if url.value_of(name) == f"{name}={param.default}":
                elided[present] += 1
            else:
                assert present, (entry.url, canonical)
    assert elided[False] > elided[True], elided


def test_rare_patterns_keep_what_they_cannot_prove(tuning_run: LearnedRun) -> None:
    config = LearnConfig()
    insufficient = 0
    for domain_map in tuning_run.maps.values():
        for decision in domain_map.patterns.values():
            for name, evidence in decision.params.items():
                if evidence.layer is Layer.INSUFFICIENT:
                    insufficient += 1
                    assert name in decision.kept
                if name in decision.dropped:
                    if evidence.layer is Layer.DOMAIN:
                        assert evidence.changed == 0 and evidence.unchanged >= 1
                    else:
                        assert evidence.conclusive >= config.min_conclusive
                    assert decision.verification.samples >= 1
    assert insufficient > 0, "no rare pattern exercised the conservative default"


def test_rare_patterns_drop_only_what_changed_no_page_of_the_domain(
    tuning_run: LearnedRun,
) -> None:
    borrowed = 0
    for domain, domain_map in tuning_run.maps.items():
        changed_somewhere = {
            name
            for decision in domain_map.patterns.values()
            for name, evidence in decision.params.items()
            if evidence.changed
        }
        for key, decision in domain_map.patterns.items():
            for name, evidence in decision.params.items():
                if evidence.layer is not Layer.DOMAIN:
                    continue
                borrowed += 1
                assert name in decision.dropped
                assert name not in changed_somewhere, (domain, key, name)
                example = next(
                    parse(e.url)
                    for e in tuning_run.corpus
                    if parse(e.url).host == domain and parse(e.url).pattern == key
                )
                role = tuning_run.role(example, name)
                assert role is not None and role.neutral, (domain, key, name, role)
    assert borrowed > 0, "no rare pattern borrowed the domain's evidence"


def test_hanging_pages_are_inconclusive_and_their_parameters_kept(tuning_run: LearnedRun) -> None:
    forum = tuning_run.host_of("forum")
    timeouts = [
        url
        for url, reason in tuning_run.failures.items()
        if "/attachments" in url and "timed out" in reason
    ]
    assert timeouts
    attachments = [
        d for k, d in tuning_run.maps[forum].patterns.items() if k.startswith("/attachments?")
    ]
    assert attachments
    for decision in attachments:
        assert not decision.dropped, decision.to_json()
    prior = tuning_run.canonicalizer.layers.prior_drops
    without_evidence = 0
    for entry in tuning_run.corpus:
        url = parse(entry.url)
        if url.host != forum or not url.path.startswith("/attachments"):
            continue
        canonical = tuning_run.canonicalizer.decide(url)
        for name in url.names:
            if prior(name):
                without_evidence += 1
                assert name in canonical.dropped and canonical.layers[name] == Layer.PRIOR
            else:
                assert name in canonical.kept, "only the cold-start prior may drop here"
    assert without_evidence, "no hanging URL carried utm_* or a click id"


def test_lying_canonical_does_not_merge_products(tuning_run: LearnedRun) -> None:
    store = tuning_run.host_of("store")
    items = {e.url: e.content_key for e in tuning_run.corpus if f"//{store}/item?" in e.url}
    canonicals = {tuning_run.canonicalizer.canonical_url(parse(u)) for u in items}
    assert len(canonicals) >= len(set(items.values()))


@pytest.mark.slow  # waits out the 429s' Retry-After
def test_rate_limits_are_honoured_with_retry_after() -> None:
    sites = build_sites("tuning", 1, seed=5)
    corpus = generate_corpus(sites, 30, seed=5)
    urls = sorted({e.url for e in corpus})[:12]
    with SimWeb(sites, rate_limit_per_second=4, flaky_rate=0) as web:

        async def fetch_all() -> tuple[int, int]:
            config = FetchConfig(proxy=web.proxy_url, per_host_rate=50, max_attempts=4)
            async with Fetcher(config) as fetcher:
                results = await asyncio.gather(*(fetcher.fetch(u) for u in urls))
                return sum(r.status == 200 for r in results), fetcher.stats.retries

        ok, retries = asyncio.run(fetch_all())
    assert retries > 0, "the server's 429s were not seen"
    assert ok == len(urls)


@pytest.mark.slow  # about 26 s: every fetch waits out its timeout and retries
def test_failures_after_retries_are_inconclusive_never_unchanged() -> None:
    sites = build_sites("tuning", 1, seed=5)
    corpus = generate_corpus(sites, 60, seed=5)
    with SimWeb(sites, flaky_rate=1.0, rate_limit_per_second=0) as web:
        config = FetchConfig(
            proxy=web.proxy_url, per_host_rate=500, max_attempts=2, backoff_base=0.01
        )
        maps, _, stats, _ = learn_on(web, corpus, LearnConfig(), config)
    assert stats.failed > 0
    for domain_map in maps.values():
        for decision in domain_map.patterns.values():
            assert not decision.dropped
            assert all(
                e.layer in (Layer.INSUFFICIENT, Layer.ALLOWLIST) for e in decision.params.values()
            )


class _SamePageForEverything(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<html><body><h1>Access denied</h1><p>Please try later.</p></body></html>"
        send_html(self, 200, body)

    def log_message(self, format: str, *args: object) -> None:
        return


class _QueryIgnored(_SamePageForEverything):
    """A broken deploy: every path shows one page of its own, whatever the query asks."""

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        body = f"<html><body><h1>Listing</h1><p>{escape(path)}</p></body></html>".encode()
        send_html(self, 200, body)


class _HomePageOnly(_SamePageForEverything):
    """A real one-page site: its home page, and a 404 anywhere else."""

    def do_GET(self) -> None:
        home = urlsplit(self.path).path == "/"
        body = (
            b"<html><body><h1>Welcome home</h1><p>Our story.</p></body></html>"
            if home
            else b"<html><body><h1>Not found</h1></body></html>"
        )
        send_html(self, 200 if home else 404, body)


@pytest.fixture
def broken_site_proxy() -> Iterator[str]:
    yield from serve(_SamePageForEverything)


@pytest.fixture
def query_ignoring_proxy() -> Iterator[str]:
    yield from serve(_QueryIgnored)


def test_anomaly_gate_rejects_a_site_that_starts_ignoring_its_queries(
    tuning_run: LearnedRun, query_ignoring_proxy: str
) -> None:
    shop = tuning_run.host_of("shop")
    old = merge_update(None, tuning_run.maps[shop])
    urls = [parse(e.url) for e in tuning_run.corpus if parse(e.url).host == shop]

    async def relearn() -> None:
        async with Fetcher(FetchConfig(proxy=query_ignoring_proxy, per_host_rate=500)) as fetcher:
            learner = Learner(PageProber(fetcher))
            broken, report = await learner.learn_domain(shop, urls)
            assert not report.one_page
            verdict = anomaly_gate(old, merge_update(old, broken), 0.5)
            assert not verdict.accepted, verdict
            assert len(verdict.flipped) > verdict.kept_before / 2

    asyncio.run(relearn())


def test_a_site_answering_every_url_with_one_page_is_not_learned_as_one_page(
    tuning_run: LearnedRun, broken_site_proxy: str
) -> None:
    shop = tuning_run.host_of("shop")
    urls = [parse(e.url) for e in tuning_run.corpus if parse(e.url).host == shop]

    async def first_learn() -> None:
        async with Fetcher(FetchConfig(proxy=broken_site_proxy, per_host_rate=500)) as fetcher:
            walled, report = await Learner(PageProber(fetcher)).learn_domain(shop, urls)
        assert report.one_page
        assert walled.patterns
        for decision in walled.patterns.values():
            assert not decision.dropped, decision.to_json()
            assert not any(e.default_values for e in decision.params.values())

    asyncio.run(first_learn())
    assert not any(report.one_page for report in tuning_run.reports)


def test_a_site_whose_urls_are_all_its_home_page_is_still_learned() -> None:
    urls = [parse(f"http://home.test/?utm_source=s{n}&gclid=g{n}") for n in range(8)]

    async def learn() -> None:
        for proxy in serve(_HomePageOnly):
            async with Fetcher(FetchConfig(proxy=proxy, per_host_rate=500)) as fetcher:
                home, report = await Learner(PageProber(fetcher)).learn_domain("home.test", urls)
            assert not report.one_page
            [decision] = home.patterns.values()
            assert decision.dropped == {"gclid", "utm_source"}, decision.to_json()

    asyncio.run(learn())


def test_a_parameter_that_changes_nothing_is_unchanged_despite_page_noise() -> None:
    sites = build_sites("tuning", 1, seed=5)
    url = next(
        e.url
        for e in generate_corpus(sites, 200, seed=5)
        if "utm_source=" in e.url and "/product" in e.url
    )
    parsed = parse(url)
    with SimWeb(sites, flaky_rate=0, rate_limit_per_second=0) as web:

        async def compare() -> tuple[Outcome, Outcome]:
            async with Fetcher(FetchConfig(proxy=web.proxy_url, per_host_rate=500)) as fetcher:
                prober = PageProber(fetcher)
                template = parsed.host + "/product"
                tracking = await prober.compare(
                    template, parsed.url, parsed.without(["utm_source"])
                )
                other = parse(parsed.url.replace("id=", "id=1", 1))  # no such product
                identity = await prober.compare(template, parsed.url, other.url)
                return tracking, identity

        tracking, identity = asyncio.run(compare())
    assert tracking is Outcome.UNCHANGED
    assert identity is Outcome.CHANGED


@pytest.mark.slow  # the forum's hanging pages time out
def test_an_allowlisted_parameter_is_kept_but_its_default_value_is_elided() -> None:
    allowlist = StaticLayers.default().allowlist
    sites = build_sites("validation", 6, seed=7)
    forum = next(s for s in sites if s.archetype == 5)
    thread = forum.routes[1]
    [pager] = [p for p in thread.params if p.role is Role.PAGINATION]
    assert pager.name in allowlist and pager.default, "the trap is not in this draw"
    corpus = [
        e for e in generate_corpus([forum], 1500, seed=7) if urlsplit(e.url).path == thread.path
    ]
    with SimWeb([forum], seed=7, rate_limit_per_second=80, hang_seconds=2.0) as web:
        fetch_config = FetchConfig(
            proxy=web.proxy_url, per_host_rate=50, timeout=1.0, backoff_base=0.05
        )
        maps, _, _, _ = learn_on(web, corpus, LearnConfig(), fetch_config)
    canonicalizer = Canonicalizer()
    canonicalizer.load({d: merge_update(None, m) for d, m in maps.items()})
    default_pair = f"{pager.name}={pager.default}"
    outcomes: Counter[tuple[bool, bool]] = Counter()
    for entry in corpus:
        url = parse(entry.url)
        if pager.name not in url.names:
            continue
        decision = canonicalizer.decide(url)
        assert decision.layers[pager.name] == Layer.ALLOWLIST
        is_default = url.value_of(pager.name) == default_pair
        outcomes[is_default, pager.name in decision.kept] += 1
    assert outcomes[False, False] == 0, "a page other than the first lost its pager"
    assert outcomes[True, False] > 0 and outcomes[True, True] == 0, outcomes


class _AppShellBesideRealPages(_SamePageForEverything):
    """Real product pages under /p/, and a client-side app that answers every other path
    with one shell whose chrome has plenty of text: its item is fetched by scripts."""

    def do_GET(self) -> None:
        split = urlsplit(self.path)
        if split.path.startswith("/p/"):
            item = escape(split.path.rsplit("/", 1)[-1])
            body = (
                f"<html><body><h1>Product {item}</h1><p>Made to last.</p></body></html>"
            ).encode()
        else:
            chrome = " ".join(f"Section {n} of our catalogue" for n in range(20))
            body = (
                f"<html><body><div class='top'>{chrome}</div><div id='app'></div>"
                "<script src='/app.js'></script></body></html>"
            ).encode()
        send_html(self, 200, body)


def test_an_app_shell_answering_every_url_of_a_route_keeps_its_parameters() -> None:
    urls = [parse(f"http://spa.test/app?item={n}&utm_source=s{n}") for n in range(8)]
    urls += [parse(f"http://spa.test/p/{n}?utm_source=s{n}") for n in range(8)]

    async def learn() -> None:
        for proxy in serve(_AppShellBesideRealPages):
            async with Fetcher(FetchConfig(proxy=proxy, per_host_rate=500)) as fetcher:
                spa, report = await Learner(PageProber(fetcher)).learn_domain("spa.test", urls)
            assert not report.one_page
            assert spa.patterns["/app?item&utm_source"].kept >= {"item"}
            assert spa.patterns["/p/*?utm_source"].dropped == {"utm_source"}

    asyncio.run(learn())


def test_a_default_confirmed_beside_an_alias_is_not_applied_without_it() -> None:
    """``pid=1`` is harmless to leave out of ``?id=1&pid=1`` (the alias says the same), which
    makes it look like a default value of ``pid``. ``?pid=1&ref=footer`` loses ``ref`` and
    lands in the pattern ``?pid``, whose own URLs never carried ``pid=1``: eliding it there
    would show the home page instead of the product."""
    texts = [f"/p?id=1&pid=1&utm_source=s{n}" for n in range(12)]
    texts += [f"/p?pid={n}" for n in range(2, 14)] + [f"/p?id={n}" for n in range(2, 14)]
    texts += ["/p?pid=1&ref=footer"]
    urls = [parse("http://alias.test" + text) for text in texts]

    async def learn(proxy: str, seed: int) -> list[tuple[str, str]]:
        async with Fetcher(FetchConfig(proxy=proxy, per_host_rate=500)) as fetcher:
            learner = Learner(PageProber(fetcher), LearnConfig(seed=seed))
            learned, _ = await learner.learn_domain("alias.test", urls)
        canonicalizer = Canonicalizer()
        canonicalizer.update(merge_update(None, learned))
        return [
            (url.url, canonical)
            for url in urls
            if AliasShop.page(canonical := canonicalizer.canonical_url(url))
            != AliasShop.page(url.url)
        ]

    for proxy in serve(AliasShop):
        for seed in range(3):
            wrong = asyncio.run(learn(proxy, seed))
            assert not wrong, (seed, wrong)


class _ItemShop(BaseHTTPRequestHandler):
    """``/p?id=N``: item N, with ``size`` changing only items whose number ends in 0 (the
    apparel tenth); ``amp=1`` and tracking change nothing. A URL without ``id`` gets a
    terse 404 (a script and one line of text, evidence of nothing) or, with ``terse``
    off, the home page."""

    terse = True

    def log_message(self, format: str, *args: object) -> None:
        pass

    @staticmethod
    def page(url: str) -> str:
        query = dict(parse_qsl(urlsplit(url).query))
        if "id" not in query:
            return "missing"
        size = query.get("size", query.get("sz", "")) if query["id"].endswith("0") else ""
        return f"item {query['id']} {size}".strip()

    def do_GET(self) -> None:
        page = self.page(self.path)
        if page == "missing" and self.terse:
            send_html(self, 404, b"<script src='/e.js'></script><p>Missing item.</p>")
            return
        words = " ".join(f"{page} detail {n}" for n in range(20))
        body = f"<html><body><main><h1>{escape(page)}</h1><p>{words}</p></main></body></html>"
        send_html(self, 200, body.encode())


class _ItemShopGoingHome(_ItemShop):
    terse = False


def _learn_item_shop(
    texts: list[str], site: type[_ItemShop] = _ItemShopGoingHome
) -> tuple[DomainMap, Canonicalizer]:
    urls = [parse("http://items.test" + text) for text in texts]

    async def learn(proxy: str) -> DomainMap:
        async with Fetcher(FetchConfig(proxy=proxy, per_host_rate=500)) as fetcher:
            learned, _ = await Learner(PageProber(fetcher)).learn_domain("items.test", urls)
        return learned

    for proxy in serve(site):
        learned = asyncio.run(learn(proxy))
    canonicalizer = Canonicalizer()
    canonicalizer.update(merge_update(None, learned))
    return learned, canonicalizer


SIZES = ("xs", "s", "m", "l", "xl", "xxl")


def test_a_parameter_that_changes_a_tenth_of_the_items_is_kept() -> None:
    """``size`` is on every product URL but changes only the apparel tenth: its few values
    repeat across many items, so it is dropped only after many distinct items, and one
    change on one of them keeps it. No two sizes of an apparel item may merge."""
    texts = [f"/p?id={n}&size={SIZES[(n + k) % 6]}" for n in range(1, 61) for k in (0, 2, 4)]
    learned, canonicalizer = _learn_item_shop(texts)
    decision = learned.patterns["/p?id&size"]
    assert "size" in decision.kept, decision.to_json()
    pages: dict[str, set[str]] = defaultdict(set)
    for text in texts:
        url = "http://items.test" + text
        pages[canonicalizer.canonicalize(url)].add(_ItemShop.page(url))
    assert all(len(shown) == 1 for shown in pages.values()), pages


class _AliasedItemShop(_ItemShopGoingHome):
    """``_ItemShop`` whose product number comes as ``id``, as ``pid``, or as both."""

    @staticmethod
    def page(url: str) -> str:
        query = dict(parse_qsl(urlsplit(url).query))
        number = query.get("id", query.get("pid"))
        if number is None:
            return "missing"
        size = query.get("size", "") if number.endswith("0") else ""
        return f"item {number} {size}".strip()


def test_a_size_beside_two_aliases_of_the_product_number_merges_no_two_pages() -> None:
    """``id`` and ``pid`` name one product: each alone leaves a page unchanged, so items
    counted without either are many products taken for one. The shape must not look tried
    out after a few of them: ``size``, which changes the apparel tenth only, is kept."""
    texts = [
        f"/p?id={n}&pid={n}&size={SIZES[(n + k) % 6]}" for n in range(1, 61) for k in (0, 2, 4)
    ]
    learned, canonicalizer = _learn_item_shop(texts, _AliasedItemShop)
    decision = learned.patterns["/p?id&pid&size"]
    assert "size" in decision.kept, decision.to_json()
    assert {"id", "pid"} & decision.kept, decision.to_json()
    pages: dict[str, set[str]] = defaultdict(set)
    for text in texts:
        url = "http://items.test" + text
        pages[canonicalizer.canonicalize(url)].add(_AliasedItemShop.page(url))
    assert all(len(shown) == 1 for shown in pages.values()), pages


def test_a_choice_like_parameter_that_changes_no_item_is_dropped_on_many_items() -> None:
    """A small value set repeating across items (``tab``) that changes nothing still goes,
    once it left enough distinct items unchanged; the map and ``--json`` say how many."""
    tabs = ("info", "seats", "map")
    texts = [f"/p?id={n}&tab={tabs[(n + k) % 3]}" for n in range(1, 41) for k in (0, 1)]
    learned, canonicalizer = _learn_item_shop(texts)
    evidence = learned.patterns["/p?id&tab"].params["tab"]
    assert evidence.decision == "drop", evidence
    assert evidence.items >= LearnConfig().choice_items
    explained = canonicalizer.explain("http://items.test/p?id=3&tab=map").to_json()
    assert explained["items"] == {"tab": evidence.items}
    assert learned.to_json()["patterns"]["/p?id&tab"]["params"]["tab"]["items"] == evidence.items


def test_a_parameter_with_one_value_is_decided_on_distinct_items() -> None:
    """``amp=1`` always has the one value: it is decided on items like any other, and it is
    that value, the only one tried, that the canonical form leaves out."""
    texts = [f"/p?id={n}&amp=1" for n in range(1, 16)] + [f"/p?id={n}" for n in range(1, 16)]
    learned, canonicalizer = _learn_item_shop(texts)
    evidence = learned.patterns["/p?amp&id"].params["amp"]
    assert evidence.default_values == ["amp=1"], evidence
    assert evidence.items >= LearnConfig().samples
    for n in (3, 40):
        assert canonicalizer.canonicalize(f"http://items.test/p?id={n}&amp=1") == (
            f"http://items.test/p?id={n}"
        )


def test_an_identifier_whose_removal_shows_a_terse_error_page_costs_no_other_evidence() -> None:
    """Removing ``id`` shows a terse 404 (inconclusive). A group holding it is split like a
    changed one, ``id`` is isolated and kept, and the tracking parameters beside it are
    decided on their own evidence."""
    texts = [f"/p?id={n}&utm_source=mail&gclid=g{n}x{k}" for n in range(1, 21) for k in (1, 2)]
    learned, _ = _learn_item_shop(texts, _ItemShop)
    decision = learned.patterns["/p?gclid&id&utm_source"]
    assert decision.dropped == {"gclid", "utm_source"}, decision.to_json()
    assert decision.params["id"].layer is Layer.INSUFFICIENT


def test_the_common_value_of_a_parameter_that_changes_some_items_is_no_default() -> None:
    """``size=m`` on most URLs leaves most pages (every non-apparel item) as they are
    without it, yet it picks the size of an apparel item: it is not a default value."""
    texts = [
        f"/p?id={n}&size={'m' if k < 4 else SIZES[(n + k) % 6]}"
        for n in range(1, 61)
        for k in range(5)
    ]
    learned, canonicalizer = _learn_item_shop(texts)
    assert not learned.patterns["/p?id&size"].params["size"].default_values
    pages: dict[str, set[str]] = defaultdict(set)
    for text in texts:
        url = "http://items.test" + text
        pages[canonicalizer.canonicalize(url)].add(_ItemShop.page(url))
    assert all(len(shown) == 1 for shown in pages.values()), pages


def test_an_allowlisted_parameter_that_changes_some_items_gets_no_default() -> None:
    """``sz`` (allowlisted, kept without sampling) that picks the size of apparel only:
    ``sz=m``, harmless on every other item, is no default value."""
    texts = [
        f"/p?id={n}&sz={'m' if k < 4 else SIZES[(n + k) % 6]}"
        for n in range(1, 61)
        for k in range(5)
    ]
    learned, canonicalizer = _learn_item_shop(texts)
    assert "sz" in StaticLayers.default().allowlist
    assert not learned.patterns["/p?id&sz"].params["sz"].default_values
    pages: dict[str, set[str]] = defaultdict(set)
    for text in texts:
        url = "http://items.test" + text
        pages[canonicalizer.canonicalize(url)].add(_ItemShop.page(url))
    assert all(len(shown) == 1 for shown in pages.values()), pages


class _Listing(BaseHTTPRequestHandler):
    """``/list?cat=N``: category N's newest posts first; ``sort=latest`` is that default,
    ``sort=oldest`` and ``sort=top`` show other pages."""

    def log_message(self, format: str, *args: object) -> None:
        pass

    @staticmethod
    def page(url: str) -> str:
        query = dict(parse_qsl(urlsplit(url).query))
        return f"category {query.get('cat', 'all')} by {query.get('sort', 'latest')}"

    def do_GET(self) -> None:
        page = self.page(self.path)
        words = " ".join(f"{page} post {n}" for n in range(20))
        body = f"<html><body><main><h1>{escape(page)}</h1><p>{words}</p></main></body></html>"
        send_html(self, 200, body.encode())


def _learn_listing(texts: list[str], seed: int = 0) -> tuple[DomainMap, Canonicalizer]:
    urls = [parse("http://list.test" + text) for text in texts]

    async def learn(proxy: str) -> DomainMap:
        async with Fetcher(FetchConfig(proxy=proxy, per_host_rate=500)) as fetcher:
            learner = Learner(PageProber(fetcher), LearnConfig(seed=seed))
            learned, _ = await learner.learn_domain("list.test", urls)
        return learned

    for proxy in serve(_Listing):
        learned = asyncio.run(learn(proxy))
    canonicalizer = Canonicalizer()
    canonicalizer.update(merge_update(None, learned))
    return learned, canonicalizer


def test_a_parameter_seen_with_its_default_value_only_keeps_its_other_values() -> None:
    """Every sampled URL carries ``sort=latest``, the listing's default: leaving it out
    changes nothing on any item, but that says nothing of ``sort=oldest``. Only the values
    seen harmless are dropped; a URL with another value keeps it."""
    texts = [f"/list?cat={n}&sort=latest" for n in range(1, 31)]
    learned, canonicalizer = _learn_listing(texts)
    evidence = learned.patterns["/list?cat&sort"].params["sort"]
    assert evidence.default_values == ["sort=latest"], evidence
    assert canonicalizer.canonicalize("http://list.test/list?cat=3&sort=latest") == (
        canonicalizer.canonicalize("http://list.test/list?cat=3")
    )
    for other in ("oldest", "top"):
        url = f"http://list.test/list?cat=3&sort={other}"
        assert canonicalizer.canonicalize(url) == url


def test_a_parameter_mostly_seen_with_its_default_value_merges_no_two_pages() -> None:
    """``sort=latest`` on most listing URLs, the other orders on a few: whichever items
    the sampling picks, no two different pages share a canonical URL."""
    texts = [f"/list?cat={n}&sort=latest" for n in range(1, 81)]
    texts += [f"/list?cat=4&sort={other}" for other in ("oldest", "top")]
    for seed in range(5):
        _, canonicalizer = _learn_listing(texts, seed)
        pages: dict[str, set[str]] = defaultdict(set)
        for text in texts:
            url = "http://list.test" + text
            pages[canonicalizer.canonicalize(url)].add(_Listing.page(url))
        assert all(len(shown) == 1 for shown in pages.values()), (seed, pages)


class _Shelves(BaseHTTPRequestHandler):
    """Shelves under ``/list/N``, in the order ``sort`` asks for; ``sort=relevance`` is the
    order a shelf shows without it."""

    def do_GET(self) -> None:
        split = urlsplit(self.path)
        order = escape(dict(parse_qsl(split.query)).get("sort", "relevance"))
        shelf = escape(split.path.rsplit("/", 1)[-1])
        body = f"<html><body><h1>Shelf {shelf}</h1><p>Its goods by {order}.</p></body></html>"
        send_html(self, 200, body.encode())

    def log_message(self, format: str, *args: object) -> None:
        return


def test_verifying_the_form_that_elides_a_default_verifies_the_forms_that_remove_less() -> None:
    """A pattern's URLs with ``sort=relevance`` (a default) lose ``utm_source`` and ``sort``,
    the others ``utm_source`` only. One URL carrying the default, shown unchanged with both
    removed, verifies both forms: all dropped parameters were removed together."""
    orders = ["relevance", "price", "newest"]
    urls = [
        parse(f"http://shop.test/list/{n}?sort={orders[n % 3]}&utm_source=s{n}") for n in range(30)
    ]

    async def learn(proxy: str) -> DomainMap:
        async with Fetcher(FetchConfig(proxy=proxy, per_host_rate=500)) as fetcher:
            learned, _ = await Learner(PageProber(fetcher)).learn_domain("shop.test", urls)
        return learned

    for proxy in serve(_Shelves):
        learned = asyncio.run(learn(proxy))
    decision = learned.patterns["/list/*?sort&utm_source"]
    assert decision.kept == {"sort"} and decision.dropped == {"utm_source"}
    assert decision.params["sort"].default_values == ["sort=relevance"]
    assert decision.verification.samples == 1, decision.verification


def test_aliases_are_two_names_for_one_identifier_and_nothing_else() -> None:
    """On a sample pool's few URLs, an identifier given twice has the same value under
    both names; on a large shape its values go one to one and come back. Tracking pairs
    (few values) and click ids (new on every URL) are no aliases: kept in the item key,
    they would count one product as many items."""

    def urls(texts: list[str]) -> list[NormalizedURL]:
        return [parse("http://s.test/p?" + text) for text in texts]

    few = LearnConfig().choice_values
    pool = urls([f"id={n}&pid={n}&size=m" for n in (3, 8, 11)] + ["id=4", "pid=9"])
    assert _aliases(pool, {"id", "pid", "size"}, few) == {"id", "pid"}
    tracking = urls(
        [f"id={n}&utm_source={s}&utm_medium={m}" for n in range(40) for s, m in (("g", "cpc"),)]
        + [f"id={n}&utm_source=fb&utm_medium=social" for n in range(40)]
    )
    assert _aliases(tracking, {"utm_source", "utm_medium"}, few) == set()
    clicks = urls([f"id=1&gclid=g{n}&fbclid=f{n}" for n in range(40)])
    assert _aliases(clicks, {"gclid", "fbclid"}, few) == set()
    large = urls([f"sku=A{n}&item={n}" for n in range(20) for _ in range(2)])
    assert _aliases(large, {"sku", "item"}, few) == {"sku", "item"}
