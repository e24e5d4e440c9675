"""How soon an audit restores a dropped parameter that changes a few items, and what audits cost.

A store on loopback (:class:`simweb.store.SometimesStore`) shows its products at
``/product?id=N``; every link carries ``size`` and often ``ref``. ``size`` changes the page
of ``--changing-share`` of the products (the apparel: the size picked and its price are
shown), ``ref`` none. Every page has a render stamp and a promo rotating among three
variants. The map given to the audits wrongly drops ``size`` (as if its samples had been
five other products). ``--urls``
URLs of random products (of ``--items``) then pass, in order, through
:func:`miqps.audit.audit_map` in batches of ``--batch``, each batch against the newest map,
as the stream and ``miqps learn`` feed it. Printed per trial (each with other apparel and
another choice of audited items): URLs passed when ``size`` was restored, audits, fetches
and fetches per 1,000 URLs. A control store whose ``size`` changes nothing must restore
nothing. Last, what choosing items costs the canonicalizer front per URL of a learned
pattern that drops parameters (:class:`streams.front.sampler.AuditForwarder`), against the
decision it makes for every URL anyway (``Canonicalizer.decide``), timed in the same run::

    .venv/bin/python -m bench.audit [--trials 10] [--urls 20000] [--items 4000] [--share 0.05]

With ``--simweb``, the same on the simulated web instead: the validation family's general
store, whose apparel ``size`` is set to change 5% of its products. Its map is learned by
``miqps learn``'s function on 3,000 URLs, then made to drop ``size`` wherever it kept it,
and the next ``--urls`` URLs of its product pages that carry ``size`` are audited::

    .venv/bin/python -m bench.audit --simweb [--trials 5]

It prints figures; it asserts no target.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from dataclasses import dataclass

from miqps.audit import DEFAULT_AUDIT_SHARE, AuditRule, ItemMemory, audit_map
from miqps.canonical import Canonicalizer, StaticLayers
from miqps.fetch import FetchConfig, Fetcher
from miqps.learner import LearnConfig, Learner
from miqps.maps import DomainMap, Layer, ParamEvidence, PatternDecision
from miqps.prober import PageProber
from miqps.update import update_all
from miqps.urls import NormalizedURL, parse, path_shape, split_pattern
from simweb.store import serve_store, store_host, store_urls, wrong_map


@dataclass(slots=True)
class Trial:
    restored_after: int | None
    restored: list[tuple[str, str]]
    audits: int
    inconclusive: int
    fetches: int
    urls: int


async def run_trial(
    proxy: str, host: str, urls: list[NormalizedURL], rule: AuditRule, batch: int
) -> Trial:
    """Pass ``urls`` through audits of the store's wrong map, ``batch`` at a time."""
    current = wrong_map(host)
    memory = ItemMemory()
    trial = Trial(None, [], 0, 0, 0, len(urls))
    config = FetchConfig(proxy=proxy, per_host_rate=1000.0, per_host_concurrency=4, timeout=5.0)
    async with Fetcher(config) as fetcher:
        prober = PageProber(fetcher)
        for start in range(0, len(urls), batch):
            audit = await audit_map(prober, current, urls[start : start + batch], rule, memory)
            trial.audits += audit.audited
            trial.inconclusive += audit.inconclusive
            if audit.published is not None:
                current = audit.published
                trial.restored.extend(audit.restored)
                if trial.restored_after is None and ("/product", "size") in audit.restored:
                    trial.restored_after = min(start + batch, len(urls))
        trial.fetches = fetcher.stats.requests
    return trial


def dropping(domain_map: DomainMap, shape: str, name: str) -> DomainMap:
    """``domain_map`` with ``name`` dropped in every pattern of ``shape``, as if every item
    it was tested on had shown no change."""
    patterns = dict(domain_map.patterns)
    for pattern, decision in domain_map.patterns.items():
        if split_pattern(pattern)[0] != shape or name not in decision.kept:
            continue
        params = dict(decision.params)
        params[name] = ParamEvidence("drop", Layer.LEARNED, 5, 0, 5, 0)
        patterns[pattern] = PatternDecision(
            decision.kept - {name},
            decision.dropped | {name},
            params,
            decision.verification,
            decision.decided_at,
            decision.urls_seen,
        )
    return DomainMap(domain_map.domain, domain_map.version, domain_map.updated_at, patterns)


async def simweb_trials(args: argparse.Namespace) -> None:
    from dataclasses import replace

    from simweb.corpus import generate_corpus
    from simweb.server import SimWeb
    from simweb.sites import build_sites

    site, route, size = next(
        (site, route, param)
        for site in build_sites("validation", 12, 7)
        for route in site.routes
        for param in route.params
        if param.item_share < 1.0
    )
    five = replace(size, item_share=args.changing_share / 100)
    route = replace(route, params=tuple(five if p is size else p for p in route.params))
    site = replace(site, routes=tuple(route if r.name == route.name else r for r in site.routes))
    corpus = [parse(item.url) for item in generate_corpus([site], 3000 + 3 * args.urls, 1)]
    learning, rest = corpus[:3000], corpus[3000:]
    shape = path_shape(route.path)
    passing = [url for url in rest if path_shape(url.path) == shape and size.name in url.names]
    passing = passing[: args.urls]
    with SimWeb([site], seed=0, rate_limit_per_second=0, flaky_rate=0.0) as web:
        config = FetchConfig(proxy=web.proxy_url, per_host_rate=1000.0, timeout=5.0)
        async with Fetcher(config) as fetcher:
            updates = await update_all(Learner(PageProber(fetcher), LearnConfig()), {}, learning)
        learned = updates[site.host].published
        assert learned is not None
        kept_by_learning = sorted(
            pattern
            for pattern, decision in learned.patterns.items()
            if split_pattern(pattern)[0] == shape and size.name in decision.kept
        )
        wrong = dropping(learned, shape, size.name)
        print(
            f"{site.host}: {size.name} changes {args.changing_share}% of {len(site.catalog.items)} "
            f"products; learned on 3,000 URLs, it kept {size.name} in "
            f"{len(kept_by_learning)} patterns of {shape}, now dropped; "
            f"{len(passing)} URLs of {shape} with {size.name} pass"
        )
        for seed in range(1, args.trials + 1):
            rule = AuditRule(args.share, seed=str(seed))
            trial = await run_simweb_trial(
                web.proxy_url, wrong, passing, rule, args.batch, (shape, size.name)
            )
            after = "never" if trial.restored_after is None else str(trial.restored_after)
            print(
                f"seed {seed}: {size.name} restored after {after} URLs; {trial.audits} audits, "
                f"{trial.inconclusive} inconclusive, {trial.fetches} fetches "
                f"({trial.fetches * 1000 / trial.urls:.1f} per 1,000 URLs); also restored: "
                f"{', '.join(f'{s} {n}' for s, n in trial.restored if n != size.name) or 'nothing'}"
            )


async def run_simweb_trial(
    proxy: str,
    current: DomainMap,
    urls: list[NormalizedURL],
    rule: AuditRule,
    batch: int,
    restoring: tuple[str, str],
) -> Trial:
    """:func:`run_trial` on the simulated web, until ``restoring`` (shape, name) is restored."""
    memory = ItemMemory()
    trial = Trial(None, [], 0, 0, 0, len(urls))
    config = FetchConfig(proxy=proxy, per_host_rate=1000.0, per_host_concurrency=4, timeout=5.0)
    async with Fetcher(config) as fetcher:
        prober = PageProber(fetcher)
        for start in range(0, len(urls), batch):
            audit = await audit_map(prober, current, urls[start : start + batch], rule, memory)
            trial.audits += audit.audited
            trial.inconclusive += audit.inconclusive
            if audit.published is not None:
                current = audit.published
                trial.restored.extend(audit.restored)
                if trial.restored_after is None and restoring in audit.restored:
                    trial.restored_after = min(start + batch, len(urls))
        trial.fetches = fetcher.stats.requests
    return trial


def front_cost(urls: list[NormalizedURL], share: float) -> tuple[float, float]:
    """Microseconds per URL: the front's audit choice, and the decision of the URL."""
    from streams.front.sampler import AuditForwarder
    from streams.maps.live import LiveMaps

    domain_map = wrong_map(urls[0].host)
    live_maps = LiveMaps(reverify_after=3600)  # as the front holds them: compact JSON
    live_maps.apply(domain_map)
    patterns = [url.pattern for url in urls]
    forwarder = AuditForwarder(AuditRule(share), 20_000)
    started = time.perf_counter()
    for url, pattern in zip(urls, patterns, strict=True):
        forwarder.offer(
            live_maps.canonicalizer.dropping_decisions, domain_map.version, url, pattern, 0.0
        )
    choosing = time.perf_counter() - started
    canonicalizer = Canonicalizer(StaticLayers.default())
    canonicalizer.load({domain_map.domain: domain_map})
    started = time.perf_counter()
    for url in urls:
        canonicalizer.decide(url)
    deciding = time.perf_counter() - started
    return choosing / len(urls) * 1e6, deciding / len(urls) * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--urls", type=int, default=20000)
    parser.add_argument("--items", type=int, default=4000)
    parser.add_argument("--share", type=float, default=DEFAULT_AUDIT_SHARE)
    parser.add_argument("--changing-share", type=int, default=5, help="percent of products")
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--simweb", action="store_true", help="the simulated web's store")
    args = parser.parse_args(argv)
    if args.simweb:
        asyncio.run(simweb_trials(args))
        return 0
    for proxy in serve_store():
        rows: list[tuple[str, Trial]] = []
        for seed in range(1, args.trials + 1):
            host = store_host(seed, args.changing_share)
            urls = store_urls(host, args.urls, args.items, seed)
            rule = AuditRule(args.share, seed=str(seed))
            rows.append((host, asyncio.run(run_trial(proxy, host, urls, rule, args.batch))))
        control_host = store_host(0, 0)
        control = asyncio.run(
            run_trial(
                proxy,
                control_host,
                store_urls(control_host, args.urls, args.items, 0),
                AuditRule(args.share, seed="0"),
                args.batch,
            )
        )
    print(
        f"audit share {args.share:g}; {args.urls} URLs of {args.items} products per trial; "
        f"size changes {args.changing_share}% of products"
    )
    print(
        "| trial | size restored after (URLs) | audits | inconclusive | fetches | per 1,000 URLs |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for host, trial in [*rows, (f"{control_host} (control)", control)]:
        after = "never" if trial.restored_after is None else str(trial.restored_after)
        print(
            f"| {host} | {after} | {trial.audits} | {trial.inconclusive} | {trial.fetches} | "
            f"{trial.fetches * 1000 / trial.urls:.1f} |"
        )
    restored = [t.restored_after for _, t in rows if t.restored_after is not None]
    if restored:
        print(
            f"restored in {len(restored)} of {len(rows)} trials; after {min(restored)}–"
            f"{max(restored)} URLs (median {statistics.median(restored):g}); "
            f"control restored: {control.restored or 'nothing'}"
        )
    else:
        print(f"restored in 0 of {len(rows)} trials; control restored: {control.restored}")
    choosing, deciding = front_cost(
        store_urls(store_host(1, 5), 100_000, args.items, 1), args.share
    )
    print(
        f"front: choosing audit items {choosing:.2f} µs per URL, deciding the URL "
        f"{deciding:.2f} µs ({choosing / deciding:.2f}×)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
