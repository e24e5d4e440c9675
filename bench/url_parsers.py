"""URLs per second of candidate URL parsers and normalizers, on one realistic URL mix.

The mix is the one ``bench.canonicalize_speed`` generates (about 200 domains; product,
search, article and category paths; 1 to 6 parameters in random order; some
percent-encoding, uppercase and IDNA hosts, fragments). Every candidate sees the same URLs,
in-process, best of ``--repeat`` passes::

    .venv/bin/python -m bench.url_parsers [--urls 200000] [--repeat 3] [--wpt FILE]

It prints figures with ratios against ``urllib.parse.urlsplit``; it asserts nothing.
``--wpt tests/data/wpt-urltestdata.json`` first prints how many web-platform-tests
URL cases each WHATWG parser gets right (the installed versions), to choose one by
measurement: run it in an environment with another version installed to compare.
Candidates whose package is missing are skipped (``ada-url``, ``yarl``, ``w3lib`` and
``courlan`` are in the dev extras).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from collections.abc import Callable
from pathlib import Path
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

    found.append(("urllib.parse.urlsplit", "stdlib; splits, normalizes nothing", _loop(urlsplit)))

    def optional(module: str) -> Any:
        try:
            return importlib.import_module(module)
        except ImportError:
            print(f"(skipping {module}: not installed)", file=sys.stderr)
            return None

    can_ada = optional("can_ada")
    if can_ada is not None:
        parse = can_ada.parse
        found.append(
            (
                "can_ada.parse(u).href",
                "WHATWG (ada, C++), normalized href",
                _loop(lambda url: parse(url).href),
            )
        )
    ada_url = optional("ada_url")
    if ada_url is not None:
        found.append(
            ("ada_url.parse_url", "WHATWG (ada via cffi), dict of parts", _loop(ada_url.parse_url))
        )
    yarl = optional("yarl")
    if yarl is not None:
        found.append(
            (
                "yarl.URL",
                "RFC 3986, normalizes on construction",
                _loop(lambda url: str(yarl.URL(url))),
            )
        )
    w3lib_url = optional("w3lib.url")
    if w3lib_url is not None:
        found.append(
            (
                "w3lib.canonicalize_url",
                "canonical form (Scrapy's)",
                _loop(w3lib_url.canonicalize_url),
            )
        )
    courlan = optional("courlan")
    if courlan is not None:
        found.append(
            (
                "courlan.normalize_url",
                "normalized form (trafilatura's)",
                _loop(courlan.normalize_url),
            )
        )

    from miqps.canonical import Canonicalizer
    from miqps.urls import parse as miqps_parse

    found.append(
        ("miqps.urls.parse", "can_ada + percent/query normalization, object", _loop(miqps_parse))
    )
    canonicalizer = Canonicalizer()

    def batch(urls: list[str]) -> int:
        errors: list[Any] = []
        canonicalizer.canonical_texts(urls, errors)
        return len(errors)

    found.append(("miqps canonical_texts (no maps)", "the whole canonicalization, batched", batch))
    return found


def _wpt_verdict(parse: Callable[[str, str | None], str], case: dict[str, Any]) -> bool:
    """Whether ``parse`` (input, base -> href, raising on failure) passes one WPT case."""
    try:
        href = parse(case["input"], case.get("base"))
    except Exception:
        return bool(case.get("failure"))
    return not case.get("failure") and href == case.get("href")


def wpt_conformance(path: str) -> None:
    """Passed web-platform-tests URL cases per WHATWG parser: all, and those without base."""
    import json
    from importlib.metadata import version

    cases = [c for c in json.loads(Path(path).read_text("utf-8")) if isinstance(c, dict)]
    absolute = [c for c in cases if c.get("base") is None]
    parsers: list[tuple[str, Callable[[str, str | None], str], bool]] = []
    can_ada = importlib.import_module("can_ada")

    def can_ada_href(text: str, base: str | None) -> str:
        if base is not None:
            raise NotImplementedError("can_ada.parse takes no base")
        return str(can_ada.parse(text).href)

    parsers.append((f"can_ada {version('can_ada')}", can_ada_href, False))
    try:
        ada_url = importlib.import_module("ada_url")
    except ImportError:
        pass
    else:

        def ada_url_href(text: str, base: str | None) -> str:
            return str(ada_url.URL(text, base).href)

        parsers.append((f"ada_url {version('ada-url')}", ada_url_href, True))
    print(f"web-platform-tests urltestdata: {len(cases)} cases, {len(absolute)} without base")
    print("| parser | passed, no base | passed, all |")
    print("|---|---:|---:|")
    for name, parse, takes_base in parsers:
        passed_absolute = sum(_wpt_verdict(parse, case) for case in absolute)
        passed_all = sum(_wpt_verdict(parse, case) for case in cases) if takes_base else None
        shown = f"{passed_all}/{len(cases)}" if passed_all is not None else "(no base API)"
        print(f"| {name} | {passed_absolute}/{len(absolute)} | {shown} |")
    print()


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
    parser.add_argument("--wpt", help="web-platform-tests urltestdata.json: conformance first")
    args = parser.parse_args(argv)
    if args.wpt:
        wpt_conformance(args.wpt)

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
