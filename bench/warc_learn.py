"""Learning from a crawl's WARC archive: probe fetches per distinct URL and quality, with
archives of 0%, 10%, 30% and 100% of the distinct URLs, all measured in one run; and the
speed of reading and fingerprinting an archive with warcio and with FastWARC.

    .venv/bin/python -m bench.warc_learn [--family tuning] [--sites 4] [--urls-per-site 600]
                                         [--writer warcio|wget] [--readers-only]

Each archive is a crawl that fetched a random share of the distinct URLs once each (written
by warcio's writer, or by ``wget --warc-file``); the learner then learns every URL, its
fetches counted at the simulated web's server, and the maps are scored as
``bench.quality`` scores them. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from miqps.canonical import Canonicalizer
from miqps.content import snapshot_html
from miqps.fetch import FetchConfig, Fetcher
from miqps.learner import LearnConfig, Learner
from miqps.prober import PageProber
from miqps.update import update_all
from miqps.urls import InvalidURL, parse
from miqps.warc import read_archives
from simweb.corpus import CorpusURL, generate_corpus
from simweb.resolve import page_shown
from simweb.server import SimWeb
from simweb.sites import FAMILIES, build_sites
from testkit.quality import score
from testkit.warcs import write_with_warcio, write_with_wget

SHARES = (0.0, 0.1, 0.3, 1.0)


async def _learn(corpus: Sequence[CorpusURL], proxy: str, archive: Path | None) -> Canonicalizer:
    urls = []
    for entry in corpus:
        try:
            urls.append(parse(entry.url))
        except InvalidURL:
            continue
    observations = read_archives([archive], max_bytes=4 << 20) if archive else None
    config = FetchConfig(proxy=proxy, per_host_rate=200, timeout=5, allow_private=True)
    async with Fetcher(config) as fetcher:
        learner = Learner(PageProber(fetcher, observations=observations), LearnConfig())
        updates = await update_all(learner, {}, urls)
    maps = {d: u.published for d, u in updates.items() if u.published is not None}
    canonicalizer = Canonicalizer()
    canonicalizer.load(maps)
    return canonicalizer


def curve(args: argparse.Namespace, folder: Path) -> None:
    sites = build_sites(args.family, args.sites, seed=args.seed)
    corpus = list(
        {e.url: e for e in generate_corpus(sites, args.urls_per_site, seed=args.seed)}.values()
    )
    distinct = [entry.url for entry in corpus]
    shown = page_shown(sites)
    print(
        f"{len(distinct)} distinct URLs on {args.sites} {args.family} sites, writer {args.writer}"
    )
    print(
        f"{'archive':>8} {'fetches/URL':>12} {'vs 0%':>7} {'redundant removed':>18} "
        f"{'false merges':>13}"
    )
    baseline = None
    for share in SHARES:
        with SimWeb(sites, seed=args.seed, rate_limit_per_second=0) as web:
            archive = None
            if share:
                crawled = random.Random(f"{args.seed}:{share}").sample(
                    distinct, round(share * len(distinct))
                )
                archive = folder / f"crawl-{int(share * 100)}.warc.gz"
                if args.writer == "wget":
                    write_with_wget(archive, crawled, web.proxy_url)
                else:
                    write_with_warcio(archive, crawled, web.proxy_url)
            before = web.requests_total()
            canonicalizer = asyncio.run(_learn(corpus, web.proxy_url, archive))
            fetches = web.requests_total() - before
        row = score(
            f"{share:.0%}",
            corpus,
            canonicalizer.canonical_text,
            fetches=fetches,
            shown=shown,
        )
        per_url = fetches / len(distinct)
        baseline = baseline or per_url
        print(
            f"{share:>8.0%} {per_url:>12.3f} {per_url / baseline:>7.2f} "
            f"{row.redundant_removed:>18.1%} {row.false_merges:>13}"
        )


def readers(args: argparse.Namespace, folder: Path) -> None:
    """Pages per second read and fingerprinted, and read only, by each reader."""
    sites = build_sites(args.family, args.sites, seed=args.seed)
    urls = sorted(
        {e.url for e in generate_corpus(sites, args.reader_pages // args.sites, seed=args.seed)}
    )
    path = folder / "readers.warc.gz"
    with SimWeb(sites, seed=args.seed, rate_limit_per_second=0, flaky_rate=0) as web:
        write_with_warcio(path, urls, web.proxy_url)
    print(f"\nreaders: {len(urls)} pages, {path.stat().st_size / 1e6:.1f} MB gzipped")
    started = time.perf_counter()
    archive = read_archives([path], max_bytes=4 << 20)
    whole = time.perf_counter() - started
    pages = archive.records
    print(f"miqps.warc (warcio), read + fingerprinted: {pages / whole:,.0f} pages/s")
    from warcio.archiveiterator import ArchiveIterator  # type: ignore[import-untyped]

    started = time.perf_counter()
    n = 0
    with path.open("rb") as handle:
        for record in ArchiveIterator(handle, check_digests=False):
            if record.rec_type == "response":
                record.raw_stream.read()
                n += 1
    warcio_read = time.perf_counter() - started
    print(f"warcio, read only: {n / warcio_read:,.0f} pages/s")
    try:
        from fastwarc.warc import ArchiveIterator as FastIterator
        from fastwarc.warc import WarcRecordType
    except ImportError:
        print("FastWARC is not installed")
        return
    started = time.perf_counter()
    bodies = []
    with path.open("rb") as handle:
        for record in FastIterator(handle, record_types=WarcRecordType.response, parse_http=True):
            bodies.append((record.headers.get("WARC-Target-URI") or "", record.reader.read()))
    fast_read = time.perf_counter() - started
    print(f"FastWARC, read only: {len(bodies) / fast_read:,.0f} pages/s")
    started = time.perf_counter()
    for url, body in bodies:
        snapshot_html(200, url, body, 0, url)
    parse_time = time.perf_counter() - started
    print(
        f"FastWARC, read + fingerprinted: {len(bodies) / (fast_read + parse_time):,.0f} pages/s "
        f"(fingerprinting is {parse_time / (fast_read + parse_time):.0%} of it)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--family", choices=FAMILIES, default="tuning")
    parser.add_argument("--sites", type=int, default=4)
    parser.add_argument("--urls-per-site", type=int, default=600)
    parser.add_argument("--reader-pages", type=int, default=4000)
    parser.add_argument("--writer", choices=("warcio", "wget"), default="warcio")
    parser.add_argument("--readers-only", action="store_true")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        if not args.readers_only:
            curve(args, folder)
        readers(args, folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
