"""Where one canonicalizer worker's time per URL goes, in process (no Kafka).

    .venv/bin/python -m bench.front_profile [--urls 200000] [--domains 5000] [--repeat 3]

The inputs and maps are ``bench.stream_throughput``'s (every pattern learned, tracking
parameters to drop). Each step of the front's per-URL path is timed alone, on inputs the
step before made, best of ``--repeat`` runs; then the front's whole per-batch function
(``CanonicalizerFront._process``) with a producer that drops what it is given, so the
difference from a Kafka run is the clients' own cost (``bench.stream_throughput`` measures
that as the passthrough). ``can_ada.parse`` alone is the floor of any per-URL path here.

With the compiled path, ``_process`` hands the batch to it
(:meth:`~miqps.canonical.Canonicalizer.stream_records`, timed alone too) and only the
messages it leaves go through the Python steps. The first pass of ``_process`` is printed
as well: every plan and audit target is new then, as in a worker's first minutes.
Run with ``MIQPS_NATIVE=0`` for the pure-Python front.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from typing import Any

import can_ada

from miqps.urls import parse
from streams.front.loop import CanonicalizerFront, SamplePacks
from streams.maps.live import LiveMaps
from streams.messages import CanonicalOutput, decode_input
from streams.settings import Settings
from testkit.messages import InputMessage
from testkit.urlgen import learned_maps, synthetic_urls

BATCH = 10_000


class DroppingProducer:
    def produce(self, *args: Any, **kwargs: Any) -> None:
        pass


def best_seconds(run: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--urls", type=int, default=200_000)
    parser.add_argument("--domains", type=int, default=5_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)

    settings = Settings.from_env({})
    urls = list(synthetic_urls(args.urls, args.domains))
    values = [url.encode() for url in urls]
    live = LiveMaps(settings.policy.reverify_after)
    for domain_map in learned_maps(urls):
        live.apply(domain_map, domain_map.dumps().encode())
    front = CanonicalizerFront(settings, live, feed=None)  # type: ignore[arg-type]
    front._packs = SamplePacks(settings.partitions)
    max_bytes = settings.max_message_bytes
    raws = [decode_input(value, max_bytes) for value in values]
    decide = live.decide
    decisions = [decide(raw.url, raw.text) for raw in raws]
    encode = CanonicalOutput.encode
    messages = [InputMessage(value, offset) for offset, value in enumerate(values)]
    batches = [messages[start : start + BATCH] for start in range(0, len(messages), BATCH)]
    producer = DroppingProducer()
    now = time.time()

    def floor() -> None:
        for url in urls:
            can_ada.parse(url).href  # noqa: B018

    def parse_only() -> None:
        for url in urls:
            parse(url)

    def decode_step() -> None:
        for value in values:
            decode_input(value, max_bytes)

    def decide_step() -> None:
        for raw in raws:
            decide(raw.url, raw.text)

    def encode_step() -> None:
        for raw, d in zip(raws, decisions, strict=True):
            encode(
                raw.text,
                d.canonical_url,
                raw.url.host,
                d.pattern,
                d.kept,
                d.dropped,
                d.status,
                d.map_version,
                raw.meta,
            )

    def due_step() -> None:
        for d in decisions:
            live.due_for_reverification(d, now)

    def whole() -> None:
        for batch in batches:
            front._process(batch, producer)  # type: ignore[arg-type]

    canonicalizer = live.canonicalizer
    audit_below = front.auditing.rule.chosen_below if settings.audit_share > 0 else 0
    value_batches = [values[start : start + BATCH] for start in range(0, len(values), BATCH)]

    def compiled_step() -> None:
        for batch in value_batches:
            canonicalizer.stream_records(
                batch,  # type: ignore[arg-type]
                max_bytes,
                now - live.reverify_after,
                audit_below,
                front.auditing.rule.seed,
            )

    started = time.perf_counter()
    whole()  # fills the samplers, plans and audit targets as a running worker has them
    cold = (time.perf_counter() - started) / len(urls) * 1e6
    steps = [
        ("can_ada.parse (floor)", floor),
        ("miqps.urls.parse", parse_only),
        ("decode_input (parse included)", decode_step),
        ("decide", decide_step),
        ("encode the output", encode_step),
        ("due for re-verification", due_step),
        *(
            [("the compiled batch step (Canonicalizer.stream_records)", compiled_step)]
            if canonicalizer.native
            else []
        ),
        ("_process, whole batch path", whole),
    ]
    count = len(urls)
    timed = [(name, best_seconds(run, args.repeat) / count * 1e6) for name, run in steps]
    total = timed[-1][1]
    path = "compiled path" if canonicalizer.native else "pure Python (MIQPS_NATIVE=0)"
    print(f"{count} URLs over {args.domains} learned domains, {path}, best of {args.repeat}")
    print(f"_process on its first pass (every plan and audit target new): {cold:.2f} µs per URL")
    print("\n| step | µs per URL | share of _process |")
    print("|---|---:|---:|")
    for name, micros in timed:
        print(f"| {name} | {micros:.2f} | {micros / total:.0%} |")
    if not canonicalizer.native:
        named = sum(micros for name, micros in timed[2:-1])
        print(
            f"\nsteps above, summed (decode to due): {named:.2f} µs; the rest of _process: "
            f"{total - named:.2f} µs (offers to the samplers, counters, the loop)"
        )
    else:
        print(
            "\n_process runs the compiled batch step, then produces each record; the steps "
            "from decode_input to the re-verification check are the path of the messages "
            "it leaves to Python"
        )
    print(f"_process / can_ada.parse: {total / timed[0][1]:.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
