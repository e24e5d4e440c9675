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
from miqps.maps import DomainMap, Layer, ParamEvidence, PatternDecision, Verification
from miqps.urls import InvalidURL, parse, path_shape, pattern_key

HOSTS = (
    "forum.example",
    "shop.example",
    "java.example",
    "Shop.Example",
    "b\u00fccher.example",
    "shop.example:8080",
    "u:p@shop.example",
    "[::1]",
    "other.example",
    "10.0.0.1",
)
SEGMENTS = (
    "p",
    "board",
    "12",
    "docs",
    "guide",
    "..",
    ".",
    "%2e",
    "a;b",
    "x;y;z",
    "caf%C3%A9",
    "%%36%31",
    "%%32%45",
    "%4%31",
    "%7euser",
    "",
    "item-42",
    "%3B",
    "a%2Fb",
)
MATRIX = ("jsessionid", "sid", "v", "utm_source", "JSESSIONID", "1x", "")
NAMES = (
    "id",
    "b",
    "start",
    "order",
    "page",
    "hl",
    "q",
    "ref",
    "sid",
    "utm_source",
    "utm_medium",
    "gclid",
    "fbclid",
    "variant",
    "a",
    "a.b",
    "a-b",
    "A",
    "",
    "x%3Dy",
    "%75tm",
    ";v",
)
VALUES = (
    "1",
    "2",
    "45",
    "en",
    "latest",
    "general",
    "",
    "%%36%31",
    "%7e",
    "a%2Fb",
    "x=y",
    "%E2%82%AC",
    "+",
    "%",
    "1;2",
)
FRAGMENTS = ("", "", "", "#top", "#!/tab", "#!%7e/x", "#")


def fuzzed_url(rng: random.Random) -> str:
    segments = [rng.choice(SEGMENTS) for _ in range(rng.randint(0, 4))]
    for _ in range(rng.choice((0, 0, 0, 1, 2))):
        value = rng.choice(VALUES).replace(";", "")
        pair = f"{rng.choice(MATRIX)}={value}" if rng.random() < 0.9 else rng.choice(MATRIX)
        if segments:
            segments[rng.randrange(len(segments))] += ";" + pair
        else:
            segments.append(";" + pair)
    pairs = []
    for _ in range(rng.choice((0, 1, 2, 3, 3, 4, 5, 6))):
        name = rng.choice(NAMES)
        pairs.append(name if rng.random() < 0.05 else f"{name}={rng.choice(VALUES)}")
    if pairs and rng.random() < 0.1:
        pairs.append(rng.choice(pairs))  # a repeated pair
    query = "&".join(pairs) + rng.choice(("", "", "", "&", "&&"))
    scheme = rng.choice(("http", "https", "https", "HTTPS"))
    mark = "?" if query or rng.random() < 0.1 else ""
    return f"{scheme}://{rng.choice(HOSTS)}/{'/'.join(segments)}{mark}{query}" + rng.choice(
        FRAGMENTS
    )


def learned_looking_maps(texts: list[str], rng: random.Random) -> list[DomainMap]:
    """Patterns of the URLs and of subsets of their names, kept and dropped at random."""
    stamp = "2026-12-02T00:00:00Z"
    patterns: dict[str, dict[str, PatternDecision]] = {}
    for text in texts:
        try:
            url = parse(text)
        except InvalidURL:
            continue
        names = sorted(url.names)
        if not names:
            continue
        for subset in (names, [n for n in names if rng.random() < 0.6]):
            if not subset:
                continue
            kept = {name for name in subset if rng.random() < 0.6}
            params = {}
            for name in subset:
                keep = name in kept
                layer = Layer.LEARNED if rng.random() < 0.85 else Layer.INSUFFICIENT
                defaults = [url.value_of(name)] if keep and rng.random() < 0.3 else []
                params[name] = ParamEvidence(
                    "keep" if keep else "drop", layer, 3, 3 * keep, 3 * (not keep), 0, defaults
                )
            key = pattern_key(path_shape(url.path), subset)
            patterns.setdefault(url.host, {})[key] = PatternDecision(
                frozenset(kept), frozenset(subset) - kept, params, Verification(), stamp, 5
            )
    return [DomainMap(host, 1, stamp, by_key) for host, by_key in patterns.items()]


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
