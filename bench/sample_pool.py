"""What collecting probe samples costs: this sample pool and front sampler against an earlier
version, in the same run.

    .venv/bin/python -m bench.sample_pool [--steps 3000] [--urls 60000] [--repeat 3]
                                          [--baseline REV]

Times, per step, what the pattern-stats agent does around the pool (read the record, observe
a pack of sightings of a busy shape, look for due patterns, write the record, as
``bench.pattern_steps`` drives it), and, per URL, what the front's ``LocalSampler`` spends
deciding whether to forward a URL of a shop's product pattern. The baseline is
``miqps/sampling.py``, ``streams/agents/shape_stats.py`` and ``streams/front/sampler.py`` as they
were at git revision ``REV`` (by default the version before the last change to
``miqps/sampling.py``), loaded from git beside the current ones (at the path each had
then). Prints microseconds, the ratio current / baseline (lower is cheaper), the record's
size and how many URLs the front forwards.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from types import ModuleType

import streams.agents.shape_stats
import streams.front.sampler
from bench.pattern_steps import ALLOWLIST, POLICY, packs
from bench.revisions import before_last_change
from miqps.urls import NormalizedURL, parse
from streams.messages import Observation

_POOL_FILE = "miqps/sampling.py"


# Where a module was before streams/ was grouped by role.
_EARLIER_PATHS = {
    "streams/agents/shape_stats.py": "streams/stats.py",
    "streams/front/sampler.py": "streams/sampler.py",
}


def load(revision: str, path: str, name: str, renames: dict[str, str]) -> ModuleType:
    shown = subprocess.run(["git", "show", f"{revision}:{path}"], capture_output=True, text=True)
    if shown.returncode and path in _EARLIER_PATHS:
        path = _EARLIER_PATHS[path]
        shown = subprocess.run(
            ["git", "show", f"{revision}:{path}"], capture_output=True, text=True
        )
    shown.check_returncode()
    source = shown.stdout
    for old, new in renames.items():
        source = source.replace(f"from {old} import", f"from {new} import")
    module = ModuleType(name)
    module.__file__ = path
    sys.modules[name] = module
    exec(compile(source, path, "exec"), module.__dict__)
    return module


def agent_steps(stats_module: ModuleType, work: list[list[Observation]]) -> tuple[float, int]:
    """Microseconds per step, and the size of the last record."""
    stored: bytes | None = None
    started = time.perf_counter()
    for number, observations in enumerate(work):
        now = float(number)
        stats = (
            stats_module.ShapeStats.loads(stored)
            if stored
            else stats_module.ShapeStats("busy.example", "/p")
        )
        for item in observations:
            stats.observe(item.pattern, item.url, item.count, item.basis, now, POLICY, ALLOWLIST)
        for trigger in dict.fromkeys(item.pattern for item in observations):
            due = stats.due(now, POLICY, ALLOWLIST, lambda pattern, basis: True, trigger)
            if due:
                stats.request(due, now)
                break
        stored = stats.dumps()
    assert stored is not None
    return (time.perf_counter() - started) / len(work) * 1e6, len(stored)


def front_offers(sampler_module: ModuleType, urls: list[NormalizedURL]) -> tuple[float, int]:
    """Microseconds per URL, and how many were forwarded."""
    sampler = sampler_module.LocalSampler(100_000, POLICY.min_distinct_values)
    started = time.perf_counter()
    forwarded = sum(1 for url in urls if sampler.offer(url.host, url.pattern, url, ""))
    return (time.perf_counter() - started) / len(urls) * 1e6, forwarded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--urls", type=int, default=60_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--baseline", help="git revision of the baseline modules")
    args = parser.parse_args()
    revision = args.baseline or before_last_change(_POOL_FILE)
    pool = load(revision, _POOL_FILE, "sampling_baseline", {})
    stats = load(
        revision,
        "streams/agents/shape_stats.py",
        "stats_baseline",
        {"miqps.sampling": pool.__name__},
    )
    sampler = load(revision, "streams/front/sampler.py", "sampler_baseline", {})
    work = packs(args.steps, 64)
    urls = [
        parse(
            f"http://shop.example/p/{n % 2000}?id={n % 500}&size={'sml'[n % 3]}&utm_source=s{n % 7}"
        )
        for n in range(args.urls)
    ]
    print(f"baseline {revision}; {args.steps} agent steps, {args.urls} front URLs")
    for run in range(args.repeat):
        before, before_size = agent_steps(stats, work)
        after, after_size = agent_steps(streams.agents.shape_stats, work)
        front_before, forwarded_before = front_offers(sampler, urls)
        front_after, forwarded_after = front_offers(streams.front.sampler, urls)
        print(
            f"run {run + 1}: agent step {before:6.1f} -> {after:6.1f} µs ({after / before:.2f}×),"
            f" record {before_size} -> {after_size} B;"
            f" front {front_before:5.2f} -> {front_after:5.2f} µs/URL"
            f" ({front_after / front_before:.2f}×),"
            f" forwarded {forwarded_before} -> {forwarded_after}"
        )


if __name__ == "__main__":
    main()
