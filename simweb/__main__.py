"""Command line: ``python -m simweb serve|corpus``."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from simweb.corpus import generate_corpus
from simweb.server import SimWeb
from simweb.sites import FAMILIES, build_sites


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m simweb", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve the simulated web as an HTTP proxy")
    serve.add_argument("--family", choices=FAMILIES, default="tuning")
    serve.add_argument("--sites", type=int, default=12)
    serve.add_argument("--seed", type=int, default=0)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8899)
    serve.add_argument("--rate-limit", type=float, default=50.0, help="requests/s per host")
    serve.add_argument("--flaky-rate", type=float, default=0.02)
    serve.add_argument("--hang-seconds", type=float, default=30.0)
    serve.add_argument(
        "--interstitials",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="answer some requests of the sites that have them with challenge pages",
    )

    corpus = sub.add_parser("corpus", help="write url<TAB>content_key lines")
    corpus.add_argument("--family", choices=FAMILIES, default="tuning")
    corpus.add_argument("--sites", type=int, default=12)
    corpus.add_argument("--seed", type=int, default=0)
    corpus.add_argument("--urls-per-site", type=int, default=2000)
    corpus.add_argument("--out", default="-", help="output file, - for stdout")
    return parser


def _serve(args: argparse.Namespace) -> int:
    done = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        done.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    sites = build_sites(args.family, args.sites, args.seed)
    web = SimWeb(
        sites,
        args.host,
        args.port,
        rate_limit_per_second=args.rate_limit,
        flaky_rate=args.flaky_rate,
        hang_seconds=args.hang_seconds,
        seed=args.seed,
        interstitials=args.interstitials,
    )
    with web:
        hosts = " ".join(site.host for site in sites)
        print(f"simweb serving {len(sites)} sites on {web.proxy_url}: {hosts}", flush=True)
        while not done.wait(0.5):
            pass
    print("simweb stopped", file=sys.stderr, flush=True)
    return 0


def _corpus(args: argparse.Namespace) -> int:
    sites = build_sites(args.family, args.sites, args.seed)
    corpus = generate_corpus(sites, args.urls_per_site, args.seed)
    text = "".join(f"{c.url}\t{c.content_key}\n" for c in corpus)
    if args.out == "-":
        sys.stdout.write(text)
    else:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(text)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    return _corpus(args)


if __name__ == "__main__":
    sys.exit(main())
