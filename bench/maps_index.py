"""``miqps canonicalize`` on a maps file too large to hold: the index against holding every map.

Writes a maps file of ``--domains`` domains (``--patterns`` patterns each, as
``bench.maps_load`` writes them) and URLs of those patterns (with noise parameters), then
runs ``miqps canonicalize`` as its own process for each row; each process's peak RSS comes
from ``wait4``. Measured in the same run:

- ``held, small file``: the first ``--small-domains`` domains' maps held in memory (the
  default under 64 MiB), on ``--urls`` URLs of those domains: the baseline of throughput;
- ``index, small file``: the same maps and URLs through ``--maps-index``;
- ``index build``: indexing the large file, once;
- ``first output``: the time from starting the process to its first output line, with the
  index built;
- ``index, zipf`` and ``index, uniform``: ``--urls`` (``--uniform-urls``) URLs spread over
  every domain of the large file (Zipf s=1.1, and uniform), through the index with the
  default cache.

(Holding every map of the large file is what 0.4.0's command did before it indexed files
over 64 MiB: 146 s to the first output and 5,192 MiB at 100k domains, 1.55 GB.)

And in this process, the cost of a cold domain: reading its map from the index and
compiling it, per domain, over 5,000 domains::

    .venv/bin/python -m bench.maps_index [--domains 100000] [--urls 1000000]

It prints figures; it asserts no target. It exits non-zero only if a process fails.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import time
from itertools import accumulate
from pathlib import Path

from bench.children import Run, measured
from bench.maps_load import domain_map
from miqps.canonical import Canonicalizer
from miqps.mapstore import index_maps_file

MIQPS = [sys.executable, "-m", "miqps.cli", "canonicalize"]


def write_corpus(folder: Path, domains: int, patterns: int, seed: int) -> list[list[str]]:
    """Write ``maps.jsonl``; return, per domain, URL templates of its patterns."""
    rng = random.Random(seed)
    templates: list[list[str]] = []
    with (folder / "maps.jsonl").open("w", encoding="utf-8") as handle:
        for number in range(domains):
            domain = domain_map(rng, number, patterns)
            handle.write(domain.dumps() + "\n")
            own = []
            for key in list(domain.patterns)[:4]:
                shape, _, names = key.partition("?")
                if shape.endswith("/") and shape != "/":
                    continue
                path = shape.replace("*", "{n}")
                query = "&".join(f"{name}={{v}}" for name in names.split("&"))
                own.append(f"https://{domain.domain}{path}?{query}")
            templates.append(own or [f"https://{domain.domain}/p/{{n}}?id={{v}}"])
    return templates


def write_urls(path: Path, templates: list[list[str]], count: int, zipf: bool, seed: int) -> None:
    rng = random.Random(seed)
    if zipf:
        weights = list(accumulate(1 / (rank + 1) ** 1.1 for rank in range(len(templates))))
        chosen = rng.choices(range(len(templates)), cum_weights=weights, k=count)
    else:
        chosen = [rng.randrange(len(templates)) for _ in range(count)]
    with path.open("w", encoding="utf-8") as handle:
        for number in chosen:
            template = rng.choice(templates[number])
            n, v = rng.randrange(1, 10_000), rng.randrange(1, 50)
            handle.write(template.format(n=n, v=v) + "\n")


def run(args: list[str], stdin: Path | None) -> Run:
    return measured([*MIQPS, *args], f"miqps canonicalize {' '.join(args)}", stdin=stdin)


def first_output(args: list[str], url: str) -> float:
    """Seconds from the start of the process to its first output line."""
    started = time.perf_counter()
    process = subprocess.Popen(
        [*MIQPS, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(url.encode() + b"\n")
    process.stdin.close()
    process.stdout.readline()
    seconds = time.perf_counter() - started
    process.wait()
    return seconds


def cold_domain_ms(index: Path, maps: Path, domains: int, seed: int) -> float:
    store = index_maps_file(maps, index)
    canonicalizer = Canonicalizer(maps=store, cache_domains=100)
    chosen = random.Random(seed).sample(range(domains), min(5_000, domains))
    urls = [f"https://shop{number}.example/p/1?id=1" for number in chosen]
    started = time.perf_counter()
    for url in urls:  # one at a time: each URL meets a domain not held
        canonicalizer.canonicalize(url)
    elapsed = time.perf_counter() - started
    held = Canonicalizer(maps=store, cache_domains=len(urls) + 1)
    held.canonical_texts(urls)
    started = time.perf_counter()
    for url in urls:
        held.canonicalize(url)
    warm = time.perf_counter() - started
    canonicalizer.close()
    store.close()
    return 1e3 * (elapsed - warm) / len(urls)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domains", type=int, default=100_000)
    parser.add_argument("--patterns", type=int, default=20, help="patterns per domain")
    parser.add_argument("--small-domains", type=int, default=2_000)
    parser.add_argument("--urls", type=int, default=1_000_000)
    parser.add_argument(
        "--uniform-urls",
        type=int,
        default=100_000,
        help="URLs of the uniform mix (nearly every one meets a domain not held)",
    )
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="miqps-maps-index-") as folder:
        work = Path(folder)
        started = time.perf_counter()
        templates = write_corpus(work, args.domains, args.patterns, args.seed)
        maps = work / "maps.jsonl"
        size = maps.stat().st_size
        print(
            f"maps file: {args.domains} domains x {args.patterns} patterns, "
            f"{size / 2**20:,.0f} MiB, written in {time.perf_counter() - started:.0f}s"
        )
        small = work / "small.jsonl"
        with maps.open("rb") as source, small.open("wb") as target:
            for _ in range(args.small_domains):
                target.write(source.readline())
        small_urls, zipf_urls, uniform_urls = work / "s.txt", work / "z.txt", work / "u.txt"
        write_urls(small_urls, templates[: args.small_domains], args.urls, True, args.seed)
        write_urls(zipf_urls, templates, args.urls, True, args.seed + 1)
        write_urls(uniform_urls, templates, args.uniform_urls, False, args.seed + 2)

        def row(label: str, result: Run, urls: int = 0, baseline: Run | None = None) -> None:
            rate = f", {urls / result.seconds:>9,.0f} URLs/s" if urls else ""
            ratio = f" ({baseline.seconds / result.seconds:.2f}x held)" if baseline else ""
            print(
                f"{label:<22} {result.seconds:7.1f}s  peak RSS {result.peak_mib:7.1f} MiB"
                f"{rate}{ratio}"
            )

        held_small = run(["--maps", str(small)], small_urls)
        row("held, small file", held_small, args.urls)
        small_index = ["--maps", str(small), "--maps-index", str(work / "small-index")]
        run(small_index, None)
        row("index, small file", run(small_index, small_urls), args.urls, held_small)
        index = ["--maps", str(maps), "--maps-index", str(work / "index")]
        row("index build", run(index, None))
        probe = templates[-1][0].format(n=1, v=1)
        print(f"{'first output':<22} {first_output(index, probe):7.2f}s (index built)")
        row("index, zipf", run(index, zipf_urls), args.urls)
        row("index, uniform", run(index, uniform_urls), args.uniform_urls)
        cold = cold_domain_ms(work / "index", maps, args.domains, args.seed)
        print(f"{'cold domain':<22} {cold:7.2f} ms (read from the index and compiled)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
