"""Content ID cost per page: this snapshotter against an earlier version, in the same run.

    .venv/bin/python -m bench.content_speed [--pages 600] [--repeat 3] [--baseline REV]

Renders item, listing, print-view and A/B-layout pages of the simulated web (no server, no
network), then times, per page, what the prober spends on content: the snapshot of the HTML,
the comparison of two fetches of one page (``differing_paths``) and the content ID. The
baseline is ``miqps/content.py`` as it was at git revision ``REV`` (by default the version
before the last change to the file), loaded from git beside the current one. Prints
microseconds per page and the ratio current / baseline; lower is cheaper.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

from bench.revisions import before_last_change
from miqps import content
from simweb.corpus import generate_corpus
from simweb.render import render_document, render_main
from simweb.resolve import resolve, split_target
from simweb.sites import Site, build_sites

_FILE = "miqps/content.py"


def load_baseline(revision: str, directory: Path) -> ModuleType:
    source = subprocess.run(
        ["git", "show", f"{revision}:{_FILE}"], check=True, capture_output=True
    ).stdout
    path = directory / "content_baseline.py"
    path.write_bytes(source)
    spec = importlib.util.spec_from_file_location("content_baseline", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {_FILE} at {revision}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def pages(sites: Sequence[Site], count: int) -> list[tuple[str, bytes, bytes]]:
    """``count`` pages that render as HTML: (URL, one fetch, another fetch)."""
    by_host = {site.host: site for site in sites}
    rng = random.Random(5)
    out: list[tuple[str, bytes, bytes]] = []
    for entry in generate_corpus(sites, count, seed=5):
        host, path, query = split_target(entry.url)
        site = by_host[host]
        answer = resolve(site, path, query)
        if answer.location or answer.page.route is None:
            continue
        main = render_main(site, answer.page)
        fetches = [
            render_document(site, answer.page, main, answer.echo, rng, entry.url).encode()
            for _ in range(2)
        ]
        out.append((entry.url, fetches[0], fetches[1]))
        if len(out) == count:
            break
    return out


def steps(
    module: ModuleType, corpus: Sequence[tuple[str, bytes, bytes]]
) -> dict[str, Callable[[], object]]:
    snapshots = [
        (
            module.snapshot_html(200, url, first, request_url=url),
            module.snapshot_html(200, url, second, request_url=url),
        )
        for url, first, second in corpus
    ]
    return {
        "snapshot": lambda: [
            module.snapshot_html(200, url, body, request_url=url) for url, body, _ in corpus
        ],
        "compare two fetches": lambda: [module.differing_paths(a, b) for a, b in snapshots],
        "content ID": lambda: [module.content_id(a) for a, _ in snapshots],
    }


def per_page(
    modules: Sequence[ModuleType], corpus: Sequence[tuple[str, bytes, bytes]], repeat: int
) -> list[dict[str, float]]:
    """For each module, the best of ``repeat`` runs of each step in microseconds per page;
    the modules take turns, so that both see the same machine."""
    prepared = [steps(module, corpus) for module in modules]
    best: list[dict[str, float]] = [{} for _ in modules]
    for _ in range(repeat):
        for name in prepared[0]:
            for timings, module_steps in zip(best, prepared, strict=True):
                started = time.perf_counter()
                module_steps[name]()
                seconds = (time.perf_counter() - started) / len(corpus) * 1e6
                timings[name] = min(timings.get(name, seconds), seconds)
    for timings, module in zip(best, modules, strict=True):
        timings["blocks per page"] = statistics.mean(
            len(module.snapshot_html(200, url, body, request_url=url).blocks)
            for url, body, _ in corpus
        )
    return best


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--pages", type=int, default=600)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--baseline", help="git revision of the baseline content.py")
    args = parser.parse_args(argv)
    revision = args.baseline or before_last_change(_FILE)
    sites = build_sites("tuning", 6)
    corpus = pages(sites, args.pages)
    with tempfile.TemporaryDirectory() as directory:
        baseline = load_baseline(revision, Path(directory))
        old, new = per_page([baseline, content], corpus, args.repeat)
    print(f"pages={len(corpus)} baseline={revision} (microseconds per page, best of {args.repeat})")
    print("| step | baseline | current | current / baseline |")
    print("|---|---|---|---|")
    for name in old:
        unit = "" if name == "blocks per page" else " µs"
        print(
            f"| {name} | {old[name]:.1f}{unit} | {new[name]:.1f}{unit} "
            f"| {new[name] / old[name]:.2f}× |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
