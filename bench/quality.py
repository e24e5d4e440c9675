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
from collections.abc import Sequence
from pathlib import Path

from miqps.canonical import Canonicalizer
from miqps.fetch import FetchConfig
from miqps.learner import LearnConfig
from miqps.urls import parse
from simweb.corpus import CorpusURL, generate_corpus, url_traps
from simweb.resolve import page_shown, split_target
from simweb.server import SimWeb
from simweb.sites import FAMILIES, Site, build_sites
from testkit.quality import (
    baselines,
    format_table,
    learn_maps,
    parameter_oracle,
    safe,
    score,
    trap_rows,
)


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
                ("prior", safe(Canonicalizer().canonical_text)),
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
    rows.append(score("miqps, cold-start prior only", corpus, safe(prior_only), shown=shown))
    rows.append(
        score(
            "miqps, learned maps",
            corpus,
            safe(with_maps),
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
                ("learned", safe(with_maps)),
                ("oracle", parameter_oracle(sites)),
                ("prior", safe(prior_only)),
            ],
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
