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
from pathlib import Path

from miqps.maps import write_maps
from testkit.urlgen import build_maps, generate

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
