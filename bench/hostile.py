"""Peak memory of ``miqps learn`` against a hostile site, beside a benign site of the same size.

Serves every hostile response of issue 9 on loopback (``simweb.hostile``), writes one URL
list pointing at it and one pointing at its benign product pages (the same number of URLs,
the same host and parameters), and runs ``miqps learn --allow-private`` on each list as its
own process::

    .venv/bin/python -m bench.hostile [--per-route 4] [--each-route]

For each run it prints the exit code, whether maps were written, the child's peak RSS (from
``wait4``) and its ratio to the benign run. ``--each-route`` adds one run per hostile route,
to show which response costs the most. The target is exit 0, maps written and a peak RSS
of at most 500 MB; this script prints figures and does not assert them. Each child runs
under an address-space limit (``--memory-limit-mb``), so that a response that still
explodes fails that child instead of the machine.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from simweb.hostile import GIB, HostileWeb

TARGET_PEAK_MB = 500
HOSTILE_INPUT_HOST = "http://xn--zz-.attacker.test/p?item=1&ref=2"


@dataclass(frozen=True, slots=True)
class Run:
    name: str
    exit_code: int
    maps_written: bool
    peak_rss_mb: float
    seconds: float
    summary: list[str]


def learn(name: str, urls: list[str], workdir: Path, args: argparse.Namespace) -> Run:
    url_file = workdir / f"{name}.urls"
    maps_file = workdir / f"{name}.maps.jsonl"
    url_file.write_text("\n".join(urls) + "\n", encoding="utf-8")
    command = [
        sys.executable,
        "-m",
        "miqps.cli",
        "learn",
        "--urls",
        str(url_file),
        "--out",
        str(maps_file),
        "--allow-private",
        "--no-progress",
        "--timeout",
        str(args.timeout),
        "--concurrency",
        "4",
        "--rate",
        "50",
    ]
    limit = args.memory_limit_mb * 1024 * 1024

    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    started = time.monotonic()
    with subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=limit_memory,
    ) as child:
        output = child.stdout.read() if child.stdout else ""
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
    return Run(
        name=name,
        exit_code=child.returncode,
        maps_written=maps_file.exists() and maps_file.stat().st_size > 0,
        peak_rss_mb=usage.ru_maxrss / 1024,  # KiB on Linux
        seconds=time.monotonic() - started,
        summary=output.strip().splitlines(),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-route", type=int, default=4, help="URLs per hostile route")
    parser.add_argument(
        "--bomb-gib",
        type=int,
        default=1,
        help="decoded size of the bombs in GiB (the big one is 4 times it)",
    )
    parser.add_argument("--timeout", type=float, default=3.0, help="learn --timeout")
    parser.add_argument(
        "--memory-limit-mb",
        type=int,
        default=3072,
        help="address-space limit of each learn process",
    )
    parser.add_argument(
        "--each-route", action="store_true", help="also learn on each hostile route alone"
    )
    parser.add_argument(
        "--show-summary", action="store_true", help="print the learn summary of the hostile run"
    )
    args = parser.parse_args(argv)

    with (
        HostileWeb(bomb_size=args.bomb_gib * GIB, slow_seconds=3 * args.timeout) as web,
        tempfile.TemporaryDirectory() as tmp,
    ):
        workdir = Path(tmp)
        hostile = [*web.hostile_urls(args.per_route), HOSTILE_INPUT_HOST]
        runs = [
            learn("benign", web.benign_urls(len(hostile)), workdir, args),
            learn("hostile", hostile, workdir, args),
        ]
        if args.each_route:
            for route in HostileWeb.ROUTES:
                urls = [url for url in hostile if f"/{route}?" in url]
                runs.append(learn(route, urls, workdir, args))

    baseline = runs[0].peak_rss_mb
    print(
        f"{len(hostile)} URLs per list; bombs of {args.bomb_gib} and {4 * args.bomb_gib} GiB; "
        f"target: exit 0, maps written, peak RSS <= {TARGET_PEAK_MB} MB"
    )
    print(f"{'run':<24} {'exit':>4} {'maps':>5} {'peak RSS MB':>12} {'x benign':>9} {'seconds':>8}")
    for run in runs:
        print(
            f"{run.name:<24} {run.exit_code:>4} {'yes' if run.maps_written else 'no':>5} "
            f"{run.peak_rss_mb:>12.1f} {run.peak_rss_mb / baseline:>9.2f} {run.seconds:>8.1f}"
        )
    hostile_run = runs[1]
    if args.show_summary or hostile_run.exit_code != 0:
        print("\nlearn output of the hostile run:")
        print("\n".join(f"  {line}" for line in hostile_run.summary[-40:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
