"""Peak RSS of loading a large maps file, against its size and per domain.

Writes a maps file of ``--domains`` domains (``--patterns`` patterns each, four or five
parameters per pattern, with evidence, as ``miqps learn`` writes them), then runs
``miqps canonicalize --maps FILE`` on empty input as its own process, which loads (and
validates) every map and exits. Each process's peak RSS comes from ``wait4``. Measured in the
same run:

- ``empty``: the same command with an empty maps file (interpreter and imports);
- ``baseline``: the same command from the code of ``--baseline-ref`` (``git archive``), when
  the repository has that commit;
- ``current``: the code of this checkout.

The cost of the maps is each peak less the ``empty`` peak::

    .venv/bin/python -m bench.maps_load [--domains 20000] [--patterns 20] [--baseline-ref c8368d7]

It prints figures; it asserts no target. It exits non-zero only if a process fails.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path

from miqps.maps import DomainMap, Layer, ParamEvidence, PatternDecision, Verification, utc_now

ROOT = Path(__file__).resolve().parents[1]
SHAPES = ("/p/*", "/c/*", "/search", "/", "/a/*/*", "/list", "/item/*", "/shop/*/*")
CONTENT = ("id", "page", "q", "sort", "variant", "color", "size", "lang", "sku", "start")
NOISE = (
    "utm_source",
    "utm_medium",
    "utm_campaign",
    "gclid",
    "fbclid",
    "ref",
    "sid",
    "mc",
    "session",
    "_ga",
    "trk",
    "src",
)


def domain_map(rng: random.Random, number: int, patterns: int) -> DomainMap:
    decisions: dict[str, PatternDecision] = {}
    while len(decisions) < patterns:
        shape = rng.choice(SHAPES) + "/" * rng.randrange(3)
        kept = rng.sample(CONTENT, rng.randrange(1, 3))
        dropped = rng.sample(NOISE, rng.randrange(2, 4))
        key = shape + "?" + "&".join(sorted(kept + dropped))
        params = {name: ParamEvidence("keep", Layer.LEARNED, 6, 5, 1, 0) for name in kept}
        params |= {name: ParamEvidence("drop", Layer.LEARNED, 6, 0, 6, 1) for name in dropped}
        if rng.random() < 0.3:
            params[kept[0]].default_values = [f"{kept[0]}=1"]
        decisions[key] = PatternDecision(
            frozenset(kept),
            frozenset(dropped),
            params,
            Verification(3, 0, 1, []),
            utc_now(),
            rng.randrange(10, 5000),
        )
    return DomainMap(f"shop{number}.example", rng.randrange(1, 40), utc_now(), decisions)


def write_maps_file(path: Path, domains: int, patterns: int, seed: int) -> None:
    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as handle:
        for number in range(domains):
            handle.write(domain_map(rng, number, patterns).dumps() + "\n")


@dataclass(frozen=True, slots=True)
class Run:
    peak_bytes: int
    seconds: float


def load_in_child(code_root: Path, maps: Path) -> Run:
    """Peak RSS and wall time of ``miqps canonicalize --maps maps`` run from ``code_root``."""
    environment = {**os.environ, "PYTHONPATH": str(code_root)}
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "miqps.cli", "canonicalize", "--maps", str(maps)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=environment,
        cwd=code_root,  # "-m" puts the working directory first on the path
    )
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    assert process.stderr is not None
    errors = process.stderr.read().decode("utf-8", "replace")
    process.stderr.close()
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(
            f"loading {maps} from {code_root} failed ({process.returncode}): {errors[-2000:]}"
        )
    return Run(usage.ru_maxrss * 1024, seconds)


def export_commit(ref: str, into: Path) -> Path | None:
    """The ``miqps`` package of commit ``ref`` extracted under ``into``; None if unknown."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, "miqps"], capture_output=True, check=False
    )
    if archive.returncode != 0:
        return None
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domains", type=int, default=20_000)
    parser.add_argument("--patterns", type=int, default=20, help="patterns per domain")
    parser.add_argument(
        "--baseline-ref",
        default="c8368d7",
        help="commit whose loader is the baseline ('' for none)",
    )
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="miqps-maps-load-") as folder:
        work = Path(folder)
        maps, empty = work / "maps.jsonl", work / "empty.jsonl"
        write_maps_file(maps, args.domains, args.patterns, args.seed)
        empty.write_bytes(b"")
        size = maps.stat().st_size
        print(
            f"maps file: {args.domains} domains x {args.patterns} patterns, "
            f"{size / 2**20:.1f} MiB ({size / args.domains:.0f} bytes per domain)"
        )
        code = {"current": ROOT}
        if args.baseline_ref:
            baseline = export_commit(args.baseline_ref, work / "baseline")
            if baseline is None:
                print(f"baseline {args.baseline_ref}: not in this repository; skipped")
            else:
                code = {f"baseline {args.baseline_ref}": baseline, **code}
        floor = load_in_child(ROOT, empty)
        print(f"{'empty maps file':<22} peak RSS {floor.peak_bytes / 2**20:8.1f} MiB")
        costs: dict[str, int] = {}
        for label, root in code.items():
            run = load_in_child(root, maps)
            cost = run.peak_bytes - floor.peak_bytes
            costs[label] = cost
            print(
                f"{label:<22} peak RSS {run.peak_bytes / 2**20:8.1f} MiB, "
                f"maps cost {cost / 2**20:8.1f} MiB = {cost / size:.2f}x the file, "
                f"{cost / args.domains / 1024:.1f} KiB per domain, "
                f"{cost / (args.domains * args.patterns):.0f} bytes per pattern, "
                f"load {run.seconds:.1f}s"
            )
        if len(costs) == 2:
            before, after = costs.values()
            print(f"current / baseline maps cost: {after / before:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
