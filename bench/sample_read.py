"""What reading a pack of pattern samples costs the pattern-stats agent: the hand-written
:func:`streams.messages.read_observation` against reading each item as its typed record
(:func:`streams.messages.read_sample`) and parsing its URL, and both against one processor
step of a small shape, measured in the same run.

    .venv/bin/python -m bench.sample_read [--packs 10000] [--patterns 4]

It prints microseconds per pack of 3 samples and each reader's share of a step.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from bench.pattern_steps import ALLOWLIST, POLICY, packs, unlearned
from miqps.urls import parse, split_pattern
from streams.agents.pattern_stats_processor import PatternStatsProcessor
from streams.messages import (
    Observation,
    UrlSample,
    read_observation,
    read_sample,
    read_sample_items,
    sample_to_bytes,
)


def as_messages(work: list[list[Observation]]) -> list[bytes]:
    return [
        b"["
        + b",".join(
            sample_to_bytes(
                UrlSample(item.domain, item.pattern, item.url.url, item.count, item.basis)
            )
            for item in observations
            if item.url is not None
        )
        + b"]"
        for observations in work
    ]


def by_hand(value: bytes) -> list[Observation]:
    return [read_observation(item) for item in read_sample_items(value)]


def typed(value: bytes) -> list[Observation]:
    observations = []
    for item in read_sample_items(value):
        sample = read_sample(item)
        assert isinstance(sample, UrlSample)
        observations.append(
            Observation(
                sample.domain,
                split_pattern(sample.pattern)[0],
                sample.pattern,
                parse(sample.url),
                sample.count,
                sample.basis,
            )
        )
    return observations


def micros_per_pack(read: Callable[[bytes], list[Observation]], messages: list[bytes]) -> float:
    started = time.perf_counter()
    for value in messages:
        read(value)
    return (time.perf_counter() - started) / len(messages) * 1e6


def micros_per_step(work: list[list[Observation]]) -> float:
    processor = PatternStatsProcessor(POLICY, ALLOWLIST, unlearned)
    stored: bytes | None = None
    started = time.perf_counter()
    for number, observations in enumerate(work):
        stored = processor.apply(stored, observations, float(number)).record
    return (time.perf_counter() - started) / len(work) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--packs", type=int, default=10_000)
    parser.add_argument("--patterns", type=int, default=4)
    args = parser.parse_args()
    work = packs(args.packs, args.patterns)
    messages = as_messages(work)
    assert by_hand(messages[0]) == typed(messages[0])
    step = micros_per_step(work)
    hand, checked = micros_per_pack(by_hand, messages), micros_per_pack(typed, messages)
    print(f"{args.packs} packs of 3 samples, a shape of {args.patterns} patterns")
    print(f"processor step:                {step:8.1f} µs")
    print(f"read_observation:              {hand:8.1f} µs  ({hand / step:5.1%} of a step)")
    print(f"read_sample + parse:           {checked:8.1f} µs  ({checked / step:5.1%} of a step)")
    print(f"typed read costs the step      {(checked - hand) / step:8.1%} more")


if __name__ == "__main__":
    main()
