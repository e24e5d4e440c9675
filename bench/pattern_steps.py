"""What the pattern-stats processor costs per (domain, shape) step, against the steps it
took before it also computed the shape's next timer deadline (observe, decide, request,
serialize: the same work without ``next_deadline``), measured in the same run.

Each step reads a stored record, applies a pack of sightings of one shape (a busy shape
with many tracking-parameter patterns, the worst case for the deadline scan) and writes it.

    .venv/bin/python -m bench.pattern_steps [--steps 20000] [--patterns 64]

It prints steps per second of both and their ratio.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from miqps.urls import parse
from streams.agents.pattern_stats_processor import PatternStatsProcessor
from streams.agents.shape_stats import ShapeStats
from streams.messages import Observation
from streams.settings import LearningPolicy

POLICY = LearningPolicy()
ALLOWLIST: frozenset[str] = frozenset()
DOMAIN = "busy.example"


def unlearned(domain: str, pattern: str, basis: str) -> bool:
    return True


def packs(steps: int, patterns: int) -> list[list[Observation]]:
    made = []
    for step in range(steps):
        observations = []
        for offset in range(3):
            number = step * 3 + offset
            extra = f"&t{number % patterns}=v{number}"
            url = parse(f"http://{DOMAIN}/p?id={number % 500}{extra}")
            observations.append(Observation(DOMAIN, "/p", url.pattern, url, 1, ""))
        made.append(observations)
    return made


def before(stored: bytes | None, observations: list[Observation], now: float) -> bytes:
    """The steps as the agent took them before the processor existed."""
    stats = ShapeStats.loads(stored) if stored else ShapeStats(DOMAIN, "/p")
    for observation in observations:
        stats.observe(
            observation.pattern,
            observation.url,
            observation.count,
            observation.basis,
            now,
            POLICY,
            ALLOWLIST,
        )
    for trigger in dict.fromkeys(observation.pattern for observation in observations):
        due = stats.due(now, POLICY, ALLOWLIST, lambda p, b: True, trigger)
        if due:
            stats.request(due, now)
            break
    return stats.dumps()


def after(
    processor: PatternStatsProcessor,
) -> Callable[[bytes | None, list[Observation], float], bytes]:
    def step(stored: bytes | None, observations: list[Observation], now: float) -> bytes:
        record = processor.apply(stored, observations, now).record
        assert record is not None
        return record

    return step


def rate(
    step: Callable[[bytes | None, list[Observation], float], bytes], work: list[list[Observation]]
) -> float:
    stored: bytes | None = None
    started = time.perf_counter()
    for number, observations in enumerate(work):
        stored = step(stored, observations, float(number))
    return len(work) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--patterns", type=int, default=64)
    args = parser.parse_args()
    work = packs(args.steps, args.patterns)
    processor = PatternStatsProcessor(POLICY, ALLOWLIST, unlearned)
    baseline, current = rate(before, work), rate(after(processor), work)
    print(f"{args.steps} steps of 3 sightings on a shape of {args.patterns} patterns")
    print(f"before (no deadline):  {baseline:10,.0f} steps/s")
    print(f"processor.apply:       {current:10,.0f} steps/s")
    print(f"ratio:                 {current / baseline:10.2f}")


if __name__ == "__main__":
    main()
