"""CPU cost of the Scrapy add-on: fingerprinting requests with ``miqps.scrapy`` against
Scrapy's default fingerprinter, on the same requests in the same run::

    .venv/bin/python -m bench.scrapy_fingerprint [--requests 100000] [--repeat 3]
        [--unmapped-share 0.1] [--maps MAPS.jsonl]

The URLs come from the simulated web's corpus (``--unmapped-share`` of them moved to hosts
without a map, which take the fallback path). Without ``--maps``, maps are learned first
with ``miqps learn`` on a separate corpus of the same sites (about 15 s). Each run
fingerprints freshly built requests (both fingerprinters remember per request object),
best of ``--repeat``. It prints figures and the ratio; the target (at most 1.10x) is not
asserted.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from scrapy import Request
from scrapy.utils.request import RequestFingerprinter
from scrapy.utils.test import get_crawler

from miqps.scrapy import MapsRequestFingerprinter
from simweb.corpus import generate_corpus
from simweb.server import SimWeb
from simweb.sites import Site, build_sites


def learn_maps(sites: list[Site], directory: Path) -> Path:
    urls = directory / "learn-urls.txt"
    urls.write_text("\n".join(entry.url for entry in generate_corpus(sites, 300, seed=11)), "utf-8")
    maps = directory / "maps.jsonl"
    with SimWeb(sites, seed=11, rate_limit_per_second=300, flaky_rate=0.0) as web:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "miqps.cli",
                "learn",
                "--urls",
                str(urls),
                "--out",
                str(maps),
                "--proxy",
                web.proxy_url,
                "--rate",
                "200",
                "--no-progress",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    return maps


def request_urls(sites: list[Site], count: int, unmapped_share: float) -> list[str]:
    per_site = count // len(sites) + 1
    urls = [entry.url for entry in generate_corpus(sites, per_site, seed=12)][:count]
    rng = random.Random(12)
    return [
        url.replace(".sim/", f".unmapped{rng.randrange(50)}.sim/", 1)
        if rng.random() < unmapped_share
        else url
        for url in urls
    ]


def best_time(fingerprint: Callable[[Request], bytes], urls: list[str], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        requests = [Request(url) for url in urls]
        started = time.perf_counter()
        for request in requests:
            fingerprint(request)
        best = min(best, time.perf_counter() - started)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--unmapped-share", type=float, default=0.1)
    parser.add_argument("--maps", type=Path, help="maps to use instead of learning them")
    args = parser.parse_args(argv)
    sites = build_sites("tuning", 3, seed=5)
    with tempfile.TemporaryDirectory() as directory:
        maps = args.maps or learn_maps(sites, Path(directory))
        miqps = MapsRequestFingerprinter.from_crawler(
            get_crawler(settings_dict={"MIQPS_MAPS": str(maps)})
        )
        urls = request_urls(sites, args.requests, args.unmapped_share)
    default = RequestFingerprinter()
    baseline = best_time(default.fingerprint, urls, args.repeat)
    with_addon = best_time(miqps.fingerprint, urls, args.repeat)
    stats = miqps.stats.get_stats() if miqps.stats is not None else {}
    print(
        f"{len(urls):,} requests ({args.unmapped_share:.0%} to hosts without a map), "
        f"best of {args.repeat}"
    )
    print(
        f"  Scrapy default fingerprinter: {baseline:.3f} s "
        f"({baseline / len(urls) * 1e6:.2f} us/request)"
    )
    print(
        f"  miqps.scrapy fingerprinter:   {with_addon:.3f} s "
        f"({with_addon / len(urls) * 1e6:.2f} us/request)"
    )
    print(
        f"  ratio: {with_addon / baseline:.2f}x (target <= 1.10x); parameters left out of "
        f"fingerprints per run: {stats.get('miqps/params_dropped', 0) // args.repeat:,}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
