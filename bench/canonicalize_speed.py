"""Whole-process speed of ``miqps canonicalize --maps`` against w3lib (and a stdlib baseline).

``miqps canonicalize`` runs twice: with its compiled per-URL path (``miqps_native``, when
``scripts/setup`` built it) and with ``MIQPS_NATIVE=0``, its pure-Python path; the two
outputs must be byte-identical, or the benchmark fails.

Generates realistic URLs over about 200 domains, writes maps in which most patterns are
learned (with confirmed default values for ``page``, ``sort`` and ``lang``), then times
each canonicalizer as its own process, stdin file in, stdout file out, best of
``--repeat`` runs, all in the same run so the ratios are comparable::

    .venv/bin/python -m bench.canonicalize_speed [--urls 1000000] [--repeat 3]
        [--baseline DIR]

``--baseline DIR`` also times the ``miqps`` of another source tree (for example
``git archive c8368d7 | tar -x -C DIR``) on the same input, to measure what a change costs.
Half of the sites whose links carry ``jsessionid`` put it in the path (``;jsessionid=``).

It prints figures; it does not assert a target. It exits non-zero only on errors (a process
failing, or output with a different number of lines than the input).
"""

from __future__ import annotations

import argparse
import filecmp
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from miqps.maps import DomainMap, Layer, ParamEvidence, PatternDecision, Verification, write_maps
from miqps.urls import path_shape

DOMAIN_COUNT = 200
LEARNED_SHARE = 0.9


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


_WORDS = _words(
    "red blue green black white large small classic organic vintage leather cotton summer "
    "winter running trail garden kitchen travel office wireless smart mini pro ultra eco"
)
_NOUNS = _words(
    "shoe jacket lamp chair table phone cable bag watch camera kettle mug desk sofa tent "
    "bike helmet book guitar blender"
)
_TOPICS = _words("politics sports tech science business culture travel health food opinion")
_TLDS = ("com", "com", "com", "net", "org", "de", "co.uk", "fr", "io", "shop")
_IDNA_HOSTS = ("bücher-{n}.de", "münchen-shop{n}.de", "café-{n}.fr", "例え{n}.jp", "пример{n}.рф")

# What a site's parameters are, by kind: content parameters change the page (kept), the
# rest are tracking, session and identity noise (dropped by the learned maps).
_CONTENT = {
    "product": ("id", "variant", "color", "size", "sku"),
    "search": ("q", "page", "sort", "category", "brand", "price_max"),
    "article": ("page", "lang", "amp"),
    "category": ("page", "sort", "sz", "start", "filter"),
}
# Confirmed default values the maps carry (a learned map elides them): 30% of URLs use them.
_DEFAULTS = {"page": "page=1", "sort": "sort=relevance", "lang": "lang=en"}
_TRACKING = (
    "utm_source",
    "utm_medium",
    "utm_campaign",
    "utm_content",
    "gclid",
    "fbclid",
    "ref",
    "mc_eid",
    "_ga",
    "src",
    "cmpid",
    "yclid",
)
_SESSION = ("sid", "sessionid", "jsessionid", "PHPSESSID", "_hsenc")
_IDENTITY = ("uid", "user_id", "email_hash", "token")
_NOISE = _TRACKING + _SESSION + _IDENTITY


@dataclass
class Site:
    """A site: how its URLs look, and which parameter combinations its links carry."""

    host: str  # as written in URLs (may be Unicode or uppercase)
    ascii_host: str  # as WHATWG serializes it: the key of its map
    kinds: tuple[str, ...]
    paths: dict[str, tuple[int, ...]]  # kind -> which path templates the site uses
    combos: dict[str, tuple[tuple[str, ...], ...]]  # kind -> content parameter sets
    bundles: tuple[tuple[str, ...], ...]  # tracking/session/identity sets links carry
    session_in_path: bool  # jsessionid as a matrix parameter of the last path segment
    patterns: dict[str, tuple[frozenset[str], frozenset[str]]] = field(default_factory=dict)


def make_sites(rng: random.Random, count: int = DOMAIN_COUNT) -> list[Site]:
    import can_ada

    sites: list[Site] = []
    for number in range(count):
        if number % 40 == 7:
            host = rng.choice(_IDNA_HOSTS).format(n=number)
        else:
            stem = f"{rng.choice(_WORDS)}-{rng.choice(_NOUNS)}{number}"
            host = f"{rng.choice(('www.', 'shop.', '', 'm.'))}{stem}.{rng.choice(_TLDS)}"
        ascii_host = can_ada.parse(f"https://{host}/").hostname
        kinds = tuple(rng.sample(sorted(_CONTENT), rng.randint(1, 3)))
        paths = {kind: tuple(rng.sample(range(_PATH_TEMPLATES), 2)) for kind in kinds}
        combos = {
            kind: tuple(tuple(rng.sample(_CONTENT[kind], rng.randint(1, 3))) for _ in range(2))
            for kind in kinds
        }
        noise = rng.sample(_NOISE, 8)
        bundles = ((), (), *(tuple(noise[i : i + rng.randint(1, 3)]) for i in range(0, 8, 2)))
        sites.append(Site(host, ascii_host, kinds, paths, combos, bundles, rng.random() < 0.5))
    return sites


_PATH_TEMPLATES = 3


def _slug(rng: random.Random) -> str:
    return "-".join([*rng.sample(_WORDS, rng.randint(1, 3)), rng.choice(_NOUNS)])


def _path(rng: random.Random, kind: str, template: int) -> str:
    if kind == "product":
        return (
            f"/p/{rng.randint(1, 10**7)}",
            f"/product/{_slug(rng)}-{rng.randint(1, 10**6)}",
            "/item",
        )[template]
    if kind == "search":
        return ("/search", "/s", "/search/results")[template]
    if kind == "article":
        return (
            f"/news/{rng.randint(2015, 2026)}/{rng.randint(1, 12):02d}/{_slug(rng)}",
            f"/{rng.choice(_TOPICS)}/{_slug(rng)}-{rng.randint(1, 10**5)}",
            f"/blog/{_slug(rng)}",
        )[template]
    return (
        f"/c/{rng.choice(_NOUNS)}",
        f"/c/{rng.choice(_NOUNS)}/{rng.choice(_WORDS)}",
        "/category",
    )[template]


def _value(rng: random.Random, name: str) -> str:
    if name == "q":
        words = rng.sample((*_WORDS, *_NOUNS), rng.randint(1, 3))
        spelling = rng.random()
        if spelling < 0.5:
            return "+".join(words)
        if spelling < 0.8:
            return "%20".join(words)
        return "%20".join(words) + rng.choice(("%C3%A9t%C3%A9", "%e2%82%ac", "%2fx", "%7e1"))
    if name in _DEFAULTS and rng.random() < 0.3:
        return _DEFAULTS[name].partition("=")[2]
    if name in ("id", "sku", "uid", "user_id", "page", "start", "sz", "price_max"):
        return str(rng.randint(1, 10**6))
    if name in (
        "sid",
        "sessionid",
        "jsessionid",
        "PHPSESSID",
        "token",
        "email_hash",
        "_ga",
        "gclid",
        "fbclid",
        "yclid",
        "mc_eid",
        "_hsenc",
    ):
        return f"{rng.getrandbits(64):016x}"
    if name == "filter":
        return rng.choice(("brand%3Aacme", "color%3ablue%2Csize%3AM", "price%3C100"))
    return rng.choice(_WORDS)


def generate(n: int, seed: int = 7) -> tuple[list[str], list[Site]]:
    """``n`` URLs over :data:`DOMAIN_COUNT` sites, and the sites with the patterns they use.

    Each URL carries one of its site's content parameter sets plus one tracking, session or
    identity bundle (or none): 1 to 6 parameters, shuffled, with fresh values.
    """
    rng = random.Random(seed)
    sites = make_sites(rng)
    weights = [1.0 / (rank + 1) ** 0.6 for rank in range(len(sites))]  # a few big sites
    urls: list[str] = []
    for site in rng.choices(sites, weights=weights, k=n):
        kind = rng.choice(site.kinds)
        path = _path(rng, kind, rng.choice(site.paths[kind]))
        content_names = rng.choice(site.combos[kind])
        noise_names = rng.choice(site.bundles)
        names = [*content_names, *noise_names]
        rng.shuffle(names)
        if site.session_in_path and "jsessionid" in names:
            names.remove("jsessionid")
            path += f";jsessionid={_value(rng, 'jsessionid')}"
            noise_names = tuple(";" + n if n == "jsessionid" else n for n in noise_names)
        query = "&".join([f"{name}={_value(rng, name)}" for name in names])
        scheme = "https" if rng.random() < 0.9 else "http"
        host = site.host.upper() if rng.random() < 0.02 else site.host
        fragment = rng.choice(("", "", "", "", "", "", "", "", "#reviews", "#!/tab/specs"))
        urls.append(f"{scheme}://{host}{path}?{query}{fragment}")
        key = (
            path_shape(path.partition(";")[0])
            + "?"
            + "&".join(sorted([*content_names, *noise_names]))
        )
        site.patterns.setdefault(key, (frozenset(content_names), frozenset(noise_names)))
    return urls, sites


def build_maps(sites: list[Site], rng: random.Random) -> list[DomainMap]:
    """One map per site; :data:`LEARNED_SHARE` of the patterns seen are learned."""
    maps: list[DomainMap] = []
    stamp = "2026-01-01T00:00:00Z"
    for site in sites:
        patterns: dict[str, PatternDecision] = {}
        for key, (kept, dropped) in sorted(site.patterns.items()):
            if rng.random() >= LEARNED_SHARE:
                continue
            params = {
                name: ParamEvidence(
                    "keep",
                    Layer.LEARNED,
                    3,
                    3,
                    0,
                    0,
                    [_DEFAULTS[name]] if name in _DEFAULTS else [],
                )
                for name in kept
            }
            params.update(
                {name: ParamEvidence("drop", Layer.LEARNED, 3, 0, 3, 0) for name in dropped}
            )
            patterns[key] = PatternDecision(
                kept, dropped, params, Verification(2, 0, 0, []), stamp, 10
            )
        maps.append(DomainMap(site.ascii_host, 1, stamp, patterns))
    return maps


W3LIB_BASELINE = r"""
import sys
from w3lib.url import canonicalize_url
out = []
append = out.append
for line in sys.stdin:
    try:
        append(canonicalize_url(line.rstrip("\r\n")))
    except Exception:
        append("")
    if len(out) >= 8192:
        sys.stdout.write("\n".join(out) + "\n")
        out.clear()
if out:
    sys.stdout.write("\n".join(out) + "\n")
"""

STDLIB_BASELINE = r"""
import sys
from urllib.parse import urlsplit, urlunsplit
DROP = ("utm_", "gclid=", "fbclid=", "msclkid=")
out = []
append = out.append
for line in sys.stdin:
    try:
        p = urlsplit(line.rstrip("\r\n"))
        pairs = sorted(x for x in p.query.split("&") if x and not x.startswith(DROP))
        append(urlunsplit((p.scheme, p.netloc.lower(), p.path or "/", "&".join(pairs), "")))
    except Exception:
        append("")
    if len(out) >= 8192:
        sys.stdout.write("\n".join(out) + "\n")
        out.clear()
if out:
    sys.stdout.write("\n".join(out) + "\n")
"""


def _miqps_command() -> list[str]:
    script = Path(sys.executable).with_name("miqps")
    return [str(script)] if script.exists() else [sys.executable, "-m", "miqps.cli"]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_process(
    command: list[str], urls_file: Path, out_file: Path, lines: int
) -> tuple[float, float]:
    """Wall and CPU seconds of one run of ``command`` with ``urls_file`` on stdin."""
    with urls_file.open("rb") as stdin, out_file.open("wb") as stdout:
        cpu = _children_cpu()
        started = time.perf_counter()
        result = subprocess.run(
            command, stdin=stdin, stdout=stdout, stderr=subprocess.PIPE, check=False
        )
        seconds = time.perf_counter() - started
        cpu = _children_cpu() - cpu
    if result.returncode != 0:
        raise RuntimeError(
            f"{command[0]} failed ({result.returncode}): "
            f"{result.stderr.decode(errors='replace')[-2000:]}"
        )
    with out_file.open("rb") as handle:
        produced = sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b""))
    if produced != lines:
        raise RuntimeError(f"{command[0]} printed {produced} lines for {lines} inputs")
    return seconds, cpu


def _chunks(urls: list[str], size: int = 1 << 14) -> Iterator[str]:
    for start in range(0, len(urls), size):
        yield "\n".join(urls[start : start + size]) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--urls", type=int, default=1_000_000, help="URLs to generate")
    parser.add_argument("--repeat", type=int, default=3, help="runs per process; best counts")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--no-stdlib", action="store_true", help="skip the stdlib baseline")
    parser.add_argument("--keep", type=Path, help="keep the inputs and outputs in this folder")
    parser.add_argument(
        "--baseline", type=Path, help="a source tree of another miqps version, timed alongside"
    )
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="miqps-bench-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        urls, sites = generate(args.urls, args.seed)
        urls_file = folder / "urls.txt"
        with urls_file.open("w", encoding="utf-8") as handle:
            handle.writelines(_chunks(urls))
        maps = build_maps(sites, random.Random(args.seed + 1))
        maps_file = folder / "maps.jsonl"
        write_maps(maps_file, maps)
        learned = sum(len(m.patterns) for m in maps)
        seen = sum(len(s.patterns) for s in sites)
        print(
            f"{len(urls):,} URLs over {len(sites)} domains, {learned:,} of {seen:,} patterns "
            f"learned ({time.perf_counter() - started:.1f}s to generate)"
        )

        maps_path = str(maps_file)
        contenders: list[tuple[str, list[str]]] = [
            (
                "miqps canonicalize --maps",
                [*_miqps_command(), "canonicalize", "--maps", maps_path],
            ),
            (
                "miqps pure Python --maps",
                ["env", "MIQPS_NATIVE=0", *_miqps_command(), "canonicalize", "--maps", maps_path],
            ),
            ("w3lib.canonicalize_url", [sys.executable, "-c", W3LIB_BASELINE]),
        ]
        if args.baseline is not None:
            contenders.append(
                (
                    "miqps baseline --maps",
                    [
                        "env",
                        f"PYTHONPATH={args.baseline.resolve()}",
                        sys.executable,
                        "-m",
                        "miqps.cli",
                        "canonicalize",
                        "--maps",
                        str(maps_file),
                    ],
                )
            )
        if not args.no_stdlib:
            contenders.append(("stdlib split+filter+sort", [sys.executable, "-c", STDLIB_BASELINE]))
        best: dict[str, float] = {}
        best_cpu: dict[str, float] = {}
        for round_number in range(args.repeat):
            for name, command in contenders:  # interleaved, so load drifts hit all alike
                out_file = folder / f"out-{'-'.join(name.split()[:2]).split('.')[0]}.txt"
                seconds, cpu = time_process(command, urls_file, out_file, len(urls))
                best[name] = min(best.get(name, seconds), seconds)
                best_cpu[name] = min(best_cpu.get(name, cpu), cpu)
                print(
                    f"  run {round_number + 1}: {name:28s} {seconds:7.2f}s wall {cpu:7.2f}s CPU",
                    flush=True,
                )
        compiled, pure_python = folder / "out-miqps-canonicalize.txt", folder / "out-miqps-pure.txt"
        if not filecmp.cmp(compiled, pure_python, shallow=False):
            raise RuntimeError(f"{compiled} and {pure_python} differ: the two paths disagree")
        print("the compiled and the pure-Python outputs are byte-identical")

    n = len(urls)
    print(f"\n| process (best of {args.repeat}) | wall s | URLs/s | CPU s | URLs per CPU s |")
    print("|---|---:|---:|---:|---:|")
    for name, seconds in best.items():
        cpu = best_cpu[name]
        print(f"| {name} | {seconds:.2f} | {n / seconds:,.0f} | {cpu:.2f} | {n / cpu:,.0f} |")
    ours, theirs = "miqps canonicalize --maps", "w3lib.canonicalize_url"
    pure = "miqps pure Python --maps"
    print(f"\nratio miqps / w3lib (URLs/s, wall): {best[theirs] / best[ours]:.2f}x")
    print(f"ratio miqps / w3lib (URLs per CPU second): {best_cpu[theirs] / best_cpu[ours]:.2f}x")
    print(f"ratio pure Python / w3lib (URLs/s, wall): {best[theirs] / best[pure]:.2f}x")
    print(f"ratio miqps / its pure-Python path (URLs/s, wall): {best[pure] / best[ours]:.2f}x")
    if args.baseline is not None:
        base = "miqps baseline --maps"
        print(f"ratio miqps / baseline (URLs/s, wall): {best[base] / best[ours]:.2f}x")
        cpu_ratio = best_cpu[base] / best_cpu[ours]
        print(f"ratio miqps / baseline (URLs per CPU second): {cpu_ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
