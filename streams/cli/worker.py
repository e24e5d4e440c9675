"""``miqps worker``: run a Faust stream worker: create the missing topics, waiting for the
broker as long as it takes, check that the domain-keyed topics agree on their partition
count (:mod:`streams.kafka.copartition`; exit 2 if not), then run the agents of the roles
asked for until stopped.

Importing it needs no Kafka package: :func:`run` imports them."""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import logging
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import TYPE_CHECKING

from miqps.native import canonicalizer_path
from streams.cli.common import add_common_options, add_setting_option, extra_missing, settings_from
from streams.kafka.lograte import rate_limit_handlers
from streams.settings import Settings

if TYPE_CHECKING:
    from streams.worker.lifecycle import StopDeadline

NAME = "worker"
HELP = "run the Faust stream worker (streams extra)"
OWN_PARSER = True

log = logging.getLogger("streams.cli")

# Each attempt to reach the broker at start-up gives up after this long, so that a stop
# request during the wait is served within it.
CONNECT_ATTEMPT_SECONDS = 5.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("args", nargs=argparse.REMAINDER)


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


def worker_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="miqps worker",
        description="Run a Faust stream worker. Settings come from the environment "
        "(every variable is listed in docs/STREAMS.md); options override them.",
    )
    add_common_options(parser)
    for path, metavar in WORKER_OPTIONS:
        add_setting_option(parser, path, metavar)
    parser.add_argument(
        "--create-topics-only", action="store_true", help="create the missing topics and exit"
    )
    parser.add_argument(
        "--loglevel",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="the least severe log lines written (default info)",
    )
    return parser


def run(args: argparse.Namespace) -> int:
    if extra_missing(NAME, "confluent_kafka", "faust", "rocksdict", "prometheus_client"):
        return 2
    options = worker_parser().parse_args(args.args)
    logging.basicConfig(
        level=options.loglevel.upper(),
        format="[%(asctime)s] [%(process)d] [%(levelname)s] %(name)s: %(message)s",
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    rate_limit_handlers()
    log.info("canonicalizer path: %s", canonicalizer_path())
    settings = settings_from(options)
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
    from streams.kafka.copartition import mismatch

    disagreement = mismatch(settings, partitions)
    if disagreement is not None:
        print(f"miqps worker: {disagreement}", file=sys.stderr)
        return 2
    if options.create_topics_only:
        for name, count in sorted(partitions.items()):
            print(f"{name}\t{count} partitions")
        return 0
    return _run_faust(settings, roles, partitions, options.loglevel, settings.stop_timeout)


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
    from streams.worker.lifecycle import EXIT_MARGIN, StopDeadline, wait_for_broker

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
    # A crash in native code (RocksDB, librdkafka) leaves a Python stack on stderr.
    faulthandler.enable(all_threads=True)
    log.info(
        "worker %s: agents %s, topics %s, state in %s; stops within %gs",
        settings.app_id,
        ",".join(sorted(roles)),
        settings.topics.all(),
        settings.state_dir,
        stop_timeout,
    )
    return worker.run()
