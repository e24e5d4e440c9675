"""Where ``miqps canonicalize`` (no maps) differs from each peer suite's expected output.

Reads ``tests/data/peer-url-cases.jsonl`` (see its README) and prints, per suite,
how many cases we answer as the peer does, and why the others differ, by the first of these
explanations that accounts for the difference:

- ``we reject``: not an http(s) URL, or no URL at all (we print an empty line);
- ``peer rejects``: the peer expects a rejection, we normalize it;
- ``fragment``: we drop a fragment the peer keeps (or the reverse);
- ``query order or empty ?``: we sort parameters by name and drop an empty ``?``;
- ``tracking``: our cold-start prior drops ``utm_*``/``gclid``/``fbclid``, the peer keeps them;
- ``percent spelling``: the same bytes once decoded, spelled differently;
- ``peer policy``: the peer strips what we keep without evidence (``www.``, session ids,
  ``index.html``, empty or duplicate parameters, repeated slashes, trailing dots...);

    .venv/bin/python -m bench.peer_cases [--cases FILE]
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path
from urllib.parse import unquote_to_bytes

from miqps.canonical import Canonicalizer
from miqps.urls import InvalidURL, parse
from testkit.corpora import PEER_URL_CASES

TRACKING = ("utm_", "gclid", "fbclid", "msclkid", "dclid")


def _without_fragment(url: str) -> str:
    return url.partition("#")[0]


def _query_sorted(url: str) -> str:
    base, mark, query = url.partition("?")
    pairs = sorted(pair for pair in query.split("&") if pair)
    return base + (mark + "&".join(pairs) if pairs else "")


def _without_tracking(url: str) -> str:
    base, mark, query = url.partition("?")
    pairs = [pair for pair in query.split("&") if pair and not pair.startswith(TRACKING)]
    return base + (mark + "&".join(pairs) if pairs else "")


def explain(ours: str, expected: str) -> str:
    if ours == expected:
        return "same"
    if not ours:
        return "we reject"
    if not expected:
        return "peer rejects"
    steps = (
        ("fragment", _without_fragment),
        ("query order or empty ?", _query_sorted),
        ("tracking", _without_tracking),
    )
    a, b = ours, expected
    for reason, step in steps:
        a, b = step(a), step(b)
        if a == b:
            return reason
    if unquote_to_bytes(a) == unquote_to_bytes(b):
        return "percent spelling"
    return "peer policy"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--cases", type=Path, default=PEER_URL_CASES)
    parser.add_argument("--examples", type=int, default=0, help="print N examples per reason")
    args = parser.parse_args(argv)

    canonicalizer = Canonicalizer()
    by_suite: dict[str, Counter[str]] = defaultdict(Counter)
    examples: dict[str, list[str]] = defaultdict(list)
    for line in args.cases.read_text(encoding="utf-8").splitlines():
        case = json.loads(line)
        text = base64.b64decode(case["input_b64"]).decode("utf-8", "surrogateescape")
        try:
            ours = canonicalizer.canonical_url(parse(text))
        except InvalidURL:
            ours = ""
        reason = explain(ours, case["expected"])
        by_suite[case["suite"]][reason] += 1
        if len(examples[reason]) < args.examples:
            examples[reason].append(f"{text!r} -> ours {ours!r}, peer {case['expected']!r}")
    reasons = [
        "same",
        "we reject",
        "peer rejects",
        "fragment",
        "query order or empty ?",
        "tracking",
        "percent spelling",
        "peer policy",
    ]
    print("| suite | cases | " + " | ".join(reasons) + " |")
    print("|---|---:|" + "---:|" * len(reasons))
    for suite in sorted(by_suite):
        counts = by_suite[suite]
        print(
            f"| {suite} | {sum(counts.values())} | "
            + " | ".join(str(counts[r]) for r in reasons)
            + " |"
        )
    for reason, shown in examples.items() if args.examples else ():
        print(f"\n{reason}:")
        for example in shown:
            print("  " + example)
    return 0


if __name__ == "__main__":
    sys.exit(main())
