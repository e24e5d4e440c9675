"""How fast chromium renders the dashboard's domain list and one domain's page with
10,000 domains and 100,000 patterns live (target: at most 1 s each).

Synthetic maps are loaded straight into the dashboard's state (no Kafka), with a tail of
canonical URLs and audit records so every view has numbers; the dashboard's own HTTP server
serves it and Debian's chromium (through Playwright) opens it. Each time runs from the
action (opening the page, choosing a domain, typing a filter) to the view being in the DOM,
measured the same way, in the same run, against a baseline dashboard with 10 domains::

    .venv/bin/python -m bench.dashboard [--domains 10000] [--patterns 100000] [--repeat 5]

It prints figures and ratios; it asserts no target.
"""

from __future__ import annotations

import argparse
import random
import resource
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import orjson
from playwright.sync_api import Page, sync_playwright

from miqps.maps import DomainMap, Layer, ParamEvidence, PatternDecision, Verification
from streams.ops.dashboard.server import DashboardServer
from streams.ops.dashboard.state import LIMITS, DashboardState
from testkit.browser import CHROMIUM

STAMP = "2026-01-01T00:00:00Z"
NAMES = (
    "id",
    "page",
    "sort",
    "q",
    "lang",
    "size",
    "color",
    "ref",
    "utm_source",
    "utm_medium",
    "utm_campaign",
    "gclid",
    "fbclid",
    "sid",
    "v",
    "brand",
)
DROPPED = frozenset({"ref", "utm_source", "utm_medium", "utm_campaign", "gclid", "fbclid", "sid"})
BIG_DOMAIN_PATTERNS = 500


def synthetic_maps(domains: int, patterns: int, seed: int = 0) -> list[DomainMap]:
    """``domains`` maps holding ``patterns`` patterns in all; the first domain holds
    :data:`BIG_DOMAIN_PATTERNS` of them (the page of a big site) or half of them, the
    others share the rest."""
    rng = random.Random(seed)
    big = min(BIG_DOMAIN_PATTERNS, patterns // 2)
    sizes = [big] + [(patterns - big) // max(domains - 1, 1)] * (domains - 1)
    sizes[-1] += patterns - sum(sizes)
    maps = []
    for number, size in enumerate(sizes):
        decisions = {}
        for index in range(size):
            names = sorted(rng.sample(NAMES, rng.randint(2, 6)))
            params = {
                name: ParamEvidence(
                    "drop" if name in DROPPED else "keep",
                    Layer.LEARNED,
                    5,
                    0 if name in DROPPED else 5,
                    5 if name in DROPPED else 0,
                    0,
                )
                for name in names
            }
            kept = frozenset(name for name in names if name not in DROPPED)
            decisions[f"/s{index}?{'&'.join(names)}"] = PatternDecision(
                kept, frozenset(names) - kept, params, Verification(2, 0, 2, []), STAMP, 20
            )
        maps.append(DomainMap(f"site{number:05d}.example", 1 + number % 7, STAMP, decisions))
    return maps


def loaded_state(maps: list[DomainMap], urls_per_domain: int = 3) -> DashboardState:
    state = DashboardState()
    for domain_map in maps:
        state.maps.apply(domain_map)
    for domain_map in maps:
        for number, key in enumerate(list(domain_map.patterns)[:urls_per_domain]):
            path, _, names = key.partition("?")
            url = f"https://{domain_map.domain}{path}?" + "&".join(
                f"{name}={number}" for name in names.split("&")
            )
            state.add_canonical(
                orjson.dumps(
                    {
                        "url": url,
                        "canonical_url": url,
                        "domain": domain_map.domain,
                        "pattern": key,
                        "kept": [],
                        "dropped": [],
                        "status": "learned",
                        "map_version": 1,
                        "meta": None,
                    }
                )
            )
        state.add_map_update(
            orjson.dumps(
                {
                    "domain": domain_map.domain,
                    "pattern": next(iter(domain_map.patterns)),
                    "accepted": True,
                    "reason": "ok",
                    "request_reason": "enough-samples",
                    "version_before": 0,
                    "version_after": domain_map.version,
                    "kept_before": None,
                    "dropped_before": None,
                    "kept_after": [],
                    "dropped_after": [],
                    "flipped_to_dropped": [],
                    "evidence": {},
                    "verification": None,
                    "urls_seen": 20,
                    "fetches": 100,
                    "at": STAMP,
                }
            )
        )
    state.tick(time.time(), 0, 0)
    return state


@contextmanager
def serving(state: DashboardState) -> Iterator[str]:
    server = DashboardServer(state, port=0).start()
    try:
        yield server.url
    finally:
        server.stop()


def timed(action: Callable[[], None], repeat: int) -> float:
    """The median seconds of ``action`` over ``repeat`` runs."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure(page: Page, url: str, domain: str, repeat: int) -> dict[str, float]:
    def open_list() -> None:
        page.goto("about:blank")
        page.goto(url)
        page.wait_for_selector("body[data-domains-rendered] #domains tbody tr")

    open_list()
    typed = [0]

    def filtered() -> None:
        typed[0] += 1
        before = page.get_attribute("body", "data-domains-rendered")
        page.fill("#domain-filter", "7" * (1 + typed[0] % 2))
        page.wait_for_selector(f'body:not([data-domains-rendered="{before}"])')

    def open_domain() -> None:
        page.evaluate("location.hash = ''")
        page.wait_for_selector("#domain", state="hidden")
        page.evaluate(f"location.hash = {orjson.dumps('#domain=' + domain).decode()}")
        page.wait_for_selector(f'#domain[data-rendered="{domain}"]:not([hidden])')

    return {
        "domain list": timed(open_list, repeat),
        "filter": timed(filtered, repeat),
        "domain page": timed(open_domain, repeat),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domains", type=int, default=10_000)
    parser.add_argument("--patterns", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    if args.domains < 2 or args.patterns < args.domains:
        parser.error("give at least 2 domains and a pattern per domain")

    baseline_maps = synthetic_maps(10, 100)
    started = time.perf_counter()
    maps = synthetic_maps(args.domains, args.patterns)
    generated = time.perf_counter() - started
    started = time.perf_counter()
    state = loaded_state(maps)
    loaded = time.perf_counter() - started
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"{args.domains:,} domains, {args.patterns:,} patterns: generated in {generated:.1f}s, "
        f"loaded into the dashboard in {loaded:.1f}s; peak RSS {peak_mb:.0f} MB"
    )
    big = maps[0].domain
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM)
        page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
        with serving(loaded_state(baseline_maps)) as url:
            baseline = measure(page, url, baseline_maps[0].domain, args.repeat)
        with serving(state) as url:
            figures = measure(page, url, big, args.repeat)
        browser.close()
    print(f"median of {args.repeat}, from the action to the view in chromium's DOM")
    print(
        f"{'view':<14}{'10 domains':>12}{f'{args.domains:,} domains':>18}{'ratio':>8}{'target':>9}"
    )
    for name, seconds in figures.items():
        target = "<= 1 s" if name != "filter" else ""
        print(
            f"{name:<14}{baseline[name] * 1000:>10.0f}ms{seconds * 1000:>16.0f}ms"
            f"{seconds / baseline[name]:>8.2f}{target:>9}"
        )
    print(
        f"(the domain page is the biggest domain's: {len(maps[0].patterns)} patterns, "
        f"{LIMITS.patterns_per_domain} shown; the baseline's has "
        f"{len(baseline_maps[0].patterns)})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
