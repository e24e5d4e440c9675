"""Build time, peak memory and file size of ``miqps report``, against ``miqps canonicalize``.

Generates a crawl with parameter sprawl (product, category and search pages of about 60
shops, most URLs carrying tracking, click-id, referral or session parameters drawn from
small pools, so one page is reached under many URLs) and maps that learned most patterns,
then runs, each as its own process on the same files, in the same run:

- ``miqps canonicalize --maps`` (the baseline: the plain fast path),
- ``miqps canonicalize --maps --json`` (one decision per URL, as the report takes),
- ``miqps report --urls --maps --out``.

::

    .venv/bin/python -m bench.report [--urls 100000] [--repeat 1] [--keep DIR]

It prints figures and ratios to the baseline; it asserts no target. It exits non-zero only
if a process fails.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.canonicalize_speed import _miqps_command
from miqps.maps import write_maps
from testkit.sprawl import sprawl_corpus


def write_inputs(count: int, seed: int, urls_file: Path, maps_file: Path) -> None:
    urls, maps = sprawl_corpus(count, seed)
    urls_file.write_text("\n".join(urls) + "\n", encoding="utf-8")
    write_maps(maps_file, maps)
    print(f"{len(maps)} domains, {sum(len(m.patterns) for m in maps):,} learned patterns")


def run(command: list[str], stdin: Path | None, stdout: Path) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes) of one process."""
    with stdin.open("rb") if stdin else open(os.devnull, "rb") as source, stdout.open("wb") as sink:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdin=source, stdout=sink, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - started
        error = process.stderr.read() if process.stderr else b""
        if process.stderr:
            process.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {error.decode(errors='replace')}")
    return seconds, usage.ru_maxrss * 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--urls", type=int, default=100_000, help="URLs to generate")
    parser.add_argument("--repeat", type=int, default=1, help="runs per process; best counts")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--keep", type=Path, help="keep the inputs and the report here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="miqps-bench-report-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        urls_file, maps_file, report = (
            folder / "urls.txt",
            folder / "maps.jsonl",
            folder / "report.html",
        )
        # Written by another process: a child's peak RSS counts its parent's at the fork.
        writer = multiprocessing.get_context("spawn").Process(
            target=write_inputs, args=(args.urls, args.seed, urls_file, maps_file)
        )
        writer.start()
        writer.join()
        if writer.exitcode != 0:
            raise RuntimeError("generating the inputs failed")
        print(f"{args.urls:,} URLs ({urls_file.stat().st_size / 2**20:.1f} MiB) in {maps_file}")
        miqps = _miqps_command()
        contenders = {
            "canonicalize": ([*miqps, "canonicalize", "--maps", str(maps_file)], urls_file),
            "canonicalize --json": (
                [*miqps, "canonicalize", "--json", "--maps", str(maps_file)],
                urls_file,
            ),
            "report": (
                [
                    *miqps,
                    "report",
                    "--urls",
                    str(urls_file),
                    "--maps",
                    str(maps_file),
                    "--out",
                    str(report),
                ],
                None,
            ),
        }
        best: dict[str, tuple[float, int]] = {}
        for _ in range(args.repeat):
            for name, (command, stdin) in contenders.items():
                seconds, peak = run(command, stdin, folder / "out.txt")
                previous = best.get(name, (seconds, peak))
                best[name] = (min(previous[0], seconds), max(previous[1], peak))
        size = report.stat().st_size
    baseline_seconds, baseline_peak = best["canonicalize"]
    print(
        f"\n| process (best of {args.repeat}) | wall s | URLs/s | × canonicalize | peak RSS MiB |"
    )
    print("|---|---:|---:|---:|---:|")
    for name, (seconds, peak) in best.items():
        print(
            f"| miqps {name} | {seconds:.2f} | {args.urls / seconds:,.0f} | "
            f"{seconds / baseline_seconds:.1f} | {peak / 2**20:.0f} |"
        )
    print(
        f"\nreport file: {size / 2**20:.2f} MiB ({size / args.urls:.1f} bytes per URL); "
        f"peak RSS {best['report'][1] / baseline_peak:.1f}× canonicalize's"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
