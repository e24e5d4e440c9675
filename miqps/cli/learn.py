"""``miqps learn``: probe sites and write one MIQPS map per domain, the previous maps file
being the previous version (anomaly gate, audits, frozen maps)."""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TextIO

from miqps.audit import DEFAULT_AUDIT_SHARE, Audit, AuditRule, audit_map
from miqps.cli.common import add_skip_invalid, load_maps, read_urls
from miqps.fetch import FetchConfig, Fetcher, FetchStats
from miqps.learner import LearnConfig, Learner
from miqps.maps import DomainMap, merge_update, write_maps
from miqps.politeness import RobotsStatus, read_never_probe
from miqps.prober import PageProber
from miqps.update import DEFAULT_MAX_FLIP_SHARE, MapUpdate, Undecided, update_all
from miqps.urls import NormalizedURL

NAME = "learn"
HELP = "probe sites and write one MIQPS map per domain"
OWN_PARSER = False


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--urls", required=True, type=Path, help="file with one URL per line")
    parser.add_argument(
        "--out",
        required=True,
        type=Path,
        help="maps, one JSON per line; an existing file is the previous version (anomaly gate)",
    )
    parser.add_argument(
        "--proxy",
        default=os.environ.get("MIQPS_PROXY"),
        help="send every probe through this HTTP proxy (or MIQPS_PROXY)",
    )
    parser.add_argument(
        "--allow-private",
        action="store_true",
        default=_truthy(os.environ.get("MIQPS_ALLOW_PRIVATE")),
        help="allow loopback, private and link-local targets",
    )
    defaults = LearnConfig()
    fetch_defaults = FetchConfig()
    parser.add_argument(
        "--user-agent",
        default=os.environ.get("MIQPS_USER_AGENT") or fetch_defaults.user_agent,
        help="User-Agent of every probe (or MIQPS_USER_AGENT); robots.txt groups are "
        "matched on its product token",
    )
    parser.add_argument(
        "--contact-url",
        default=os.environ.get("MIQPS_CONTACT_URL") or None,
        help="a page telling site owners who probes them, added to the User-Agent "
        "(or MIQPS_CONTACT_URL)",
    )
    parser.add_argument(
        "--never-probe",
        type=Path,
        default=os.environ.get("MIQPS_NEVER_PROBE") or None,
        help="file of domains never fetched, one per line, subdomains included "
        "(or MIQPS_NEVER_PROBE); their parameters are all kept",
    )
    parser.add_argument(
        "--max-crawl-delay",
        type=float,
        default=fetch_defaults.max_crawl_delay,
        help="longest Crawl-delay honoured, in seconds; a host asking for more is not probed",
    )
    parser.add_argument(
        "--samples",
        type=int,
        default=defaults.samples,
        help="S: distinct items a parameter must leave unchanged before it is dropped",
    )
    parser.add_argument(
        "--threshold",
        type=float,
        default=defaults.threshold,
        help="T: a change on a smaller share of samples is confirmed by a second look",
    )
    parser.add_argument(
        "--min-conclusive",
        type=int,
        default=defaults.min_conclusive,
        help="N: fewer conclusive samples than this keeps the parameter",
    )
    parser.add_argument(
        "--verify-samples",
        type=int,
        default=defaults.verify_samples,
        help="samples per pattern to verify the final canonical form",
    )
    parser.add_argument(
        "--max-flip-share",
        type=float,
        default=DEFAULT_MAX_FLIP_SHARE,
        help="A: reject an update dropping more than this share of kept params",
    )
    parser.add_argument(
        "--audit-share",
        type=float,
        default=DEFAULT_AUDIT_SHARE,
        help="on an existing map, re-test this share of the new items of dropped params (0: off)",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=fetch_defaults.per_host_concurrency,
        help="requests in flight per host",
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=fetch_defaults.per_host_rate,
        help="requests per second per host",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=fetch_defaults.timeout,
        help="seconds per request, all included",
    )
    parser.add_argument(
        "--max-bytes",
        type=int,
        default=fetch_defaults.max_bytes,
        help="largest body read, in bytes",
    )
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_skip_invalid(parser, "of the previous --out (a copy of that file is kept as OUT.prev)")


def run(args: argparse.Namespace) -> int:
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
            urls, blank, invalid = read_urls(handle, str(args.urls))
    except OSError as error:
        print(f"miqps learn: cannot read {args.urls}: {error.strerror}", file=sys.stderr)
        return 2
    previous: dict[str, DomainMap] = {}
    if args.out.exists():
        loaded = load_maps(args.out, args.skip_invalid, "miqps learn", "previous maps")
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
        f"domains: {len(updates)} read, {sum(bool(u.decided) for u in updates)} with a "
        f"pattern decided, {sum(u.rejected for u in updates)} updates rejected by the "
        "anomaly gate",
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
