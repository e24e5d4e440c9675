"""The whole pipeline in one command, against the simulated web.

``python -m testkit.demo`` expects a Kafka broker (``scripts/kafka-local start``); with
``--local-broker`` it starts that one itself when it is not running, and stops it at the
end (one that was running stays running; the demo says which). It starts the simulated web
in-process, creates topics of its own (a fresh prefix), starts one
``miqps worker`` process with both agents, streams a realistic URL corpus into
``urls.raw`` in several passes (the same URL population keeps coming, as in a crawl),
prints progress while it runs, and ends with a summary: URLs in and out, learned vs
provisional, how far canonical URLs collapse the raw ones (and whether any two different
pages were merged, using the simulated web's ground truth), maps learned, fetches spent.
While it runs, ``miqps dashboard`` serves the run live (the URL is printed at the start).
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from simweb.corpus import CorpusURL, generate_corpus
from simweb.server import SimWeb
from simweb.sites import FAMILIES, build_sites
from streams.kafka.admin import ensure_topics
from streams.messages import NO_SAMPLES, ONE_PAGE, UNREACHABLE
from streams.settings import LearningPolicy, Settings
from testkit.tools import (
    TopicReader,
    WorkerProcess,
    delete_topics,
    isolated_settings,
    produce,
    worker_command,
    worker_env,
)

DASHBOARD_PORT = 8050
KAFKA_LOCAL = Path(__file__).resolve().parents[1] / "scripts" / "kafka-local"
BAD_INPUTS: tuple[bytes, ...] = (
    b"\xff\xfe not UTF-8",
    b"this is not a URL",
    b"ftp://files.example/pub?x=1",
    b'{"link": "http://t01-shop.sim/?a=1"}',
    b"http://" + b"a" * (3 * 1024 * 1024),
)


@dataclass
class Progress:
    produced: int = 0
    produced_valid: int = 0
    passes_done: int = 0
    producing: bool = True
    pass_started: list[float] = field(default_factory=list)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m testkit.demo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--family", choices=FAMILIES, default="tuning")
    parser.add_argument("--sites", type=int, default=6)
    parser.add_argument("--urls-per-site", type=int, default=1000)
    parser.add_argument(
        "--passes", type=int, default=5, help="how many times the URL population is streamed"
    )
    parser.add_argument("--rate", type=float, default=250.0, help="URLs per second produced")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--rare-after",
        type=float,
        default=20.0,
        help="seconds before a rare pattern is probed with what it has",
    )
    parser.add_argument("--state-dir", type=Path, help="worker state (default: a temp dir)")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument(
        "--keep-topics",
        action="store_true",
        help="leave the demo's topics on the broker for inspection",
    )
    parser.add_argument(
        "--local-broker",
        action="store_true",
        help="use the broker of scripts/kafka-local, starting it if it is not running; "
        "one started here is stopped at the end",
    )
    parser.add_argument(
        "--keep-broker",
        action="store_true",
        help="with --local-broker, leave a broker started here running (--keep-topics does too)",
    )
    parser.add_argument(
        "--dashboard-port",
        type=int,
        default=DASHBOARD_PORT,
        help="serve 'miqps dashboard' of the run on this port (0: any free port, -1: no dashboard)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not args.local_broker:
        return _demo(args, Settings.from_env())
    try:
        with local_broker(keep=args.keep_broker or args.keep_topics) as bootstrap:
            return _demo(args, Settings.from_env().with_overrides(bootstrap_servers=bootstrap))
    except BrokerError as error:
        print(f"demo: {error}", file=sys.stderr)
        return 1


class BrokerError(RuntimeError):
    """``scripts/kafka-local`` could not start the local broker."""


@contextlib.contextmanager
def local_broker(keep: bool = False, env: Mapping[str, str] | None = None) -> Iterator[str]:
    """The bootstrap address of the local broker of ``scripts/kafka-local`` (``env``: its
    ``KAFKA_LOCAL_*`` variables, by default this process's). A broker that was running is
    used and left running; one started here is stopped at the end, unless ``keep``. Either
    way the demo says what it did, and how to stop a broker it leaves running."""

    def kafka_local(command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(KAFKA_LOCAL), command], env=env, capture_output=True, text=True, check=False
        )

    was_running = kafka_local("status").returncode == 0
    started = kafka_local("start")
    if started.returncode != 0:
        raise BrokerError(f"scripts/kafka-local start failed: {started.stderr.strip()[-2000:]}")
    bootstrap = started.stdout.strip().splitlines()[-1]
    if was_running:
        print(f"demo: using the Kafka broker already running at {bootstrap}", flush=True)
    else:
        print(f"demo: started the local Kafka broker at {bootstrap}", flush=True)
    try:
        yield bootstrap
    finally:
        if was_running:
            print(
                f"demo: the Kafka broker at {bootstrap} was running before the demo and is "
                "left running (scripts/kafka-local stop stops it)",
                flush=True,
            )
        elif keep:
            print(
                f"demo: the Kafka broker at {bootstrap} is left running; stop it with "
                "scripts/kafka-local stop",
                flush=True,
            )
        else:
            stopped = kafka_local("stop")
            if stopped.returncode == 0:
                print(f"demo: stopped the Kafka broker it started at {bootstrap}", flush=True)
            else:
                print(
                    f"demo: could not stop the Kafka broker at {bootstrap} "
                    f"({stopped.stderr.strip()[-500:]}); stop it with scripts/kafka-local stop",
                    file=sys.stderr,
                )


def _demo(args: argparse.Namespace, base: Settings) -> int:
    try:
        from confluent_kafka.admin import AdminClient

        AdminClient({"bootstrap.servers": base.bootstrap_servers}).list_topics(timeout=10)
    except Exception as error:
        print(
            f"demo: no Kafka broker at {base.bootstrap_servers} ({error}); "
            "start one with scripts/kafka-local start, or pass --local-broker",
            file=sys.stderr,
        )
        return 1
    sites = build_sites(args.family, args.sites, args.seed)
    corpus = generate_corpus(sites, args.urls_per_site, args.seed)
    state_root = args.state_dir or Path(tempfile.mkdtemp(prefix="miqps-demo-"))
    with SimWeb(sites, seed=args.seed, rate_limit_per_second=50.0) as web:
        settings = isolated_settings(
            base,
            "demo",
            state_root / "worker",
            proxy=web.proxy_url,
            probe_rate_per_host=40.0,  # the loopback web, as scripts/demo's learn --rate 40
            partitions=args.partitions,
            policy=LearningPolicy(rare_after=args.rare_after),
        )
        ensure_topics(settings)
        print(
            f"demo: {len(sites)} simulated sites on {web.proxy_url}, "
            f"{len(corpus)} URLs x {args.passes} passes at {args.rate:g}/s; "
            f"topics {settings.topics.raw} ...; worker log {state_root / 'worker.log'}",
            flush=True,
        )
        worker = WorkerProcess(settings, "canonicalize,probe", state_root / "worker.log")
        worker.start()
        dashboard = (
            _start_dashboard(settings, args.dashboard_port, state_root)
            if args.dashboard_port >= 0
            else None
        )
        try:
            return _run(args, settings, corpus, web, worker)
        finally:
            if dashboard is not None:
                dashboard.send_signal(signal.SIGINT)
                dashboard.wait(15)
            worker.stop()
            if args.keep_topics:
                print(f"demo: topics kept: {settings.app_id}.*")
            else:
                delete_topics(settings)


def _start_dashboard(
    settings: Settings,
    port: int,
    state_root: Path,
) -> subprocess.Popen[str] | None:
    """``miqps dashboard`` on the demo's topics, its URL printed; None if it cannot start."""
    with (state_root / "dashboard.log").open("w") as errors:
        process = subprocess.Popen(
            [*worker_command()[:-1], "dashboard", "--port", str(port)],
            env=worker_env(settings),
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )
    line = process.stdout.readline().strip() if process.stdout is not None else ""
    if not line.startswith("miqps dashboard: "):
        process.wait(15)
        print(f"demo: no dashboard (see {state_root / 'dashboard.log'})", file=sys.stderr)
        return None
    print(f"demo: open the live dashboard at {line.split(': ', 1)[1]}", flush=True)
    return process


def _run(
    args: argparse.Namespace,
    settings: Settings,
    corpus: list[CorpusURL],
    web: SimWeb,
    worker: WorkerProcess,
) -> int:
    progress = Progress()
    producer = threading.Thread(
        target=_produce_passes,
        args=(settings, corpus, args.passes, args.rate, progress),
        daemon=True,
    )
    started = time.monotonic()
    outputs = TopicReader(settings, settings.topics.canonical)
    updates = TopicReader(settings, settings.topics.map_updates)
    dead = TopicReader(settings, settings.topics.dlq)
    producer.start()
    last_line = 0.0
    try:
        while True:
            outputs.poll(0.3)
            updates.poll(0.05)
            dead.poll(0.05)
            done = (
                not progress.producing
                and len(outputs.records) + len(dead.records) >= progress.produced
            )
            now = time.monotonic()
            if now - last_line >= 2.0 or done:
                _progress_line(now - started, progress, outputs, updates, dead, web)
                last_line = now
            if done:
                break
            if not worker.alive():
                print("demo: the worker exited; see its log", file=sys.stderr)
                return 1
            if now - started > args.timeout:
                print("demo: timed out", file=sys.stderr)
                return 1
        _summary(
            time.monotonic() - started, corpus, args.passes, progress, outputs, updates, dead, web
        )
        return 0
    finally:
        outputs.close()
        updates.close()
        dead.close()


def _produce_passes(
    settings: Settings, corpus: list[CorpusURL], passes: int, rate: float, progress: Progress
) -> None:
    chunk = max(1, int(rate / 10))
    try:
        for number in range(passes):
            progress.pass_started.append(time.monotonic())
            if number == 0:
                progress.produced += produce(settings, settings.topics.raw, BAD_INPUTS)
            values = [orjson.dumps({"url": item.url, "pass": number + 1}) for item in corpus]
            begin = time.monotonic()
            for start in range(0, len(values), chunk):
                batch = values[start : start + chunk]
                produce(settings, settings.topics.raw, batch)
                progress.produced += len(batch)
                progress.produced_valid += len(batch)
                ahead = begin + (start + len(batch)) / rate - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
            progress.passes_done += 1
    finally:
        progress.producing = False


def _statuses(records: list[tuple[bytes | None, bytes | None, int]]) -> Counter[str]:
    return Counter(orjson.loads(value)["status"] for _, value, _ in records if value)


def _progress_line(
    elapsed: float,
    progress: Progress,
    outputs: TopicReader,
    updates: TopicReader,
    dead: TopicReader,
    web: SimWeb,
) -> None:
    statuses = _statuses(outputs.records[-5000:])
    recent = sum(statuses.values()) or 1
    accepted = [orjson.loads(v) for _, v, _ in updates.records if v]
    domains = {a["domain"] for a in accepted if a["accepted"]}
    patterns = {(a["domain"], a["pattern"]) for a in accepted if a["accepted"]}
    print(
        f"[{elapsed:6.1f}s] pass {min(progress.passes_done + 1, len(progress.pass_started))}"
        f" | in {progress.produced:>7} | out {len(outputs.records):>7}"
        f" | dlq {len(dead.records):>2} | learned {statuses['learned'] / recent:6.1%}"
        f" of the last {recent} | maps {len(domains)} domains, {len(patterns)} patterns"
        f" | fetches {web.requests_total()}",
        flush=True,
    )


def _pass_row(number: int, docs: list[dict[str, Any]], truth: dict[str, str]) -> list[str]:
    with_query = [doc for doc in docs if doc["kept"] or doc["dropped"]]
    learned = sum(1 for doc in with_query if doc["status"] == "learned")
    raw = len({doc["url"] for doc in docs})
    canonical = len({doc["canonical_url"] for doc in docs})
    pages_of: defaultdict[str, set[str]] = defaultdict(set)
    for doc in docs:
        if doc["url"] in truth:
            pages_of[doc["canonical_url"]].add(truth[doc["url"]])
    pages = len({truth[doc["url"]] for doc in docs if doc["url"] in truth})
    merges = sum(1 for keys in pages_of.values() if len(keys) > 1)
    return [
        str(number),
        str(len(docs)),
        f"{learned / max(len(with_query), 1):.1%}",
        f"{raw} -> {canonical}",
        f"{1 - canonical / max(raw, 1):.1%}",
        f"{1 - pages / max(raw, 1):.1%}",
        str(merges),
    ]


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return "\n".join(
        "  " + "  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True))
        for row in rows
    )


def _print_merges(docs: list[dict[str, Any]], truth: dict[str, str], most: int = 5) -> None:
    """Name the outputs of the first canonical URLs that stand for more than one page."""
    by_canonical: defaultdict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for doc in docs:
        if doc["url"] in truth:
            by_canonical[doc["canonical_url"]].setdefault(truth[doc["url"]], doc)
    merged = [(url, pages) for url, pages in by_canonical.items() if len(pages) > 1]
    for canonical, pages in merged[:most]:
        print(f"  merged into {canonical}:")
        for page, doc in pages.items():
            print(
                f"    {doc['url']} (page {page}; {doc['status']}, map v{doc['map_version']},"
                f" kept {doc['kept']}, dropped {doc['dropped']})"
            )


def _summary(
    elapsed: float,
    corpus: list[CorpusURL],
    passes: int,
    progress: Progress,
    outputs: TopicReader,
    updates: TopicReader,
    dead: TopicReader,
    web: SimWeb,
) -> None:
    truth = {item.url: item.content_key for item in corpus}
    docs = [orjson.loads(v) for _, v, _ in outputs.records if v]
    by_pass: defaultdict[int, list[dict[str, Any]]] = defaultdict(list)
    for doc in docs:
        by_pass[(doc["meta"] or {}).get("pass", 0)].append(doc)
    statuses = Counter(doc["status"] for doc in docs)
    audits = [orjson.loads(v) for _, v, _ in updates.records if v]
    domains = {a["domain"] for a in audits if a["accepted"]}
    patterns = {(a["domain"], a["pattern"]) for a in audits if a["accepted"]}
    undecided = {NO_SAMPLES, UNREACHABLE, ONE_PAGE}
    rejected = sum(1 for a in audits if not a["accepted"] and a["reason"] not in undecided)
    left = Counter(a["reason"] for a in audits if not a["accepted"] and a["reason"] in undecided)
    fetches = web.requests_total()
    print("\nper pass (each pass streams the same URL population)")
    header = [
        "pass",
        "URLs",
        "learned*",
        "distinct raw -> canonical",
        "collapsed",
        "ideal",
        "false merges",
    ]
    print(
        _table(
            [header]
            + [_pass_row(number, by_pass[number], truth) for number in range(1, passes + 1)]
        )
    )
    print("  * share of the URLs with a query whose pattern was learned when they passed")
    _print_merges(docs, truth)
    rows = [
        (
            "URLs in",
            f"{progress.produced} ({progress.produced_valid} valid, "
            f"{progress.produced - progress.produced_valid} bad)",
        ),
        ("canonical URLs out", f"{len(docs)}"),
        ("dead-lettered", f"{len(dead.records)}"),
        ("learned / provisional", f"{statuses['learned']} / {statuses['provisional']}"),
        (
            "maps learned",
            f"{len(domains)} domains, {len(patterns)} patterns "
            f"({rejected} updates rejected by the anomaly gate)",
        ),
        (
            "requests left undecided",
            ", ".join(f"{n} ({reason})" for reason, n in left.most_common()) or "0",
        ),
        ("fetches spent", f"{fetches} ({fetches / max(len(truth), 1):.3f} per distinct URL)"),
        ("wall time", f"{elapsed:.1f}s"),
    ]
    width = max(len(label) for label, _ in rows)
    print("\nsummary")
    for label, value in rows:
        print(f"  {label.ljust(width)}  {value}")


if __name__ == "__main__":
    sys.exit(main())
