"""``miqps worker``, ``miqps maps`` and ``miqps dashboard``: the stream processor's commands."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import Any, Literal, get_args, get_origin

from streams.kafka.lograte import rate_limit_handlers
from streams.settings import Settings, SettingsError, Topics, variable_at, variables
from streams.worker.lifecycle import (
    EXIT_MARGIN,
    StopDeadline,
    wait_for_broker,
)

log = logging.getLogger("streams.cli")

# Each attempt to reach the broker at start-up gives up after this long, so that a stop
# request during the wait is served within it.
CONNECT_ATTEMPT_SECONDS = 5.0


def main(command: str, args: list[str]) -> int:
    if command == "worker":
        return run_worker(args)
    if command == "maps":
        return run_maps(args)
    if command == "dashboard":
        from streams.ops.dashboard import dashboard_parser, run_dashboard

        parser = dashboard_parser()
        _common(parser)
        options = parser.parse_args(args)
        return run_dashboard(
            _settings(options),
            options.host,
            options.port,
            worker_metrics=options.worker_metrics,
        )
    print(f"miqps: unknown stream command {command!r}", file=sys.stderr)
    return 2


def _common(parser: argparse.ArgumentParser) -> None:
    _setting_option(parser, ("bootstrap_servers",), "HOST:PORT[,...]")
    parser.add_argument(
        "--topic-prefix", metavar="PREFIX", help=f"{Topics.PREFIX.help} ({Topics.PREFIX.name})"
    )


# The settings `miqps worker` takes as options too; each option is named after its field.
WORKER_OPTIONS: tuple[tuple[tuple[str, ...], str | None], ...] = (
    (("agents",), "ROLE[,ROLE]"),
    (("app_id",), None),
    (("state_dir",), "DIR"),
    (("fetch", "proxy"), "URL"),
    (("fetch", "allow_private"), None),
    (("partitions",), "N"),
    (("stop_timeout",), "SECONDS"),
    (("on_bug",), None),
)


def _setting_option(
    parser: argparse.ArgumentParser, path: tuple[str, ...], metavar: str | None
) -> None:
    """``--name`` for the setting at ``path``, overriding its environment variable."""
    variable = variable_at(*path)
    option = "--" + path[-1].replace("_", "-")
    default = variable.format(variable.default) if variable.default is not None else "unset"
    help = f"{variable.env.help} ({variable.name}, default {default})"
    if variable.annotation is bool:
        parser.add_argument(
            option, action="store_true", default=None, dest=".".join(path), help=help
        )
        return

    def convert(text: str) -> Any:
        try:
            return variable.convert(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(f"{text!r}: {error}") from None

    choices = get_args(variable.annotation) if get_origin(variable.annotation) is Literal else None
    parser.add_argument(
        option, type=convert, dest=".".join(path), metavar=metavar, choices=choices, help=help
    )


def worker_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="miqps worker",
        description="Run a Faust stream worker. Settings come from the environment "
        "(every variable is listed in docs/STREAMS.md); options override them.",
    )
    _common(parser)
    for path, metavar in WORKER_OPTIONS:
        _setting_option(parser, path, metavar)
    parser.add_argument(
        "--create-topics-only", action="store_true", help="create the missing topics and exit"
    )
    parser.add_argument("--loglevel", default="info", choices=["debug", "info", "warning", "error"])
    return parser


def _settings(args: argparse.Namespace) -> Settings:
    """Settings from the environment with the options given on the command line; a bad
    value in the environment ends the command with a message naming the variable."""
    env = dict(os.environ)
    if args.topic_prefix is not None:
        env[Topics.PREFIX.name] = args.topic_prefix
    try:
        settings = Settings.from_env(env)
    except SettingsError as error:
        print(f"miqps: bad setting: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    paths = {".".join(variable.path): variable.path for variable in variables()}
    return settings.with_values(
        {
            paths[dest]: value
            for dest, value in vars(args).items()
            if value is not None and dest in paths
        }
    )


@contextlib.contextmanager
def _stop_requests_set(event: threading.Event, deadline: StopDeadline) -> Iterator[None]:
    """While inside, SIGTERM and SIGINT set ``event`` and arm ``deadline`` instead of
    ending the process."""

    def request_stop(signum: int, frame: FrameType | None) -> None:
        log.info("stop requested (signal %d)", signum)
        deadline.arm()
        event.set()

    previous = {
        signum: signal.signal(signum, request_stop) for signum in (signal.SIGTERM, signal.SIGINT)
    }
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _ensure_topics(settings: Settings, stop_timeout: float) -> dict[str, int] | None:
    """The partition count of each topic, once the broker answers (waiting as long as it
    takes); None if a stop was requested first."""
    from streams.kafka.admin import ensure_topics

    stopping = threading.Event()
    deadline = StopDeadline(
        stop_timeout - EXIT_MARGIN, "worker", lambda: "Nothing was consumed yet."
    )
    with _stop_requests_set(stopping, deadline):
        partitions = wait_for_broker(
            settings.bootstrap_servers,
            lambda: ensure_topics(settings, CONNECT_ATTEMPT_SECONDS),
            stopping,
        )
    return None if stopping.is_set() else partitions


def run_worker(argv: Sequence[str]) -> int:
    args = worker_parser().parse_args(list(argv))
    logging.basicConfig(
        level=args.loglevel.upper(),
        format="[%(asctime)s] [%(process)d] [%(levelname)s] %(name)s: %(message)s",
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    rate_limit_handlers()
    settings = _settings(args)
    roles = frozenset(settings.agents)
    from streams.worker.runtime import ROLES

    if not roles or roles - set(ROLES):
        print(f"miqps worker: --agents takes {' and/or '.join(ROLES)}", file=sys.stderr)
        return 2
    try:
        partitions = _ensure_topics(settings, settings.stop_timeout)
    except Exception as error:
        print(
            f"miqps worker: cannot create topics on {settings.bootstrap_servers}: {error}",
            file=sys.stderr,
        )
        return 1
    if partitions is None:
        log.info("stopped while waiting for Kafka, before consuming anything")
        return 0
    if args.create_topics_only:
        for name, count in sorted(partitions.items()):
            print(f"{name}\t{count} partitions")
        return 0
    return _run_faust(settings, roles, partitions, args.loglevel, settings.stop_timeout)


def _run_faust(
    settings: Settings,
    roles: frozenset[str],
    partitions: dict[str, int],
    loglevel: str,
    stop_timeout: float,
) -> int:
    from streams.worker.app import create_app
    from streams.worker.process import StreamWorker
    from streams.worker.runtime import Runtime, ThreadsService

    runtime = Runtime(settings, roles, partitions, stop_timeout)
    app = create_app(runtime)
    worker = StreamWorker(app, ThreadsService(runtime), runtime=runtime, loglevel=loglevel)
    runtime.bind(worker.loop, worker.fail)
    log.info(
        "worker %s: agents %s, topics %s, state in %s; stops within %gs",
        settings.app_id,
        ",".join(sorted(roles)),
        settings.topics.all(),
        settings.state_dir,
        stop_timeout,
    )
    return worker.run()


def maps_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="miqps maps",
        description="Print the current MIQPS maps from the compacted maps topic, one JSON "
        "map per line (the format of 'miqps learn').",
        epilog="Operators' commands: 'miqps maps history|rollback|freeze|unfreeze|publish --help'.",
    )
    parser.add_argument("domain", nargs="?", help="only this domain")
    _common(parser)
    parser.add_argument("--topic", help="the maps topic (default: MIQPS_TOPIC_MAPS or miqps.maps)")
    parser.add_argument("--timeout", type=float, default=30.0)
    return parser


def run_maps(argv: Sequence[str]) -> int:
    from streams.maps import admin as mapadmin

    if argv[:1] and argv[0] in mapadmin.COMMANDS:
        return mapadmin.run(argv, _common, _settings)
    args = maps_parser().parse_args(list(argv))
    settings = _settings(args)
    topic = args.topic or settings.topics.maps
    from confluent_kafka import KafkaException

    from streams.kafka.clients import read_compacted

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
        print(
            f"miqps maps: cannot read {topic} on {settings.bootstrap_servers}: {error}",
            file=sys.stderr,
        )
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
