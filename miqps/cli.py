"""The ``miqps`` command: learn maps and canonicalize URLs (workers: streams extra)."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import re
import shutil
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any, TextIO

from miqps.audit import DEFAULT_AUDIT_SHARE, Audit, AuditRule, audit_map
from miqps.canonical import Canonicalizer, StaticLayers
from miqps.export import FORMATS as EXPORT_FORMATS
from miqps.export import clean_param_by_host, export
from miqps.fetch import FetchConfig, Fetcher, FetchStats
from miqps.learner import LearnConfig, Learner
from miqps.maps import DomainMap, InvalidMap, merge_update, read_maps, write_maps
from miqps.politeness import RobotsStatus, read_never_probe
from miqps.prober import PageProber
from miqps.report import Limits, ReportBuilder
from miqps.update import DEFAULT_MAX_FLIP_SHARE, MapUpdate, Undecided, update_all
from miqps.urls import InvalidURL, NormalizedURL, parse

MAX_INVALID_MESSAGES = 20


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="miqps",
        description="Learn which URL query parameters change a page, and canonicalize URLs.",
    )
    parser.add_argument("--version", action="version", version=f"miqps {version('miqps')}")
    commands = parser.add_subparsers(dest="command", required=True)

    learn = commands.add_parser("learn", help="probe sites and write one MIQPS map per domain")
    learn.add_argument("--urls", required=True, type=Path, help="file with one URL per line")
    learn.add_argument(
        "--out",
        required=True,
        type=Path,
        help="maps, one JSON per line; an existing file is the previous version (anomaly gate)",
    )
    learn.add_argument(
        "--proxy",
        default=os.environ.get("MIQPS_PROXY"),
        help="send every probe through this HTTP proxy (or MIQPS_PROXY)",
    )
    learn.add_argument(
        "--allow-private",
        action="store_true",
        default=_truthy(os.environ.get("MIQPS_ALLOW_PRIVATE")),
        help="allow loopback, private and link-local targets",
    )
    defaults = LearnConfig()
    fetch_defaults = FetchConfig()
    learn.add_argument(
        "--user-agent",
        default=os.environ.get("MIQPS_USER_AGENT") or fetch_defaults.user_agent,
        help="User-Agent of every probe (or MIQPS_USER_AGENT); robots.txt groups are "
        "matched on its product token",
    )
    learn.add_argument(
        "--contact-url",
        default=os.environ.get("MIQPS_CONTACT_URL") or None,
        help="a page telling site owners who probes them, added to the User-Agent "
        "(or MIQPS_CONTACT_URL)",
    )
    learn.add_argument(
        "--never-probe",
        type=Path,
        default=os.environ.get("MIQPS_NEVER_PROBE") or None,
        help="file of domains never fetched, one per line, subdomains included "
        "(or MIQPS_NEVER_PROBE); their parameters are all kept",
    )
    learn.add_argument(
        "--max-crawl-delay",
        type=float,
        default=fetch_defaults.max_crawl_delay,
        help="longest Crawl-delay honoured, in seconds; a host asking for more is not probed",
    )
    learn.add_argument(
        "--samples",
        type=int,
        default=defaults.samples,
        help="S: distinct items a parameter must leave unchanged before it is dropped",
    )
    learn.add_argument(
        "--threshold",
        type=float,
        default=defaults.threshold,
        help="T: a change on a smaller share of samples is confirmed by a second look",
    )
    learn.add_argument(
        "--min-conclusive",
        type=int,
        default=defaults.min_conclusive,
        help="N: fewer conclusive samples than this keeps the parameter",
    )
    learn.add_argument(
        "--verify-samples",
        type=int,
        default=defaults.verify_samples,
        help="samples per pattern to verify the final canonical form",
    )
    learn.add_argument(
        "--max-flip-share",
        type=float,
        default=DEFAULT_MAX_FLIP_SHARE,
        help="A: reject an update dropping more than this share of kept params",
    )
    learn.add_argument(
        "--audit-share",
        type=float,
        default=DEFAULT_AUDIT_SHARE,
        help="on an existing map, re-test this share of the new items of dropped params (0: off)",
    )
    learn.add_argument(
        "--concurrency",
        type=int,
        default=fetch_defaults.per_host_concurrency,
        help="requests in flight per host",
    )
    learn.add_argument(
        "--rate",
        type=float,
        default=fetch_defaults.per_host_rate,
        help="requests per second per host",
    )
    learn.add_argument(
        "--timeout",
        type=float,
        default=fetch_defaults.timeout,
        help="seconds per request, all included",
    )
    learn.add_argument(
        "--max-bytes",
        type=int,
        default=fetch_defaults.max_bytes,
        help="largest body read, in bytes",
    )
    learn.add_argument("--seed", type=int, default=defaults.seed)
    learn.add_argument("--no-progress", action="store_true", help="no progress bar")
    _add_skip_invalid(learn, "of the previous --out (a copy of that file is kept as OUT.prev)")

    canon = commands.add_parser("canonicalize", help="print the canonical URL of each input")
    canon.add_argument("--maps", type=Path, help="maps written by 'miqps learn'")
    _add_skip_invalid(canon, "of --maps")
    canon.add_argument("--json", action="store_true", help="print the decision details")
    canon.add_argument(
        "--no-prior",
        action="store_true",
        help="do not drop utm_*/gclid/fbclid/msclkid in unlearned patterns",
    )
    canon.add_argument("urls", nargs="*", help="URLs; read from stdin when none are given")

    export_cmd = commands.add_parser(
        "export", help="write what the maps learned as rules for crawlers and caches"
    )
    export_cmd.add_argument(
        "--maps", required=True, type=Path, help="maps written by 'miqps learn'"
    )
    export_cmd.add_argument(
        "--format",
        required=True,
        choices=sorted(EXPORT_FORMATS),
        help="clean-param (robots.txt), dud-rules (duplicate-url-"
        "discarder), varnish (VCL), cloudflare (cache rules), clearurls",
    )
    export_cmd.add_argument("--domain", action="append", help="only this domain's map (repeatable)")
    export_cmd.add_argument(
        "--out-dir",
        type=Path,
        help="clean-param: write one file per host, DIR/HOST.robots.txt, to append to "
        "that host's robots.txt",
    )
    export_cmd.add_argument(
        "--cache-key-only",
        action="store_true",
        help='cloudflare: leave out "cache": true, so the rules set the cache key alone '
        "and do not make responses eligible for caching",
    )
    _add_skip_invalid(export_cmd, "of --maps")

    report = commands.add_parser(
        "report", help="write the parameter-sprawl report of a URL list as one HTML file"
    )
    report.add_argument("--urls", required=True, type=Path, help="file with one URL per line")
    report.add_argument("--maps", required=True, type=Path, help="maps written by 'miqps learn'")
    report.add_argument("--out", required=True, type=Path, help="the HTML file to write")
    report.add_argument(
        "--no-prior",
        action="store_true",
        help="canonicalize as 'miqps canonicalize --no-prior' does",
    )
    report_limits = Limits()
    report.add_argument(
        "--max-domains",
        type=int,
        default=report_limits.domains,
        help="domains shown, those with the most distinct URLs first",
    )
    report.add_argument(
        "--max-patterns",
        type=int,
        default=report_limits.patterns_per_domain,
        help="patterns shown per domain, those with the most URLs first",
    )
    report.add_argument(
        "--max-params",
        type=int,
        default=report_limits.params_per_domain,
        help="parameters shown per domain, those creating the most URLs first",
    )
    report.add_argument(
        "--max-explained",
        type=int,
        default=report_limits.explained_urls,
        help="distinct URLs whose explanation is embedded (one per pattern first)",
    )
    _add_skip_invalid(report, "of --maps")

    worker = commands.add_parser("worker", help="run the Faust stream worker (streams extra)")
    worker.add_argument("args", nargs=argparse.REMAINDER)
    maps_cmd = commands.add_parser(
        "maps",
        help="print current maps from the compacted topic; 'maps history|rollback|"
        "freeze|unfreeze|publish': an operator's map commands",
    )
    maps_cmd.add_argument("args", nargs=argparse.REMAINDER)
    dashboard = commands.add_parser(
        "dashboard", help="serve a live dashboard of the stream processor (streams extra)"
    )
    dashboard.add_argument("args", nargs=argparse.REMAINDER)
    return parser


def _add_skip_invalid(command: argparse.ArgumentParser, which: str) -> None:
    command.add_argument(
        "--skip-invalid",
        action="store_true",
        help=f"skip the map lines {which} that break a rule, with a report "
        "on stderr, instead of stopping",
    )


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] in (["worker"], ["maps"], ["dashboard"]):
        return run_streams_command(arguments[0], arguments[1:])
    args = build_parser().parse_args(arguments)
    try:
        if args.command == "learn":
            return run_learn(args)
        if args.command == "canonicalize":
            return run_canonicalize(args)
        if args.command == "export":
            return run_export(args)
        if args.command == "report":
            return run_report(args)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


def run_streams_command(command: str, args: list[str]) -> int:
    try:
        streams_cli = importlib.import_module("streams.cli")
    except ImportError as error:
        print(
            f"miqps {command}: the stream processor is not installed ({error}); "
            "install the 'streams' extra",
            file=sys.stderr,
        )
        return 2
    return int(streams_cli.main(command, args))


def _read_urls(lines: Iterable[str], label: str) -> tuple[list[NormalizedURL], int, int]:
    urls: list[NormalizedURL] = []
    blank = invalid = 0
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if not text:
            blank += 1
            continue
        try:
            urls.append(parse(text))
        except InvalidURL as error:
            invalid += 1
            if invalid <= MAX_INVALID_MESSAGES:
                print(f"{label}:{number}: skipped: {error.reason}", file=sys.stderr)
    if invalid > MAX_INVALID_MESSAGES:
        print(
            f"{label}: {invalid - MAX_INVALID_MESSAGES} more invalid lines skipped", file=sys.stderr
        )
    return urls, blank, invalid


def run_learn(args: argparse.Namespace) -> int:
    try:
        config = LearnConfig(
            samples=args.samples,
            threshold=args.threshold,
            min_conclusive=args.min_conclusive,
            verify_samples=args.verify_samples,
            seed=args.seed,
        )
        audit_rule = AuditRule(args.audit_share, seed=str(args.seed))
    except ValueError as error:
        print(f"miqps learn: {error}", file=sys.stderr)
        return 2
    fetch_config = FetchConfig(
        timeout=args.timeout,
        max_bytes=args.max_bytes,
        per_host_concurrency=max(1, args.concurrency),
        per_host_rate=args.rate,
        proxy=args.proxy or None,
        allow_private=args.allow_private,
        user_agent=args.user_agent,
        contact_url=args.contact_url,
        never_probe=args.never_probe,
        max_crawl_delay=args.max_crawl_delay,
    )
    if args.never_probe is not None:
        try:
            read_never_probe(args.never_probe)
        except OSError as error:
            print(f"miqps learn: cannot read {args.never_probe}: {error.strerror}", file=sys.stderr)
            return 2
        except ValueError as error:
            print(f"miqps learn: {error}", file=sys.stderr)
            return 2
    try:
        with args.urls.open(encoding="utf-8", errors="surrogateescape") as handle:
            urls, blank, invalid = _read_urls(handle, str(args.urls))
    except OSError as error:
        print(f"miqps learn: cannot read {args.urls}: {error.strerror}", file=sys.stderr)
        return 2
    previous: dict[str, DomainMap] = {}
    if args.out.exists():
        loaded = _load_maps(args.out, args.skip_invalid, "miqps learn", "previous maps")
        if loaded is None:
            return 2
        previous, skipped = loaded
        if skipped:
            kept_as = args.out.with_name(args.out.name + ".prev")
            try:
                shutil.copyfile(args.out, kept_as)
            except OSError as error:
                print(
                    f"miqps learn: cannot keep the previous maps as {kept_as}: {error.strerror}",
                    file=sys.stderr,
                )
                return 2
            print(
                f"miqps learn: the previous maps, skipped lines included, are kept as {kept_as}",
                file=sys.stderr,
            )
    started = time.monotonic()
    updates, audits, fetch_stats = asyncio.run(
        _learn(
            urls,
            previous,
            config,
            fetch_config,
            args.max_flip_share,
            audit_rule,
            show_progress=not args.no_progress,
        )
    )
    final = dict(previous)
    for domain, update in updates.items():
        if update.published is not None:
            final[domain] = update.published
        elif update.verdict is not None and not update.verdict.accepted:
            print(
                f"miqps learn: {domain}: update rejected, old map kept: {update.verdict.reason}",
                file=sys.stderr,
            )
        elif update.frozen:
            print(
                f"miqps learn: {domain}: the map is frozen, not changed: "
                f"{len(update.frozen)} patterns not learned",
                file=sys.stderr,
            )
        final.setdefault(domain, merge_update(None, DomainMap(domain)))
    for domain, audit in audits.items():
        if audit.published is not None:
            final[domain] = audit.published
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_maps(args.out, final.values())
    _print_summary(
        sys.stdout,
        urls,
        blank,
        invalid,
        list(updates.values()),
        fetch_stats,
        time.monotonic() - started,
        args.out,
        list(audits.values()),
    )
    if _every_probe_failed(updates.values(), fetch_stats):
        print(_TOTAL_FAILURE_HINT, file=sys.stderr)
        return EXIT_EVERY_PROBE_FAILED
    return 0


EXIT_EVERY_PROBE_FAILED = 3
_TOTAL_FAILURE_HINT = (
    "miqps learn: nothing could be decided: every probe failed and no page was fetched.\n"
    "  Hosts that do not resolve here: send the probes through a proxy that reaches them "
    "(--proxy URL or MIQPS_PROXY; the proxy resolves the names), or check DNS.\n"
    "  Loopback or private addresses: refused unless --allow-private (or "
    "MIQPS_ALLOW_PRIVATE=1).\n"
    "  The maps keep every parameter of these patterns; the next run asks again."
)


def _every_probe_failed(updates: Iterable[MapUpdate], fetch_stats: FetchStats) -> bool:
    """Whether no pattern of the input is decided, now or by the previous maps, because no
    probe got a page: every fetch failed or was refused."""
    updates = list(updates)
    left_undecided = any(
        cause is Undecided.FAILED for update in updates for cause in update.undecided.values()
    )
    decided = any(update.decided or update.skipped for update in updates)
    return left_undecided and not decided and fetch_stats.fetched == 0


def run_export(args: argparse.Namespace) -> int:
    loaded = _load_maps(args.maps, args.skip_invalid, "miqps export", "maps")
    if loaded is None:
        return 2
    maps, _ = loaded
    if args.domain:
        wanted = [domain.lower() for domain in args.domain]  # a domain is a lowercased host
        missing = sorted(set(wanted) - maps.keys())
        if missing:
            print(f"miqps export: no map for {', '.join(missing)} in {args.maps}", file=sys.stderr)
            return 1
        maps = {domain: maps[domain] for domain in wanted}
    if args.out_dir is not None:
        if args.format != "clean-param":
            print("miqps export: --out-dir is for --format clean-param", file=sys.stderr)
            return 2
        return _write_per_host(clean_param_by_host(maps, StaticLayers.default()), args.out_dir)
    if args.cache_key_only and args.format != "cloudflare":
        print("miqps export: --cache-key-only is for --format cloudflare", file=sys.stderr)
        return 2
    sys.stdout.write(export(maps, args.format, cache_key_only=args.cache_key_only))
    return 0


# A host as a file name: what a lowercased host can hold, and never a path of its own.
_FILE_NAME_HOST = re.compile(r"[a-z0-9\[][a-z0-9.:\[\]_-]*")


def _write_per_host(files: dict[str, str], folder: Path) -> int:
    written = 0
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for host, text in files.items():
            if not _FILE_NAME_HOST.fullmatch(host):
                print(f"miqps export: skipped {host!r}: not a file name", file=sys.stderr)
                continue
            (folder / f"{host}.robots.txt").write_text(text, encoding="utf-8")
            written += 1
    except OSError as error:
        print(f"miqps export: cannot write to {folder}: {error.strerror}", file=sys.stderr)
        return 2
    print(f"miqps export: {written} robots.txt additions written to {folder}", file=sys.stderr)
    return 0


def run_report(args: argparse.Namespace) -> int:
    try:
        limits = Limits(
            domains=args.max_domains,
            patterns_per_domain=args.max_patterns,
            params_per_domain=args.max_params,
            explained_urls=args.max_explained,
        )
    except ValueError as error:
        print(f"miqps report: {error}", file=sys.stderr)
        return 2
    loaded = _load_maps(args.maps, args.skip_invalid, "miqps report", "maps")
    if loaded is None:
        return 2
    maps = loaded[0]
    canonicalizer = Canonicalizer(StaticLayers.default(), use_prior=not args.no_prior)
    canonicalizer.load(maps)
    builder = ReportBuilder(canonicalizer, maps, limits)
    try:
        with args.urls.open(encoding="utf-8", errors="surrogateescape", newline="") as handle:
            builder.add_lines(handle)
    except OSError as error:
        print(f"miqps report: cannot read {args.urls}: {error.strerror}", file=sys.stderr)
        return 2
    view = builder.view()
    from miqps.report_html import render

    page = render(view, (f"URLs: {args.urls}", f"maps: {args.maps}"))
    try:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(page, encoding="utf-8", errors="surrogateescape")
    except OSError as error:
        print(f"miqps report: cannot write {args.out}: {error.strerror}", file=sys.stderr)
        return 2
    print(
        f"{view.lines} lines: {view.distinct_urls} distinct URLs, {view.canonical_urls} "
        f"canonical ({view.duplicates_saved} duplicates saved), {view.blank} blank, "
        f"{view.invalid} invalid; {view.domain_count} domains; report written to {args.out}"
    )
    return 0


def _load_maps(
    path: Path, skip_invalid: bool, command: str, what: str
) -> tuple[dict[str, DomainMap], int] | None:
    """The valid maps of ``path`` and how many lines were skipped, or None (reported on
    stderr) if it cannot be read or, without ``skip_invalid``, has an invalid line."""
    skipped: list[InvalidMap] = []

    def skip(error: InvalidMap) -> None:
        skipped.append(error)
        if len(skipped) <= MAX_INVALID_MESSAGES:
            print(f"{command}: skipped: {error}", file=sys.stderr)

    try:
        maps = read_maps(path, skip if skip_invalid else None)
    except OSError as error:
        print(f"{command}: cannot read {what}: {path}: {error.strerror}", file=sys.stderr)
        return None
    except InvalidMap as error:
        print(
            f"{command}: cannot read {what}: {error}\n{command}: use --skip-invalid to "
            "skip such lines",
            file=sys.stderr,
        )
        return None
    if skipped:
        print(
            f"{command}: {path}: {len(skipped)} invalid map lines skipped, {len(maps)} maps read",
            file=sys.stderr,
        )
    return maps, len(skipped)


async def _learn(
    urls: list[NormalizedURL],
    previous: dict[str, DomainMap],
    config: LearnConfig,
    fetch_config: FetchConfig,
    max_flip_share: float,
    audit_rule: AuditRule,
    *,
    show_progress: bool,
) -> tuple[dict[str, MapUpdate], dict[str, Audit], FetchStats]:
    progress = _progress(len({url.host for url in urls}), show_progress)
    async with Fetcher(fetch_config) as fetcher:

        def done(update: MapUpdate) -> None:
            if progress is not None:
                progress.set_postfix_str(f"{fetcher.stats.requests} fetches")
                progress.update(1)

        prober = PageProber(fetcher)
        updates = await update_all(
            Learner(prober, config),
            previous,
            urls,
            max_flip_share=max_flip_share,
            on_update=done,
        )
        if progress is not None:
            progress.close()
        audits = await _audit_previous(prober, previous, updates, urls, audit_rule, max_flip_share)
        return updates, audits, fetcher.stats


async def _audit_previous(
    prober: PageProber,
    previous: dict[str, DomainMap],
    updates: dict[str, MapUpdate],
    urls: list[NormalizedURL],
    rule: AuditRule,
    max_flip_share: float,
) -> dict[str, Audit]:
    """Audit what the previous maps drop with the new URLs of their patterns, each domain
    against its newest map."""
    by_domain: dict[str, list[NormalizedURL]] = {}
    for url in urls:
        old = previous.get(url.host)
        if old is not None and url.pattern in old.patterns:
            by_domain.setdefault(url.host, []).append(url)
    audits: dict[str, Audit] = {}

    async def one(domain: str, domain_urls: list[NormalizedURL]) -> None:
        update = updates.get(domain)
        newest = update.published if update is not None else None
        current = newest or previous[domain]
        audits[domain] = await audit_map(
            prober, current, domain_urls, rule, max_flip_share=max_flip_share
        )

    if rule.share > 0:
        await asyncio.gather(*(one(d, u) for d, u in sorted(by_domain.items())))
    return dict(sorted(audits.items()))


def _progress(total: int, wanted: bool) -> Any:
    if not wanted or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="domain", desc="learning", file=sys.stderr)


def _print_summary(
    out: TextIO,
    urls: list[NormalizedURL],
    blank: int,
    invalid: int,
    updates: list[MapUpdate],
    fetch_stats: FetchStats,
    seconds: float,
    path: Path,
    audits: Sequence[Audit] = (),
) -> None:
    distinct = len({url.url for url in urls})
    decisions = [entry.decision for update in updates for entry in update.decided.values()]
    reports = [update.report for update in updates if update.report is not None]
    lines = [
        f"URLs read: {len(urls)} valid ({distinct} distinct), {blank} blank, {invalid} invalid",
        f"domains: {len(updates)} learned, {sum(u.rejected for u in updates)} updates "
        "rejected by the anomaly gate",
        f"patterns: {len(decisions)} decided, "
        f"{sum(len(u.skipped) for u in updates)} already in the map (skipped), "
        f"{sum(len(u.undecided) for u in updates)} left undecided" + _undecided_counts(updates),
        f"parameters (per pattern): {sum(len(d.kept) for d in decisions)} kept, "
        f"{sum(len(d.dropped) for d in decisions)} dropped",
        f"fetches: {fetch_stats.requests} ({fetch_stats.requests / max(distinct, 1):.3f} "
        f"per distinct URL), {fetch_stats.retries} retries, "
        f"{fetch_stats.failed} failed, {fetch_stats.refused} refused",
        *(
            f"inconclusive fetches, {kind}: {count}"
            + (" (allowed with --allow-private)" if kind.startswith("refused") else "")
            for kind, count in sorted(
                fetch_stats.failures_by_kind.items(), key=lambda item: (-item[1], item[0])
            )
        ),
        *_politeness_summary(fetch_stats),
        f"inconclusive samples: {sum(r.inconclusive for r in reports)}",
        *(
            f"{u.domain}: {count} patterns left undecided, asked again on the next run: "
            f"{cause.message}"
            for u in updates
            for cause, count in sorted(Counter(u.undecided.values()).items())
        ),
        *_audit_summary(audits),
        f"time: {seconds:.1f}s",
        f"maps written to {path}",
    ]
    out.write("\n".join(lines) + "\n")


def _undecided_counts(updates: Sequence[MapUpdate]) -> str:
    """`` (3 disallowed, 2 shells)``: the patterns left undecided, by cause."""
    causes = Counter(cause for update in updates for cause in update.undecided.values())
    if not causes:
        return ""
    return " (" + ", ".join(f"{n} {cause}" for cause, n in sorted(causes.items())) + ")"


def _politeness_summary(stats: FetchStats) -> list[str]:
    robots = stats.robots_fetches
    lines = [
        f"robots.txt: {sum(robots.values())} fetched, {robots[RobotsStatus.RULES]} with "
        f"rules, {robots[RobotsStatus.NONE]} without (everything allowed), "
        f"{robots[RobotsStatus.UNREACHABLE]} not answering (nothing fetched)",
        *(
            f"not fetched, {kind}: {count}"
            for kind, count in sorted(stats.not_probed.items(), key=lambda item: -item[1])
        ),
    ]
    if stats.deferred_seconds:
        lines.append(f"hosts paused at their request (Retry-After): {stats.deferred_seconds:.1f}s")
    return lines


def _audit_summary(audits: Sequence[Audit]) -> list[str]:
    if not audits:
        return []
    restored = [
        f"{audit.domain} {shape} {name}" for audit in audits for shape, name in audit.restored
    ]
    lines = [
        f"audits: {sum(a.audited for a in audits)} items of dropped parameters re-tested "
        f"({sum(a.inconclusive for a in audits)} inconclusive, not counted), "
        f"{sum(a.update.fetches for a in audits)} fetches, {len(restored)} parameters restored"
    ]
    lines.extend(f"restored by an audit: {entry}" for entry in restored)
    lines.extend(
        f"{audit.domain}: audit update rejected, old map kept: {audit.update.verdict.reason}"
        for audit in audits
        if audit.update.verdict is not None and not audit.update.verdict.accepted
    )
    return lines


def run_canonicalize(args: argparse.Namespace) -> int:
    import gc

    canonicalizer = Canonicalizer(StaticLayers.default(), use_prior=not args.no_prior)
    if args.maps is not None:
        gc.disable()  # loading makes many objects that all live on: collecting is wasted
        try:
            loaded = _load_maps(args.maps, args.skip_invalid, "miqps canonicalize", "maps")
        finally:
            gc.enable()
        if loaded is None:
            return 2
        canonicalizer.load(loaded[0])
        gc.freeze()
    batches: Iterable[tuple[list[str], bool]] = (
        [([url.rstrip("\r\n") for url in args.urls], False)] if args.urls else _stdin_lines()
    )
    write = sys.stdout.write
    if args.json:
        lines = (line for batch, _ in batches for line in batch)
        for output in _decisions(canonicalizer, lines):
            write(output)
    else:
        for output in _canonical_lines(canonicalizer, batches):
            write(output)
    sys.stdout.flush()
    return 0


_BLOCK_BYTES = 1 << 20
# The bytes of a block of lines free of C0 control characters (but "\n") and DEL.
_CONTROL_FREE = bytes(range(0x20, 0x7F)) + bytes(range(0x80, 0x100)) + b"\n"


def _stdin_lines() -> Iterator[tuple[list[str], bool]]:
    """Stdin in blocks of lines, without line ends, each with ``True`` if free of controls.

    Lines are what a UTF-8 text stream with universal newlines and ``surrogateescape``
    gives (``\\n``, ``\\r\\n`` and ``\\r`` end a line). Checking a whole block for control
    characters is one C call, instead of one check per line.
    """
    stdin = open(sys.stdin.fileno(), "rb", closefd=False)  # noqa: SIM115
    carry = b""
    while True:
        chunk = stdin.read1(_BLOCK_BYTES)
        if not chunk:
            break
        data = carry + chunk if carry else chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            carry = data
            continue
        block, carry = data[:cut], data[cut + 1 :]
        if not block.translate(None, _CONTROL_FREE):  # so no "\r" either
            yield block.decode("utf-8", "surrogateescape").split("\n"), True
        else:
            yield _decode_lines(data[: cut + 1]), False
    if carry:
        yield _decode_lines(carry), False


def _decode_lines(data: bytes) -> list[str]:
    text = data.decode("utf-8", "surrogateescape")
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    return lines


def _canonical_lines(
    canonicalizer: Canonicalizer, batches: Iterable[tuple[list[str], bool]]
) -> Iterator[str]:
    """The output for each batch of lines: one line per input line, empty when invalid."""
    number = 0
    for lines, control_free in batches:
        if not lines:
            continue
        errors: list[tuple[int, InvalidURL]] = []
        outputs = canonicalizer.canonical_texts(lines, errors, control_free=control_free)
        for index, error in errors:
            _report_invalid(number + index + 1, error)
        number += len(lines)
        yield "\n".join(outputs) + "\n"


def _decisions(canonicalizer: Canonicalizer, lines: Iterable[str]) -> Iterator[str]:
    for number, line in enumerate(lines, 1):
        text = line.rstrip("\r\n")
        try:
            decision = canonicalizer.decide(parse(text), original=text)
        except InvalidURL as error:
            _report_invalid(number, error)
            yield json.dumps({"url": text, "error": error.reason}) + "\n"
            continue
        yield json.dumps(decision.to_json(), ensure_ascii=False) + "\n"


def _report_invalid(number: int, error: InvalidURL) -> None:
    print(f"line {number}: invalid URL: {error.reason}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
