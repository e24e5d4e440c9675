"""``miqps maps publish`` of many maps: time and peak RSS, against an older version's.

Writes maps files (as ``bench.maps_load`` writes them) and publishes each to fresh topics
on the broker of ``KAFKA_BOOTSTRAP_SERVERS`` (default 127.0.0.1:9092) with
``miqps maps publish FILE`` run as its own process; each process's peak RSS comes from
``wait4``. Measured in the same run, on ``--small`` maps: this checkout's command and the one
of ``--baseline-ref`` (``git archive``); then this checkout's on ``--domains`` maps::

    .venv/bin/python -m bench.publish_bulk [--domains 100000] [--small 1000] \\
        [--baseline-ref f7d7456] [--guarantee exactly_once]

It prints figures; it asserts no target. It exits non-zero only if a process fails.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.children import measured
from bench.maps_load import ROOT, export_commit, write_maps_file
from streams.kafka.admin import ensure_topics
from streams.settings import Settings
from testkit.tools import delete_topics, isolated_settings


def publish(code_root: Path, maps: Path, settings: Settings, guarantee: str) -> tuple[float, float]:
    """Seconds and peak RSS (MiB) of publishing ``maps`` with the code at ``code_root``."""
    environment = {
        **os.environ,
        "PYTHONPATH": f"{code_root}{os.pathsep}{ROOT}",
        "MIQPS_PROCESSING_GUARANTEE": guarantee,
    }
    command = [sys.executable, "-m", "miqps.cli", "maps", "publish", str(maps)]
    command += ["--bootstrap-servers", settings.bootstrap_servers]
    command += ["--topic-prefix", settings.app_id + ".", "--timeout", "60"]
    run = measured(command, f"publishing {maps} from {code_root}", env=environment, cwd=code_root)
    return run.seconds, run.peak_mib


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domains", type=int, default=100_000)
    parser.add_argument("--small", type=int, default=1_000)
    parser.add_argument("--patterns", type=int, default=20)
    parser.add_argument("--baseline-ref", default="f7d7456")
    parser.add_argument("--guarantee", default="exactly_once")
    args = parser.parse_args()
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    base = Settings.from_env({"KAFKA_BOOTSTRAP_SERVERS": bootstrap})
    with tempfile.TemporaryDirectory(prefix="miqps-publish-bulk-") as folder:
        work = Path(folder)
        code = {"current": ROOT}
        baseline = export_commit(args.baseline_ref, work / "baseline")
        if baseline is not None:
            subprocess.run(
                ["git", "-C", str(ROOT), "archive", args.baseline_ref, "streams"],
                check=True,
                stdout=open(work / "streams.tar", "wb"),  # noqa: SIM115
            )
            subprocess.run(
                ["tar", "-xf", str(work / "streams.tar"), "-C", str(baseline)], check=True
            )
            code = {f"baseline {args.baseline_ref}": baseline, **code}
        runs = [(label, root, args.small) for label, root in code.items()]
        runs.append(("current", ROOT, args.domains))
        files: dict[int, Path] = {}
        for label, root, domains in runs:
            if domains not in files:
                files[domains] = work / f"maps-{domains}.jsonl"
                write_maps_file(files[domains], domains, args.patterns, seed=7)
            settings = isolated_settings(base, "publish-bulk", work / "state", partitions=4)
            ensure_topics(settings)
            try:
                seconds, peak = publish(root, files[domains], settings, args.guarantee)
            finally:
                delete_topics(settings)
            size = files[domains].stat().st_size / 2**20
            print(
                f"{label:<20} {domains:>7} maps ({size:,.0f} MiB, {args.guarantee}): "
                f"{seconds:7.1f}s, {1e3 * seconds / domains:6.2f} ms per map, "
                f"peak RSS {peak:7.1f} MiB"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
