"""Quality benchmark: how well each canonicalizer dedups the simulated web, against ground truth.

    .venv/bin/python -m bench.quality [--family holdout] [--sites 12] [--urls-per-site 3000]

Learns maps on the chosen family of simulated sites (the learner's defaults were tuned on the
``tuning`` family only; ``holdout`` is the judged one), then canonicalizes the same corpus
with every method and prints one table. Every figure is over the set of distinct raw URLs:

- collapsed: share of the distinct-URL set removed (1 - canonical URLs / raw URLs); ideal is
  what a perfect canonicalizer reaches (1 - distinct pages / raw URLs);
- redundant removed: share of redundant URLs (raw URLs minus distinct pages) merged away;
- false merges: URLs whose canonical URL also stands for another page (the minority of
  each canonical group), as a share of distinct URLs — these lose items;
- missed: redundant URLs still kept apart, as a share of distinct URLs;
- fetches/URL: probe fetches spent per distinct URL (learning cost);
- seconds: wall time of learning plus canonicalizing.

After the main table, one row per trap of the simulated web (``simweb.sites.TRAPS``): the
distinct URLs that touch it, and the false merges and missed duplicates among them of the
learned maps, of the per-parameter oracle and of the cold-start prior.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from miqps.canonical import Canonicalizer
from miqps.fetch import FetchConfig, Fetcher
from miqps.learner import LearnConfig, Learner
from miqps.maps import DomainMap
from miqps.prober import PageProber
from miqps.update import update_all
from miqps.urls import InvalidURL, parse
from simweb.corpus import CorpusURL, generate_corpus, url_traps
from simweb.resolve import match_route, page_shown, split_matrix, split_target
from simweb.server import SimWeb
from simweb.sites import FAMILIES, MATRIX_MARK, TRAPS, Site, build_sites, param_roles


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


def _safe(function: Callable[[str], str]) -> Callable[[str], str]:
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
        ("w3lib.canonicalize_url", _safe(canonicalize_url)),
        ("courlan.clean_url", _safe(lambda url: clean_url(url) or url)),
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


def with_traps(corpus: Sequence[CorpusURL], sites: Sequence[Site]) -> list[CorpusURL]:
    """``corpus`` with every URL tagged with the traps it touches (for corpora read back
    from a file, which carry no tags)."""
    by_host = {site.host: site for site in sites}
    out = []
    for entry in corpus:
        site = by_host.get(split_target(entry.url)[0])
        traps = url_traps(site, entry.url) if site is not None else frozenset()
        out.append(CorpusURL(entry.url, entry.content_key, traps))
    return out


def score_run(
    corpus_path: Path, canonical_path: Path | None, fetches: int, sites: Sequence[Site]
) -> int:
    """The table for a run of `miqps learn` + `miqps canonicalize` made outside this process."""
    if canonical_path is None:
        print("--score needs --canonical", file=sys.stderr)
        return 2
    corpus = with_traps(
        [
            CorpusURL(url, key)
            for url, _, key in (
                line.partition("\t")
                for line in corpus_path.read_text(encoding="utf-8").splitlines()
            )
            if key
        ],
        sites,
    )
    canonical_lines = canonical_path.read_text(encoding="utf-8").splitlines()
    if len(canonical_lines) != len(corpus):
        print(
            f"{canonical_path} has {len(canonical_lines)} lines for {len(corpus)} URLs",
            file=sys.stderr,
        )
        return 1
    answers = {
        entry.url: line or entry.url for entry, line in zip(corpus, canonical_lines, strict=True)
    }
    shown = page_shown(sites)
    rows = [score(name, corpus, function, shown=shown) for name, function in baselines()]
    rows.append(
        score("ceiling: per-parameter oracle", corpus, parameter_oracle(sites), shown=shown)
    )
    rows.append(
        score(
            "miqps learn + canonicalize",
            corpus,
            answers.__getitem__,
            fetches=fetches,
            shown=shown,
        )
    )
    print(format_table(rows))
    print()
    print(
        trap_rows(
            corpus,
            [
                ("learned", answers.__getitem__),
                ("oracle", parameter_oracle(sites)),
                ("prior", _safe(Canonicalizer().canonical_text)),
            ],
        )
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--family", default="holdout", choices=FAMILIES)
    parser.add_argument("--sites", type=int, default=12)
    parser.add_argument("--urls-per-site", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--samples", type=int, default=LearnConfig().samples)
    parser.add_argument("--threshold", type=float, default=LearnConfig().threshold)
    parser.add_argument("--min-conclusive", type=int, default=LearnConfig().min_conclusive)
    parser.add_argument("--verify-samples", type=int, default=LearnConfig().verify_samples)
    parser.add_argument(
        "--rate", type=float, default=40.0, help="probe requests per second per simulated host"
    )
    parser.add_argument(
        "--score",
        type=Path,
        metavar="CORPUS_TSV",
        help="score an existing run: url<TAB>content_key lines ...",
    )
    parser.add_argument("--canonical", type=Path, help="... and the canonical URL per line")
    parser.add_argument("--fetches", type=int, default=0, help="... and the fetches it spent")
    args = parser.parse_args(argv)
    sites = build_sites(args.family, args.sites, seed=args.seed)
    if args.score is not None:
        return score_run(args.score, args.canonical, args.fetches, sites)

    corpus = generate_corpus(sites, args.urls_per_site, seed=args.seed)
    config = LearnConfig(
        samples=args.samples,
        threshold=args.threshold,
        min_conclusive=args.min_conclusive,
        verify_samples=args.verify_samples,
    )
    with SimWeb(sites, seed=args.seed, rate_limit_per_second=args.rate * 1.5) as web:
        fetch_config = FetchConfig(proxy=web.proxy_url, per_host_rate=args.rate, timeout=2.0)
        maps, fetches, learn_seconds = asyncio.run(
            learn_maps(corpus, web.proxy_url, config, fetch_config)
        )
    learned = Canonicalizer()
    learned.load(maps)
    cold = Canonicalizer()

    def with_maps(url: str) -> str:
        return learned.canonical_url(parse(url))

    def prior_only(url: str) -> str:
        return cold.canonical_url(parse(url))

    shown = page_shown(sites)
    rows = [score(name, corpus, function, shown=shown) for name, function in baselines()]
    rows.append(
        score("ceiling: per-parameter oracle", corpus, parameter_oracle(sites), shown=shown)
    )
    rows.append(score("miqps, cold-start prior only", corpus, _safe(prior_only), shown=shown))
    rows.append(
        score(
            "miqps, learned maps",
            corpus,
            _safe(with_maps),
            fetches=fetches,
            extra_seconds=learn_seconds,
            shown=shown,
        )
    )
    distinct = len({entry.url for entry in corpus})
    print(
        f"family={args.family} sites={args.sites} urls={len(corpus)} distinct={distinct} "
        f"pages={len({e.content_key for e in corpus})} fetches={fetches} "
        f"learn_seconds={learn_seconds:.1f}"
    )
    print(format_table(rows))
    print()
    print(
        trap_rows(
            corpus,
            [
                ("learned", _safe(with_maps)),
                ("oracle", parameter_oracle(sites)),
                ("prior", _safe(prior_only)),
            ],
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
