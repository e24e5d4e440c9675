"""How a canonicalizer scores on the simulated web against its ground truth: the figures of
``bench.quality``'s table (collapse, redundant URLs removed, false merges, missed
duplicates), the per-parameter oracle, the baselines and the per-trap rows, and the figures
of one pass of a stream's output. The benchmarks print them; the tests check the oracle and
the scoring with the same code."""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from miqps.fetch import FetchConfig, Fetcher
from miqps.learner import LearnConfig, Learner
from miqps.maps import DomainMap
from miqps.prober import PageProber
from miqps.update import update_all
from miqps.urls import InvalidURL, parse
from simweb.corpus import CorpusURL
from simweb.resolve import match_route, split_matrix, split_target
from simweb.sites import MATRIX_MARK, TRAPS, Site, param_roles


@dataclass(frozen=True, slots=True)
class Quality:
    method: str
    collapsed: float
    ideal: float
    redundant_removed: float
    false_merges: int
    false_merge_share: float
    missed: int
    missed_share: float
    another_page: int | None
    fetches_per_url: float | None
    seconds: float


def score(
    method: str,
    corpus: Sequence[CorpusURL],
    canonical: Callable[[str], str],
    *,
    fetches: int | None = None,
    extra_seconds: float = 0.0,
    shown: Callable[[str], str] | None = None,
) -> Quality:
    """``shown`` gives the page a URL shows (its content key); with it, the canonical URLs
    that show a page other than their URL's are counted too."""
    truth = {entry.url: entry.content_key for entry in corpus}
    started = time.perf_counter()
    canon = {url: canonical(url) for url in truth}
    seconds = time.perf_counter() - started + extra_seconds
    distinct = len(truth)
    pages = len(set(truth.values()))
    groups: dict[str, list[str]] = defaultdict(list)
    for url, canonical_url in canon.items():
        groups[canonical_url].append(truth[url])
    false_merges = 0
    for keys in groups.values():
        if len(keys) > 1:
            false_merges += len(keys) - Counter(keys).most_common(1)[0][1]
    canonicals_per_page: dict[str, set[str]] = defaultdict(set)
    for url, canonical_url in canon.items():
        canonicals_per_page[truth[url]].add(canonical_url)
    missed = sum(len(c) - 1 for c in canonicals_per_page.values())
    redundant = distinct - pages
    another_page = None
    if shown is not None:
        another_page = sum(
            shown(canonical_url) != truth[url] for url, canonical_url in canon.items()
        )
    return Quality(
        method=method,
        collapsed=1 - len(groups) / distinct,
        ideal=1 - pages / distinct,
        redundant_removed=1 - missed / redundant if redundant else 1.0,
        false_merges=false_merges,
        false_merge_share=false_merges / distinct,
        missed=missed,
        missed_share=missed / distinct,
        another_page=another_page,
        fetches_per_url=None if fetches is None else fetches / distinct,
        seconds=seconds,
    )


def safe(function: Callable[[str], str]) -> Callable[[str], str]:
    def wrapped(url: str) -> str:
        try:
            return function(url)
        except Exception:
            return url

    return wrapped


async def learn_maps(
    corpus: Sequence[CorpusURL], proxy: str, config: LearnConfig, fetch_config: FetchConfig
) -> tuple[dict[str, DomainMap], int, float]:
    urls = []
    for entry in corpus:
        try:
            urls.append(parse(entry.url))
        except InvalidURL:
            continue
    started = time.perf_counter()
    async with Fetcher(fetch_config) as fetcher:
        updates = await update_all(Learner(PageProber(fetcher), config), {}, urls)
        fetches = fetcher.stats.requests
    return (
        {domain: u.published for domain, u in updates.items() if u.published is not None},
        fetches,
        time.perf_counter() - started,
    )


def drop_neutral_matrix(site: Site, text: str) -> str:
    """``text`` without its neutral matrix parameters (``/thread;jsessionid=AB?t=1`` ->
    ``/thread?t=1``); content ones such as ``/docs/x;os=linux`` stay in their segment."""
    if MATRIX_MARK not in text:
        return text
    _, path, _ = split_target(text)
    matched = match_route(site, path)
    if matched is None or not split_matrix(path)[1]:
        return text
    roles = param_roles(site)
    segments = []
    for segment in path.split("/"):
        head, *params = segment.split(MATRIX_MARK)
        kept = [
            raw
            for raw in params
            if not (role := roles.get((matched[0].hint, MATRIX_MARK + raw.partition("=")[0])))
            or not role.neutral
        ]
        segments.append(MATRIX_MARK.join([head, *kept]))
    start = text.index(path, text.index("//") + 2)
    return text[:start] + "/".join(segments) + text[start + len(path) :]


def parameter_oracle(sites: Sequence[Site]) -> Callable[[str], str]:
    """The best any per-parameter canonicalizer can do, from the simulated web's ground truth:
    drop every neutral parameter (query or matrix) and every default value, and one of two
    aliases present together. What it still misses (a page reached through either alias
    alone) is out of reach for any canonicalizer that only keeps or drops parameters."""
    by_host = {site.host: site for site in sites}

    def canonical(text: str) -> str:
        host_site = by_host.get(split_target(text)[0])
        if host_site is not None:
            text = drop_neutral_matrix(host_site, text)
        url = parse(text)
        site = by_host.get(url.host)
        matched = match_route(site, url.path) if site else None
        if site is None or matched is None:
            return url.url
        route, _ = matched
        roles = param_roles(site)
        keep = set()
        for name in url.names:
            role = roles.get((route.hint, name))
            param = route.param(name)
            if role is None or role.neutral:
                continue
            if (
                param is not None
                and param.default
                and url.value_of(name) == (f"{name}={param.default}")
            ):
                continue
            keep.add(name)
        aliases = [name for name in route.key if name in keep]
        keep -= set(aliases[1:])
        return url.with_only(keep)

    return canonical


def baselines() -> list[tuple[str, Callable[[str], str]]]:
    from courlan import clean_url
    from w3lib.url import canonicalize_url

    return [
        ("raw URLs", lambda url: url),
        ("w3lib.canonicalize_url", safe(canonicalize_url)),
        ("courlan.clean_url", safe(lambda url: clean_url(url) or url)),
    ]


def format_table(rows: Sequence[Quality]) -> str:
    header = (
        "| method | collapsed (ideal) | redundant removed | false merges | shows another page "
        "| missed duplicates | fetches / distinct URL | seconds |"
    )
    lines = [header, "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        fetches = "—" if row.fetches_per_url is None else f"{row.fetches_per_url:.3f}"
        another = "—" if row.another_page is None else str(row.another_page)
        lines.append(
            f"| {row.method} | {row.collapsed:.1%} ({row.ideal:.1%}) "
            f"| {row.redundant_removed:.1%} "
            f"| {row.false_merges} ({row.false_merge_share:.3%}) | {another} "
            f"| {row.missed} ({row.missed_share:.2%}) | {fetches} | {row.seconds:.1f} |"
        )
    return "\n".join(lines)


def trap_rows(
    corpus: Sequence[CorpusURL], methods: Sequence[tuple[str, Callable[[str], str]]]
) -> str:
    """One row per trap: its distinct URLs, then false merges and missed duplicates of each
    of ``methods`` (name, canonical function) among them."""
    names = " / ".join(name for name, _ in methods)
    lines = [
        f"| trap | distinct URLs | false merges ({names}) | missed duplicates ({names}) |",
        "|---|---|---|---|",
    ]
    for trap in TRAPS:
        subset = [entry for entry in corpus if trap in entry.traps]
        if not subset:
            lines.append(f"| {trap} | 0 | — | — |")
            continue
        rows = [score(name, subset, function) for name, function in methods]
        merges = " / ".join(f"{r.false_merges} ({r.false_merge_share:.2%})" for r in rows)
        missed = " / ".join(f"{r.missed} ({r.missed_share:.2%})" for r in rows)
        distinct = len({entry.url for entry in subset})
        lines.append(f"| {trap} | {distinct} | {merges} | {missed} |")
    return "\n".join(lines)


@dataclass
class PassFigures:
    """One pass of URLs through the stream, against the simulated web's ground truth."""

    urls: int
    learned: float
    raw: int
    canonical: int
    ideal: int
    false_merges: int


def stream_pass_figures(
    docs: list[dict[str, Any]], truth: dict[str, str]
) -> tuple[PassFigures, list[str]]:
    """The figures of one pass's ``urls.canonical`` records (``docs``), with ``truth`` the
    page each URL shows, and the canonical URLs that stand for more than one page. A URL's
    record counts as learned when its pattern was; only URLs with a query count."""
    with_query = [doc for doc in docs if doc["kept"] or doc["dropped"]]
    learned = sum(1 for doc in with_query if doc["status"] == "learned")
    pages_of: defaultdict[str, set[str]] = defaultdict(set)
    for doc in docs:
        if doc["url"] in truth:
            pages_of[doc["canonical_url"]].add(truth[doc["url"]])
    merged = sorted(url for url, pages in pages_of.items() if len(pages) > 1)
    figures = PassFigures(
        urls=len(docs),
        learned=learned / max(len(with_query), 1),
        raw=len({doc["url"] for doc in docs}),
        canonical=len({doc["canonical_url"] for doc in docs}),
        ideal=len({truth[doc["url"]] for doc in docs if doc["url"] in truth}),
        false_merges=len(merged),
    )
    return figures, merged
