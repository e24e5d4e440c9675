"""``miqps worker`` and ``miqps maps``: the stream processor's commands."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from streams.settings import Settings

log = logging.getLogger("streams.cli")

DEFAULT_AGENTS = "canonicalize,probe"
TOPIC_WAIT_SECONDS = 120.0


def main(command: str, args: list[str]) -> int:
    if command == "worker":
        return run_worker(args)
    if command == "maps":
        return run_maps(args)
    print(f"miqps: unknown stream command {command!r}", file=sys.stderr)
    return 2


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-servers", metavar="HOST:PORT[,...]",
                        help="Kafka brokers (default: KAFKA_BOOTSTRAP_SERVERS or 127.0.0.1:9092)")
    parser.add_argument("--topic-prefix", metavar="PREFIX",
                        help="prefix of every default topic name (MIQPS_TOPIC_PREFIX)")


def worker_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="miqps worker",
        description="Run a Faust stream worker. Settings come from the environment "
                    "(KAFKA_BOOTSTRAP_SERVERS, MIQPS_PROXY, MIQPS_ALLOW_PRIVATE, "
                    "MIQPS_STATE_DIR, MIQPS_TOPIC_*); options override them.",
    )
    parser.add_argument("--agents", default=os.environ.get("MIQPS_AGENTS") or DEFAULT_AGENTS,
                        metavar="ROLE[,ROLE]",
                        help="which agents run here: canonicalize, probe or both "
                             f"(MIQPS_AGENTS, default {DEFAULT_AGENTS})")
    _common(parser)
    parser.add_argument("--app-id", help="Faust app id and consumer group prefix (MIQPS_APP_ID)")
    parser.add_argument("--state-dir", type=Path, help="RocksDB state (MIQPS_STATE_DIR)")
    parser.add_argument("--proxy", help="HTTP proxy for every probe fetch (MIQPS_PROXY)")
    parser.add_argument("--allow-private", action="store_true", default=None,
                        help="allow loopback and private targets (MIQPS_ALLOW_PRIVATE)")
    parser.add_argument("--partitions", type=int,
                        help="partitions of the topics this worker creates (MIQPS_PARTITIONS)")
    parser.add_argument("--create-topics-only", action="store_true",
                        help="create the missing topics and exit")
    parser.add_argument("--loglevel", default="info",
                        choices=["debug", "info", "warning", "error"])
    return parser


def _settings(args: argparse.Namespace) -> Settings:
    env = dict(os.environ)
    if args.topic_prefix is not None:
        env["MIQPS_TOPIC_PREFIX"] = args.topic_prefix
    settings = Settings.from_env(env)
    return settings.with_overrides(
        bootstrap_servers=args.bootstrap_servers,
        app_id=getattr(args, "app_id", None),
        state_dir=getattr(args, "state_dir", None),
        proxy=getattr(args, "proxy", None),
        allow_private=getattr(args, "allow_private", None),
        partitions=getattr(args, "partitions", None),
    )


def _ensure_topics(settings: Settings) -> dict[str, int]:
    from confluent_kafka import KafkaException

    from streams.kafka import ensure_topics

    deadline = time.monotonic() + TOPIC_WAIT_SECONDS
    while True:
        try:
            return ensure_topics(settings)
        except (KafkaException, RuntimeError) as error:
            if time.monotonic() > deadline:
                raise
            log.warning("waiting for Kafka at %s: %s", settings.bootstrap_servers, error)
            time.sleep(2.0)


def run_worker(argv: Sequence[str]) -> int:
    args = worker_parser().parse_args(list(argv))
    roles = frozenset(role.strip() for role in args.agents.split(",") if role.strip())
    logging.basicConfig(level=args.loglevel.upper(),
                        format="[%(asctime)s] [%(process)d] [%(levelname)s] %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    settings = _settings(args)
    from streams.runtime import ROLES

    if not roles or roles - set(ROLES):
        print(f"miqps worker: --agents takes {' and/or '.join(ROLES)}", file=sys.stderr)
        return 2
    try:
        partitions = _ensure_topics(settings)
    except Exception as error:
        print(f"miqps worker: cannot create topics on {settings.bootstrap_servers}: {error}",
              file=sys.stderr)
        return 1
    if args.create_topics_only:
        for name, count in sorted(partitions.items()):
            print(f"{name}\t{count} partitions")
        return 0
    return _run_faust(settings, roles, partitions, args.loglevel)


def _run_faust(settings: Settings, roles: frozenset[str], partitions: dict[str, int],
               loglevel: str) -> int:
    import faust

    from streams.app import create_app
    from streams.runtime import Runtime, ThreadsService

    runtime = Runtime(settings, roles, partitions)
    app = create_app(runtime)
    worker = faust.Worker(app, ThreadsService(runtime), loglevel=loglevel)

    stopping: list[asyncio.Future[None]] = []

    def crash(error: BaseException) -> None:
        if worker.crash_reason is None:
            worker.crash_reason = error
            stopping.append(asyncio.ensure_future(worker._stop_on_signal(signal.SIGTERM)))

    runtime.bind(worker.loop, crash)
    log.info("worker %s: agents %s, topics %s, state in %s", settings.app_id,
             ",".join(sorted(roles)), settings.topics.all(), settings.state_dir)
    try:
        worker.execute_from_commandline()
    except SystemExit as exit_:
        return int(exit_.code or 0)
    return 0


def maps_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="miqps maps",
        description="Print the current MIQPS maps from the compacted maps topic, one JSON "
                    "map per line (the format of 'miqps learn').",
    )
    parser.add_argument("domain", nargs="?", help="only this domain")
    _common(parser)
    parser.add_argument("--topic", help="the maps topic (default: MIQPS_TOPIC_MAPS or miqps.maps)")
    parser.add_argument("--timeout", type=float, default=30.0)
    return parser


def run_maps(argv: Sequence[str]) -> int:
    args = maps_parser().parse_args(list(argv))
    settings = _settings(args)
    topic = args.topic or settings.topics.maps
    from confluent_kafka import KafkaException

    from streams.kafka import read_compacted

    latest: dict[str, bytes] = {}
    try:
        for key, value in read_compacted(settings, topic, args.timeout):
            if key is None:
                continue
            domain = key.decode("utf-8", "replace")
            if value is None:
                latest.pop(domain, None)
            else:
                latest[domain] = value
    except (KafkaException, RuntimeError, TimeoutError) as error:
        print(f"miqps maps: cannot read {topic} on {settings.bootstrap_servers}: {error}",
              file=sys.stderr)
        return 1
    if args.domain is not None:
        wanted = args.domain.strip().lower().rstrip(".")
        if wanted not in latest:
            print(f"miqps maps: no map for {wanted}", file=sys.stderr)
            return 1
        latest = {wanted: latest[wanted]}
    out = sys.stdout
    for domain in sorted(latest):
        out.write(latest[domain].decode("utf-8", "replace") + "\n")
    out.flush()
    return 0
