"""``miqps worker`` and ``miqps maps``: the stream processor's commands."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType

from streams.lifecycle import (
    DEFAULT_STOP_TIMEOUT,
    EXIT_MARGIN,
    StopDeadline,
    is_broker_outage,
    start_again,
    wait_for_broker,
)
from streams.lograte import rate_limit_handlers
from streams.settings import Settings

log = logging.getLogger("streams.cli")

DEFAULT_AGENTS = "canonicalize,probe"
# Each attempt to reach the broker at start-up gives up after this long, so that a stop
# request during the wait is served within it.
CONNECT_ATTEMPT_SECONDS = 5.0
# The stop timeout must leave the front process and the worker their margins.
MIN_STOP_TIMEOUT = 5.0
MAX_STOP_TIMEOUT = 3600.0


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
    parser.add_argument("--stop-timeout", type=_stop_timeout,
                        default=os.environ.get("MIQPS_STOP_TIMEOUT") or DEFAULT_STOP_TIMEOUT,
                        metavar="SECONDS",
                        help="after SIGTERM or SIGINT the worker exits within this many "
                             "seconds, even with the broker gone; inputs whose offsets are "
                             "not committed by then are delivered again "
                             f"(MIQPS_STOP_TIMEOUT, default {DEFAULT_STOP_TIMEOUT:g})")
    parser.add_argument("--loglevel", default="info",
                        choices=["debug", "info", "warning", "error"])
    return parser


def _stop_timeout(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not MIN_STOP_TIMEOUT <= seconds <= MAX_STOP_TIMEOUT:
        raise argparse.ArgumentTypeError(
            f"must be between {MIN_STOP_TIMEOUT:g} and {MAX_STOP_TIMEOUT:g} seconds: {text!r}")
    return seconds


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


@contextlib.contextmanager
def _stop_requests_set(event: threading.Event, deadline: StopDeadline) -> Iterator[None]:
    """While inside, SIGTERM and SIGINT set ``event`` and arm ``deadline`` instead of
    ending the process."""

    def request_stop(signum: int, frame: FrameType | None) -> None:
        log.info("stop requested (signal %d)", signum)
        deadline.arm()
        event.set()

    previous = {signum: signal.signal(signum, request_stop)
                for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _ensure_topics(settings: Settings, stop_timeout: float) -> dict[str, int] | None:
    """The partition count of each topic, once the broker answers (waiting as long as it
    takes); None if a stop was requested first."""
    from streams.kafka import ensure_topics

    stopping = threading.Event()
    deadline = StopDeadline(stop_timeout - EXIT_MARGIN, "worker",
                            lambda: "Nothing was consumed yet.")
    with _stop_requests_set(stopping, deadline):
        partitions = wait_for_broker(
            settings.bootstrap_servers,
            lambda: ensure_topics(settings, CONNECT_ATTEMPT_SECONDS),
            stopping,
        )
    return None if stopping.is_set() else partitions


def run_worker(argv: Sequence[str]) -> int:
    args = worker_parser().parse_args(list(argv))
    roles = frozenset(role.strip() for role in args.agents.split(",") if role.strip())
    logging.basicConfig(level=args.loglevel.upper(),
                        format="[%(asctime)s] [%(process)d] [%(levelname)s] %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    rate_limit_handlers()
    settings = _settings(args)
    from streams.runtime import ROLES

    if not roles or roles - set(ROLES):
        print(f"miqps worker: --agents takes {' and/or '.join(ROLES)}", file=sys.stderr)
        return 2
    try:
        partitions = _ensure_topics(settings, args.stop_timeout)
    except Exception as error:
        print(f"miqps worker: cannot create topics on {settings.bootstrap_servers}: {error}",
              file=sys.stderr)
        return 1
    if partitions is None:
        log.info("stopped while waiting for Kafka, before consuming anything")
        return 0
    if args.create_topics_only:
        for name, count in sorted(partitions.items()):
            print(f"{name}\t{count} partitions")
        return 0
    return _run_faust(settings, roles, partitions, args.loglevel, args.stop_timeout)


def _run_faust(settings: Settings, roles: frozenset[str], partitions: dict[str, int],
               loglevel: str, stop_timeout: float) -> int:
    from streams.app import create_app
    from streams.runtime import Runtime, ThreadsService
    from streams.worker import StreamWorker

    runtime = Runtime(settings, roles, partitions, stop_timeout)
    app = create_app(runtime)
    worker = StreamWorker(app, ThreadsService(runtime), runtime=runtime, loglevel=loglevel)
    runtime.bind(worker.loop, worker.fail)
    log.info("worker %s: agents %s, topics %s, state in %s; stops within %gs", settings.app_id,
             ",".join(sorted(roles)), settings.topics.all(), settings.state_dir, stop_timeout)
    code = 0
    try:
        worker.execute_from_commandline()
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    if worker.crash_reason is not None and not worker.stop_requested and \
            is_broker_outage(worker.crash_reason):
        start_again(worker.crash_reason)
    return code


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

    from streams.clients import read_compacted

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
