"""``miqps dashboard``: serve a live dashboard of the stream processor, read from Kafka
(:mod:`streams.ops.dashboard`).

Importing it needs no Kafka package: :func:`run` imports them."""

from __future__ import annotations

import argparse

from streams.cli.common import add_common_options, extra_missing, settings_from

NAME = "dashboard"
HELP = "serve a live dashboard of the stream processor (streams extra)"
OWN_PARSER = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("args", nargs=argparse.REMAINDER)


def run(args: argparse.Namespace) -> int:
    if extra_missing(NAME, "confluent_kafka", "prometheus_client"):
        return 2
    from streams.ops.dashboard import run_dashboard

    parser = dashboard_parser()
    add_common_options(parser)
    options = parser.parse_args(args.args)
    return run_dashboard(
        settings_from(options),
        options.host,
        options.port,
        worker_metrics=options.worker_metrics,
    )


def dashboard_parser() -> argparse.ArgumentParser:
    from streams.ops.dashboard import DEFAULT_PORT, WORKER_METRICS_SECONDS

    parser = argparse.ArgumentParser(
        prog="miqps dashboard",
        description="Serve a live dashboard of the stream processor, read from Kafka.",
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="the address to listen on (default: loopback only)"
    )
    parser.add_argument(
        "--port",
        type=_port,
        default=DEFAULT_PORT,
        help=f"the port to listen on (default {DEFAULT_PORT}; 0: any free)",
    )
    parser.add_argument(
        "--worker-metrics",
        metavar="URL",
        help="the probing worker's metrics endpoint (MIQPS_METRICS_PORT), read every "
        f"{WORKER_METRICS_SECONDS:g} s for each domain's robots.txt status and pace",
    )
    return parser


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535, not {port}")
    return port
