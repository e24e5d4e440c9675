"""Audits of dropped parameters, against a loopback store whose ``size`` changes a few items."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from miqps.audit import DEFAULT_AUDIT_SHARE, Audit, AuditRule, ItemMemory, audit_map
from miqps.canonical import Canonicalizer
from miqps.cli import main
from miqps.fetch import FetchConfig, Fetcher
from miqps.maps import (
    DecisionSummary,
    DomainMap,
    Layer,
    ParamEvidence,
    PatternDecision,
    Verification,
    read_maps,
    write_maps,
)
from miqps.prober import PageProber
from miqps.update import Why
from miqps.urls import NormalizedURL, parse
from simweb.store import (
    SometimesStore,
    promo_at,
    serve_store,
    store_host,
    store_urls,
    wrong_map,
)
from tests.miqps.loopback import CountingListener, serve

pytestmark = pytest.mark.timeout(60)

SHAPE_KEY = "/product?id&ref&size"


@pytest.fixture(scope="module")
def proxy() -> Iterator[str]:
    yield from serve_store()


def run_audit(
    proxy: str,
    current: DomainMap,
    urls: list[NormalizedURL],
    rule: AuditRule,
    max_flip_share: float = 0.5,
    batch: int = 0,
) -> tuple[DomainMap, list[int], int]:
    """Audit ``urls`` in batches against the newest map: the last map, the batch ends after
    which something was restored, and the items audited."""

    async def go() -> tuple[DomainMap, list[int], int]:
        restored_after: list[int] = []
        audited = 0
        newest = current
        memory = ItemMemory()
        step = batch or len(urls)
        config = FetchConfig(proxy=proxy, per_host_rate=1000.0, per_host_concurrency=4)
        async with Fetcher(config) as fetcher:
            prober = PageProber(fetcher)
            for start in range(0, len(urls), step):
                audit = await audit_map(
                    prober,
                    newest,
                    urls[start : start + step],
                    rule,
                    memory,
                    max_flip_share=max_flip_share,
                )
                audited += audit.audited
                if audit.published is not None:
                    newest = audit.published
                    restored_after.append(start + step)
        return newest, restored_after, audited

    return asyncio.run(go())


@pytest.mark.slow  # 20,000 URLs
def test_a_size_that_changes_five_percent_of_items_is_restored_within_20000_urls(
    proxy: str,
) -> None:
    host = store_host(1, 5)
    current = wrong_map(host)
    urls = store_urls(host, 20_000, 4000, seed=1)
    final, restored_after, audited = run_audit(
        proxy, current, urls, AuditRule(DEFAULT_AUDIT_SHARE, seed="1"), batch=500
    )
    assert restored_after and restored_after[0] <= 20_000
    assert final.version == current.version + 1  # one restore, one new version
    for pattern in ("/product?id&ref&size", "/product?id&size"):
        decision = final.patterns[pattern]
        assert "size" in decision.kept and "size" not in decision.dropped
        assert decision.params["size"].layer == Layer.LEARNED
        assert decision.params["size"].changed == 1
    assert final.patterns[SHAPE_KEY].dropped == {"ref"}  # ref changes nothing: still dropped
    assert audited > 20


def test_noise_alone_restores_nothing(proxy: str) -> None:
    """Every page has a render stamp and a rotating promo; size changes no product."""
    host = store_host(0, 0)
    urls = store_urls(host, 1500, 4000, seed=0)
    final, restored_after, audited = run_audit(proxy, wrong_map(host), urls, AuditRule(0.2))
    assert audited > 100
    assert restored_after == []
    assert final.patterns[SHAPE_KEY].dropped == {"ref", "size"}


def _lucky_item(host: str) -> NormalizedURL:
    """A product URL of ``host`` on whose first fetches the store's promo repeats by chance
    as a change of ``size`` would: another promo than the page without ``size``, the same
    on the two refetches that should show it moving, and once more on the confirming
    comparison, but not with the same promos on both pages as the first time."""
    for number in range(1, 100_000):
        url = parse(f"http://{host}/product?id={number}&size=M")
        with_size = [promo_at(url.url, turn) for turn in range(5)]
        without = [promo_at(url.with_only(frozenset({"id"})), turn) for turn in range(2)]
        if (
            with_size[0] == with_size[1] == with_size[2] != without[0]
            and with_size[3] == with_size[4] != without[1]
            and (with_size[3], without[1]) != (with_size[0], without[0])
        ):
            return url
    raise AssertionError("no such item")


def test_a_promo_repeating_by_chance_on_every_refetch_restores_nothing(proxy: str) -> None:
    """The noise of the store's pages is chosen per URL and fetch, so this run is the same
    every time: the first audited item's promo looks like content on both comparisons."""
    host = store_host(7, 0)
    current = wrong_map(host)
    item = _lucky_item(host)
    assert item.pattern == "/product?id&size"

    async def go() -> Audit:
        config = FetchConfig(proxy=proxy, per_host_rate=1000.0)
        async with Fetcher(config) as fetcher:
            return await audit_map(PageProber(fetcher), current, [item], AuditRule(1.0))

    audit = asyncio.run(go())
    assert audit.audited == 1
    assert audit.restores == [] and audit.published is None
    assert audit.unconfirmed == 1


@pytest.mark.slow  # 2,000 items, about 10,000 fetches on loopback
@pytest.mark.timeout(240)  # 37 s on a quiet machine, 67 s on a busy one
def test_a_rotating_promo_restores_nothing_where_the_template_s_noise_is_unknown(
    proxy: str,
) -> None:
    """Each item audited with a noise model of its own, as on a domain audited rarely: its
    promo (one of three) sometimes repeats both pages' variants on a confirming comparison,
    which took 8 items in 2,000 for a change of ``size`` when one comparison confirmed."""
    host = store_host(7, 0)  # size changes no product
    current = wrong_map(host)
    urls = store_urls(host, 2000, 1_000_000, seed=3)

    async def go() -> tuple[int, int]:
        config = FetchConfig(proxy=proxy, per_host_rate=10_000.0, per_host_concurrency=8)
        audited = restored = 0
        async with Fetcher(config) as fetcher:
            for url in urls:
                audit = await audit_map(PageProber(fetcher), current, [url], AuditRule(1.0))
                audited += audit.audited
                restored += len(audit.restores)
        return audited, restored

    audited, restored = asyncio.run(go())
    assert audited == len(urls)
    assert restored == 0


def test_a_size_that_changes_every_item_is_restored_by_a_noise_model_of_its_own(
    proxy: str,
) -> None:
    host = store_host(8, 100)  # size changes every product
    current = wrong_map(host)
    url = parse(f"http://{host}/product?id=929&size=XL")  # M, the default, would change nothing

    async def go() -> Audit:
        config = FetchConfig(proxy=proxy, per_host_rate=1000.0)
        async with Fetcher(config) as fetcher:
            return await audit_map(PageProber(fetcher), current, [url], AuditRule(1.0))

    audit = asyncio.run(go())
    assert audit.audited == 1
    assert [(restore.pattern, restore.name) for restore in audit.restores] == [
        (url.pattern, "size")
    ]


def test_a_restore_passes_the_anomaly_gate_and_reaches_the_domains_evidence(proxy: str) -> None:
    host = store_host(2, 100)  # size changes every product
    current = wrong_map(host)
    domain_wide = PatternDecision(
        frozenset(),
        frozenset({"size"}),
        {"size": ParamEvidence("drop", Layer.DOMAIN, 1, 0, 1, 0)},
        Verification(samples=1),
        current.updated_at,
    )
    own_evidence = replace(
        domain_wide, params={"size": ParamEvidence("drop", Layer.LEARNED, 5, 0, 5, 0)}
    )
    current.patterns["/help?size"] = domain_wide
    current.patterns["/list?size"] = own_evidence
    urls = store_urls(host, 40, 4000, seed=2)

    async def go() -> Audit:
        config = FetchConfig(proxy=proxy, per_host_rate=1000.0)
        async with Fetcher(config) as fetcher:
            return await audit_map(
                PageProber(fetcher), current, urls, AuditRule(1.0), max_flip_share=0.0
            )

    audit = asyncio.run(go())
    assert audit.update.verdict is not None and audit.update.verdict.accepted
    assert audit.update.verdict.flipped == ()
    published = audit.published
    assert published is not None and published.version == current.version + 1
    assert {entry.why for entry in audit.update.decided.values()} == {Why.AUDIT}
    assert "size" in published.patterns["/help?size"].kept  # dropped on the domain's evidence
    assert "size" in published.patterns["/list?size"].dropped  # its own shape's evidence
    assert ("/product", "size") in audit.restored


def test_unreachable_items_do_not_count_and_change_nothing() -> None:
    host = store_host(3, 100)
    current = wrong_map(host)
    urls = store_urls(host, 30, 4000, seed=3)
    refusing = CountingListener(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
    try:

        async def go() -> Audit:
            config = FetchConfig(
                proxy=f"http://127.0.0.1:{refusing.port}",
                per_host_rate=1000.0,
                timeout=2.0,
                backoff_base=0.01,
            )
            async with Fetcher(config) as fetcher:
                return await audit_map(PageProber(fetcher), current, urls, AuditRule(1.0))

        audit = asyncio.run(go())
    finally:
        refusing.close()
    assert audit.inconclusive > 0 and audit.audited == 0
    assert audit.published is None and audit.restores == []


def test_items_are_chosen_by_item_not_by_url() -> None:
    current = wrong_map("shop.test")
    decision = current.patterns[SHAPE_KEY]
    rule = AuditRule(0.05)
    chosen = 0
    for number in range(20_000):
        one = parse(f"http://shop.test/product?id={number}&size=M&ref=a")
        other = parse(f"http://shop.test/product?id={number}&size=XL&ref=b")
        first = rule.chooses(one, decision)
        assert first == rule.chooses(other, decision)  # dropped values: one item
        chosen += first is not None
    assert 800 <= chosen <= 1200  # 5% of 20,000 distinct items
    assert AuditRule(0.0).chooses(one, decision) is None
    with pytest.raises(ValueError):
        AuditRule(1.5)


def test_an_item_is_audited_once_and_a_frozen_map_not_at_all(proxy: str) -> None:
    host = store_host(4, 0)
    current = wrong_map(host)
    same_item = [parse(f"http://{host}/product?id=7&size={size}") for size in ("S", "M", "L")]
    _, _, audited = run_audit(proxy, current, same_item, AuditRule(1.0))
    assert audited == 1
    current.frozen = True
    _, _, audited = run_audit(proxy, current, same_item, AuditRule(1.0))
    assert audited == 0


def test_learn_on_an_existing_map_audits_the_new_urls(
    proxy: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    host = store_host(5, 100)
    maps = tmp_path / "maps.jsonl"
    write_maps(maps, [wrong_map(host)])
    urls = tmp_path / "urls.txt"
    urls.write_text("\n".join(url.url for url in store_urls(host, 200, 4000, seed=5)) + "\n")
    code = main(
        [
            "learn",
            "--urls",
            str(urls),
            "--out",
            str(maps),
            "--proxy",
            proxy,
            "--rate",
            "1000",
            "--no-progress",
        ]
    )
    assert code == 0
    summary = capsys.readouterr().out
    assert "parameters restored" in summary
    assert f"restored by an audit: {host} /product size" in summary
    learned = read_maps(maps)[host]
    assert "size" in learned.patterns[SHAPE_KEY].kept
    assert learned.version == 2
    assert json.loads(maps.read_text())["patterns"][SHAPE_KEY]["dropped"] == ["ref"]


class DisallowingStore(SometimesStore):
    """The store, with a robots.txt that disallows its products."""

    def do_GET(self) -> None:
        if urlsplit(self.path).path == "/robots.txt":
            body = b"User-agent: *\nDisallow: /product\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        super().do_GET()


def test_disallowed_items_are_not_fetched_and_do_not_count() -> None:
    host = store_host(6, 100)
    current = wrong_map(host)
    urls = store_urls(host, 30, 4000, seed=6)

    async def go(proxy: str) -> Audit:
        config = FetchConfig(proxy=proxy, per_host_rate=1000.0)
        async with Fetcher(config) as fetcher:
            return await audit_map(PageProber(fetcher), current, urls, AuditRule(1.0))

    for proxy in serve(DisallowingStore):
        audit = asyncio.run(go(proxy))
    assert audit.inconclusive > 0 and audit.audited == 0
    assert audit.published is None and audit.restores == []


def test_learn_refuses_an_audit_share_outside_zero_to_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    urls = tmp_path / "urls.txt"
    urls.write_text("http://shop.test/product?id=1&size=M\n")
    out = tmp_path / "maps.jsonl"
    code = main(["learn", "--urls", str(urls), "--out", str(out), "--audit-share", "1.5"])
    assert code == 2
    assert "audit share must be between 0 and 1" in capsys.readouterr().err
    assert not out.exists()


@given(
    st.floats(min_value=0.0, max_value=1.0),
    st.integers(min_value=0, max_value=2**64 - 1),
)
def test_the_integer_bound_chooses_what_the_share_chooses(share: float, digest: int) -> None:
    """A compiled step compares digests with ``chosen_below``; the rule's own test is
    ``digest < share * 2**64`` in floating point."""
    rule = AuditRule(share)
    assert (digest < rule.chosen_below) == (digest < share * 2**64)
    bound = rule.chosen_below
    for near in (bound - 1, bound):
        if 0 <= near < 2**64:
            assert (near < bound) == (near < share * 2**64)


def test_the_decisions_that_drop_read_alike_from_a_document_and_from_objects() -> None:
    domain_map = wrong_map("shop.test")
    from_objects = Canonicalizer()
    from_objects.update(domain_map)
    from_document = Canonicalizer()
    from_document.update(domain_map, domain_map.dumps().encode())
    summaries = from_objects.dropping_decisions("shop.test")
    assert summaries is not None and summaries[1]
    assert summaries == from_document.dropping_decisions("shop.test")
    assert summaries == (
        domain_map.version,
        {
            key: DecisionSummary(d.kept, d.dropped, d.decided_at, d.urls_seen)
            for key, d in domain_map.patterns.items()
            if d.dropped
        },
    )
    assert from_document.dropping_decisions("other.test") is None
