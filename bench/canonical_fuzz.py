"""Fuzzed URLs through learned-looking maps: is canonicalization one idempotent answer?

Generates URLs that stress every normalization (matrix parameters, ``;`` that are not,
dot segments, stray ``%``, repeated and prefix names, default values, ports, userinfo,
IDNA, fragments), learns-looking maps from a sample of them (patterns of the URLs and of
subsets of their names, so dropping parameters moves URLs between learned patterns, with
confirmed default values and insufficient evidence), then counts, over every URL:

- idempotence failures: ``canonicalize(canonicalize(u)) != canonicalize(u)``;
- plain/JSON disagreements: what ``miqps canonicalize`` prints (``canonical_texts``)
  against what ``--json`` prints (``decide``);
- invalid inputs (an empty line in both).

    .venv/bin/python -m bench.canonical_fuzz [--urls 1000000] [--seed 1]

Run it against another source tree with ``PYTHONPATH=DIR python bench/canonical_fuzz.py``.
It prints counts; it exits non-zero when either failure count is not 0.
"""

from __future__ import annotations

import argparse
import random
import sys
import time

from miqps.canonical import Canonicalizer
from miqps.urls import InvalidURL, parse
from testkit.urlgen import fuzzed_url, learned_looking_maps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--urls", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--batch", type=int, default=10_000)
    args = parser.parse_args(argv)

    rng = random.Random(args.seed)
    started = time.perf_counter()
    sample = [fuzzed_url(rng) for _ in range(20_000)]
    maps = learned_looking_maps(sample, rng)
    canonicalizer = Canonicalizer()
    for domain_map in maps:
        canonicalizer.update(domain_map)
    print(f"maps: {len(maps)} domains, {sum(len(m.patterns) for m in maps):,} patterns")

    invalid = not_idempotent = disagreements = dropped_some = 0
    examples: list[str] = []
    done = 0
    while done < args.urls:
        texts = [fuzzed_url(rng) for _ in range(min(args.batch, args.urls - done))]
        done += len(texts)
        plain = canonicalizer.canonical_texts(texts)
        again = canonicalizer.canonical_texts(plain)
        for text, output, second in zip(texts, plain, again, strict=True):
            try:
                decision = canonicalizer.decide(parse(text), original=text)
            except InvalidURL:
                invalid += 1
                if output:
                    disagreements += 1
                continue
            dropped_some += bool(decision.dropped)
            failed = False
            if second != output:
                not_idempotent += 1
                failed = True
            if decision.canonical_url != output:
                disagreements += 1
                failed = True
            if failed and len(examples) < 5:
                examples.append(
                    f"  {text}\n    plain {output}\n    again {second}\n"
                    f"    JSON  {decision.canonical_url}"
                )
    seconds = time.perf_counter() - started
    print(
        f"URLs: {done:,} fuzzed, {invalid:,} invalid, {dropped_some:,} with parameters "
        f"dropped ({seconds:.0f}s)"
    )
    print(f"idempotence failures: {not_idempotent}")
    print(f"plain/JSON disagreements: {disagreements}")
    for example in examples:
        print(example)
    return 1 if not_idempotent or disagreements else 0


if __name__ == "__main__":
    sys.exit(main())
