"""URLs per second of candidate URL parsers and normalizers, on one realistic URL mix.

The mix is the one ``bench.canonicalize_speed`` generates (about 200 domains; product,
search, article and category paths; 1 to 6 parameters in random order; some
percent-encoding, uppercase and IDNA hosts, fragments). Every candidate sees the same URLs,
in-process, best of ``--repeat`` passes::

    .venv/bin/python -m bench.url_parsers [--urls 200000] [--repeat 3]

It prints figures with ratios against ``urllib.parse.urlsplit``; it asserts nothing.
Candidates whose package is missing are skipped (``ada-url``, ``yarl``, ``w3lib`` and
``courlan`` are in the dev extras).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from collections.abc import Callable
from typing import Any

from bench.canonicalize_speed import generate

Candidate = tuple[str, str, Callable[[list[str]], int]]


def _loop(function: Callable[[str], Any]) -> Callable[[list[str]], int]:
    """Call ``function`` on every URL; return how many raised."""

    def run(urls: list[str]) -> int:
        errors = 0
        for url in urls:
            try:
                function(url)
            except Exception:
                errors += 1
        return errors

    return run


def candidates() -> list[Candidate]:
    found: list[Candidate] = []
    from urllib.parse import urlsplit

    found.append(("urllib.parse.urlsplit", "stdlib; splits, normalizes nothing",
                  _loop(urlsplit)))

    def optional(module: str) -> Any:
        try:
            return importlib.import_module(module)
        except ImportError:
            print(f"(skipping {module}: not installed)", file=sys.stderr)
            return None

    can_ada = optional("can_ada")
    if can_ada is not None:
        parse = can_ada.parse
        found.append(("can_ada.parse(u).href", "WHATWG (ada, C++), normalized href",
                      _loop(lambda url: parse(url).href)))
    ada_url = optional("ada_url")
    if ada_url is not None:
        found.append(("ada_url.parse_url", "WHATWG (ada via cffi), dict of parts",
                      _loop(ada_url.parse_url)))
    yarl = optional("yarl")
    if yarl is not None:
        found.append(("yarl.URL", "RFC 3986, normalizes on construction",
                      _loop(lambda url: str(yarl.URL(url)))))
    w3lib_url = optional("w3lib.url")
    if w3lib_url is not None:
        found.append(("w3lib.canonicalize_url", "canonical form (Scrapy's)",
                      _loop(w3lib_url.canonicalize_url)))
    courlan = optional("courlan")
    if courlan is not None:
        found.append(("courlan.normalize_url", "normalized form (trafilatura's)",
                      _loop(courlan.normalize_url)))

    from miqps.canonical import Canonicalizer
    from miqps.urls import parse as miqps_parse

    found.append(("miqps.urls.parse", "can_ada + percent/query normalization, object",
                  _loop(miqps_parse)))
    canonicalizer = Canonicalizer()

    def batch(urls: list[str]) -> int:
        errors: list[Any] = []
        canonicalizer.canonical_texts(urls, errors)
        return len(errors)

    found.append(("miqps canonical_texts (no maps)", "the whole canonicalization, batched",
                  batch))
    return found


def measure(run: Callable[[list[str]], int], urls: list[str], repeat: int) -> tuple[float, int]:
    best = float("inf")
    errors = 0
    for _ in range(repeat):
        started = time.perf_counter()
        errors = run(urls)
        best = min(best, time.perf_counter() - started)
    return best, errors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--urls", type=int, default=200_000, help="URLs in the mix")
    parser.add_argument("--repeat", type=int, default=3, help="passes per parser; best counts")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)

    urls, _ = generate(args.urls, args.seed)
    print(f"{len(urls):,} URLs, best of {args.repeat} passes each\n")
    rows: list[tuple[str, str, float, int]] = []
    for name, what, run in candidates():
        seconds, errors = measure(run, urls, args.repeat)
        rows.append((name, what, len(urls) / seconds, errors))
        print(f"  {name:34s} {len(urls) / seconds:12,.0f} URLs/s", flush=True)

    baseline = next(rate for name, _, rate, _ in rows if name == "urllib.parse.urlsplit")
    print(f"\n| {'parser':34s} | {'URLs/s':>10s} | {'vs urlsplit':>11s} | {'errors':>6s} | what |")
    print(f"|{'-' * 36}|{'-' * 11}:|{'-' * 12}:|{'-' * 7}:|------|")
    for name, what, rate, errors in sorted(rows, key=lambda row: -row[2]):
        print(f"| {name:34s} | {rate:10,.0f} | {rate / baseline:10.2f}x | {errors:6d} | {what} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
