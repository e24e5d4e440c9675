"""``miqps learn``: probe sites and write one MIQPS map per domain, the previous maps file
being the previous version (anomaly gate, audits, frozen maps)."""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from miqps.audit import DEFAULT_AUDIT_SHARE, Audit, AuditRule, audit_map
from miqps.checkpoint import (
    Checkpoint,
    ProbeJournal,
    UnreadableProgress,
    journal_path,
    progress_path,
    read_progress,
    run_digest,
)
from miqps.cli.common import add_skip_invalid, load_maps, prepare_output, read_urls
from miqps.fetch import FetchConfig, Fetcher, FetchStats
from miqps.learner import LearnConfig, Learner, group_by_domain
from miqps.maps import DomainMap, merge_update
from miqps.politeness import RobotsStatus, read_never_probe
from miqps.prober import PageProber
from miqps.update import DEFAULT_MAX_FLIP_SHARE, MapUpdate, Undecided, update_map
from miqps.urls import NormalizedURL, parse
from miqps.warc import Archive, archive_files, read_archives

NAME = "learn"
HELP = "probe sites and write one MIQPS map per domain"
OWN_PARSER = False
DEFAULT_CHECKPOINT_SECONDS = 30.0


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--urls",
        type=Path,
        help="file with one URL per line (optional with --warc: the archives' pages are then "
        "the URLs)",
    )
    parser.add_argument(
        "--warc",
        type=Path,
        action="append",
        default=[],
        metavar="PATH",
        help="a crawl archive (.warc, .warc.gz, or a folder of them; repeatable): its pages "
        "stand for the first fetch of their URLs; a difference is confirmed on fresh fetches",
    )
    parser.add_argument(
        "--out",
        required=True,
        type=Path,
        help="maps, one JSON per line; an existing file is the previous version (anomaly "
        "gate); a missing folder is created. Saved as the run goes (OUT.progress.json beside "
        "it, and OUT.probes.jsonl, a journal of what was probed): rerunning an interrupted "
        "command resumes it, fetching nothing it got an answer to",
    )
    parser.add_argument(
        "--checkpoint-every",
        type=float,
        default=DEFAULT_CHECKPOINT_SECONDS,
        metavar="SECONDS",
        help="save the maps of the domains done at least this often (and on SIGINT, SIGTERM)",
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
    parser.add_argument(
        "--seed",
        type=int,
        default=defaults.seed,
        help="seed of the order samples are tried in: the same seed, the same run",
    )
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
    if not args.checkpoint_every > 0:
        print("miqps learn: --checkpoint-every must be more than 0 seconds", file=sys.stderr)
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
    if args.urls is None and not args.warc:
        print("miqps learn: give --urls, --warc, or both", file=sys.stderr)
        return 2
    for given in args.warc:
        if not given.exists():
            print(f"miqps learn: cannot read --warc {given}: no such file", file=sys.stderr)
            return 2
    archive = _read_archives(args.warc, fetch_config) if args.warc else None
    if args.urls is None:
        assert archive is not None
        urls, blank, invalid = [parse(url) for url in archive.order], 0, 0
    else:
        try:
            with args.urls.open(encoding="utf-8", errors="surrogateescape") as handle:
                urls, blank, invalid = read_urls(handle, str(args.urls))
        except OSError as error:
            print(f"miqps learn: cannot read {args.urls}: {error.strerror}", file=sys.stderr)
            return 2
        if archive is not None:
            archive.check_web({url.host for url in urls})
    if archive is not None:
        for line in archive.problems:
            print(f"miqps learn: {line}", file=sys.stderr)
    if not prepare_output(args.out, "miqps learn", "--out"):
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
    checkpoint = _checkpoint(args, urls, previous)
    if checkpoint is None:
        return 2
    started = time.monotonic()
    try:
        outcome = asyncio.run(
            _learn(
                urls,
                checkpoint,
                config,
                fetch_config,
                args.max_flip_share,
                audit_rule,
                args.checkpoint_every,
                show_progress=not args.no_progress,
                archive=archive,
            )
        )
    except OSError as error:  # the maps file could not be written
        print(f"miqps learn: cannot write --out: {args.out}: {error.strerror}", file=sys.stderr)
        return 2
    if checkpoint.journal is not None and checkpoint.journal.error is not None:
        print(
            f"miqps learn: probe outcomes no longer journaled: {checkpoint.journal.error}; "
            "a resumed run fetches again those of the domains not done",
            file=sys.stderr,
        )
    if outcome.stopped_by is not None:
        decided = sum(len(update.decided) for update in outcome.updates.values())
        to_go = {url.host for url in urls} - checkpoint.done
        journal = checkpoint.journal
        journaled = sum(journal.journaled[host] for host in to_go) if journal else 0
        print(
            f"miqps learn: interrupted ({outcome.stopped_by.name}): saved the maps of "
            f"{_count(len(checkpoint.done), 'domain')} done ({_count(decided, 'pattern')} "
            f"decided in this run) to {args.out}, {len(to_go)} to go "
            f"({_fetches(journaled)} journaled for them); run the same command again to resume",
            file=sys.stderr,
        )
        return 128 + outcome.stopped_by
    updates, audits = outcome.updates, outcome.audits
    for domain, update in updates.items():
        if update.verdict is not None and not update.verdict.accepted:
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
    _print_summary(
        sys.stdout,
        urls,
        blank,
        invalid,
        list(updates.values()),
        outcome.fetch_stats,
        time.monotonic() - started,
        args.out,
        list(audits.values()),
        resumed=len(checkpoint.resumed),
        replayed=checkpoint.journal.replayed if checkpoint.journal else 0,
        archive=archive,
        takes=outcome.takes,
    )
    if _nothing_reached(updates.values(), outcome.fetch_stats):
        print(_nothing_reached_hint(outcome.fetch_stats, fetch_config), file=sys.stderr)
        return EXIT_EVERY_PROBE_FAILED
    return 0


def _read_archives(paths: Sequence[Path], fetch_config: FetchConfig) -> Archive:
    return read_archives(
        paths, max_bytes=fetch_config.max_bytes, max_redirects=fetch_config.max_redirects
    )


def _decision_options(args: argparse.Namespace) -> dict[str, object]:
    """The options that change what a run decides: a run resumes only with the same,
    archives included (each file by its path, size and time of change)."""
    options: dict[str, object] = {
        name: getattr(args, name)
        for name in (
            "samples",
            "threshold",
            "min_conclusive",
            "verify_samples",
            "seed",
            "max_flip_share",
            "audit_share",
        )
    }
    if args.warc:
        options["warc"] = [_identity(path) for given in args.warc for path in _files(given)]
    return options


def _files(given: Path) -> list[Path]:
    try:
        return archive_files(given)
    except OSError:
        return [given]


def _identity(path: Path) -> list[object]:
    try:
        stat = path.stat()
    except OSError:
        return [str(path)]
    return [str(path), stat.st_size, stat.st_mtime_ns]


def _checkpoint(
    args: argparse.Namespace, urls: list[NormalizedURL], previous: dict[str, DomainMap]
) -> Checkpoint | None:
    """The run's checkpoint, resuming an interrupted run of the same command, and its
    journal of probe outcomes."""
    digest = run_digest((url.url for url in urls), _decision_options(args))
    checkpoint = Checkpoint(args.out, digest, dict(previous))
    try:
        progress = read_progress(args.out)
    except OSError as error:
        print(
            f"miqps learn: cannot read {progress_path(args.out)}: {error.strerror}",
            file=sys.stderr,
        )
        return None
    except UnreadableProgress as error:
        print(f"miqps learn: not resumed: {error}", file=sys.stderr)
        return _journaled(checkpoint, replay=False)
    if progress is None:
        # killed before its first checkpoint: what it journaled is all it left
        return _journaled(checkpoint, replay=True)
    if progress.run != digest or not args.out.exists():
        print(
            f"miqps learn: not resumed: {progress_path(args.out)} is the progress of a run "
            "with other URLs or options; the maps are read as the previous version",
            file=sys.stderr,
        )
        return _journaled(checkpoint, replay=False)
    checkpoint.resumed = frozenset(progress.done & previous.keys())
    checkpoint.done = set(checkpoint.resumed)
    checkpoint.saved_done = len(checkpoint.done)
    if _journaled(checkpoint, replay=True, announce=False) is None:
        return None
    replaying = _replaying(checkpoint)
    print(
        f"miqps learn: resuming: {_count(len(checkpoint.resumed), 'domain')} done by the "
        "interrupted run taken as saved, without a fetch" + (f"; {replaying}" if replaying else ""),
        file=sys.stderr,
    )
    return checkpoint


def _journaled(checkpoint: Checkpoint, *, replay: bool, announce: bool = True) -> Checkpoint | None:
    """``checkpoint`` with its journal open, holding what an interrupted attempt of the same
    run journaled (with ``replay``) for the domains it has not taken as done."""
    try:
        checkpoint.journal = ProbeJournal.open(
            checkpoint.out, checkpoint.run, replay=replay, done=checkpoint.resumed
        )
    except OSError as error:
        path = journal_path(checkpoint.out)
        print(f"miqps learn: cannot write {path}: {error.strerror}", file=sys.stderr)
        return None
    if announce and checkpoint.journal.held:
        print(f"miqps learn: resuming: {_replaying(checkpoint)}", file=sys.stderr)
    return checkpoint


def _replaying(checkpoint: Checkpoint) -> str:
    """``57 fetches journaled by the interrupted run in OUT.probes.jsonl are replayed, not
    made again``, or nothing when none are."""
    journal = checkpoint.journal
    if journal is None or not journal.held:
        return ""
    return (
        f"{_fetches(journal.held)} journaled by the interrupted run in {journal.path} "
        "are replayed, not made again"
    )


def _fetches(n: int) -> str:
    return f"{n} fetch" if n == 1 else f"{n} fetches"


EXIT_EVERY_PROBE_FAILED = 3
_REACHED = frozenset(
    (
        Undecided.ONE_PAGE,
        Undecided.SHELLS,
        Undecided.INTERSTITIALS,
        Undecided.DISALLOWED,
        Undecided.DEFERRED,
    )
)
"""Causes that show a host answered (its pages, its robots.txt)."""
_UNREACHED = frozenset((Undecided.FAILED, Undecided.ROBOTS_UNREACHABLE))


def _nothing_reached(updates: Iterable[MapUpdate], fetch_stats: FetchStats) -> bool:
    """Whether no pattern of the input is decided, now or by the previous maps, because
    nothing could be reached: no page fetched, every fetch failed or was refused, and no
    robots.txt answered but with an error."""
    updates = list(updates)
    causes = {cause for update in updates for cause in update.undecided.values()}
    decided = any(update.decided or update.skipped for update in updates)
    return (
        bool(causes & _UNREACHED)
        and not causes & _REACHED
        and not decided
        and fetch_stats.fetched == 0
    )


def _nothing_reached_hint(stats: FetchStats, config: FetchConfig) -> str:
    lines = ["miqps learn: nothing could be decided: every probe failed and no page was fetched."]
    if stats.robots_unanswered:
        lines.append(f"  {_robots_unanswered(stats)}.")
    if config.proxy is not None:
        lines.append(
            f"  Every probe went through the proxy {config.proxy}: check that it runs and "
            "reaches these hosts (a proxy answers 502 or 504 for a host it cannot resolve "
            "or reach)."
        )
    else:
        lines.append(
            "  Hosts that do not resolve here: send the probes through a proxy that reaches "
            "them (--proxy URL or MIQPS_PROXY; the proxy resolves the names), or check DNS."
        )
    if not config.allow_private:
        lines.append(
            "  Loopback or private addresses: refused unless --allow-private (or "
            "MIQPS_ALLOW_PRIVATE=1)."
        )
    lines.append("  The maps keep every parameter of these patterns; the next run asks again.")
    return "\n".join(lines)


def _robots_unanswered(stats: FetchStats) -> str:
    """``robots.txt of 2 hosts did not answer: HTTP 502``, with a count per reason when
    there are several."""
    reasons = Counter(stats.robots_unanswered.values())
    hosts = sum(reasons.values())
    if len(reasons) == 1:
        said = next(iter(reasons))
    else:
        said = ", ".join(f"{reason} ({n})" for reason, n in _by_count(reasons))
    return f"robots.txt of {_count(hosts, 'host')} did not answer: {said}"


def _by_count(counts: Counter[str]) -> list[tuple[str, int]]:
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


@dataclass(slots=True)
class _Outcome:
    updates: dict[str, MapUpdate]
    audits: dict[str, Audit]
    fetch_stats: FetchStats
    stopped_by: signal.Signals | None = None
    takes: TakeCounts | None = None


@dataclass(frozen=True, slots=True)
class TakeCounts:
    """Where the pages a run compared came from, when it had archives."""

    observed: int
    refetched: int
    probed: int
    saved: int


async def _learn(
    urls: list[NormalizedURL],
    checkpoint: Checkpoint,
    config: LearnConfig,
    fetch_config: FetchConfig,
    max_flip_share: float,
    audit_rule: AuditRule,
    checkpoint_every: float,
    *,
    show_progress: bool,
    archive: Archive | None = None,
) -> _Outcome:
    """Learn every domain of ``urls`` not done yet, each one's update and audit together,
    and keep ``checkpoint`` on disk: every ``checkpoint_every`` seconds when a domain was
    done, and on SIGINT or SIGTERM, which stop the run (a second one at once)."""
    previous = dict(checkpoint.maps)
    by_domain = {
        domain: domain_urls
        for domain, domain_urls in sorted(group_by_domain(urls).items())
        if domain not in checkpoint.resumed
    }
    updates: dict[str, MapUpdate] = {}
    audits: dict[str, Audit] = {}
    progress = _progress(len(by_domain), show_progress)
    loop = asyncio.get_running_loop()
    received: list[signal.Signals] = []
    async with Fetcher(fetch_config) as fetcher:
        prober = PageProber(fetcher, journal=checkpoint.journal, observations=archive)
        learner = Learner(prober, config)

        async def one(domain: str, domain_urls: list[NormalizedURL]) -> None:
            old = previous.get(domain)
            update = await update_map(
                learner, domain, old, domain_urls, max_flip_share=max_flip_share
            )
            final = update.published or old
            # the new URLs of the previous map's patterns audit what it drops
            audited = [u for u in domain_urls if old is not None and u.pattern in old.patterns]
            if old is not None and audited and audit_rule.share > 0:
                audit = await audit_map(
                    learner.prober,
                    update.published or old,
                    audited,
                    audit_rule,
                    max_flip_share=max_flip_share,
                )
                audits[domain] = audit
                final = audit.published or final
            updates[domain] = update
            checkpoint.finish(domain, final or merge_update(None, DomainMap(domain)))
            if progress is not None:
                progress.set_postfix_str(f"{fetcher.stats.requests} fetches")
                progress.update(1)

        work = asyncio.gather(*(one(d, u) for d, u in by_domain.items()))

        def stop(signum: int, frame: object) -> None:
            # A Python signal handler, not the loop's: it runs even while the loop is
            # blocked (a save on a stalled disk), so a second signal always stops at once.
            # The files on disk are whole whenever it does: each is written aside, renamed.
            name = signal.Signals(signum).name
            if received:
                _say(
                    f"miqps learn: {name} again: stopped at once; {checkpoint.out} holds the "
                    "last checkpoint, whole"
                )
                os._exit(128 + signum)
            received.append(signal.Signals(signum))
            _say(f"miqps learn: {name}: stopping, saving what is done (again: stop at once)")
            loop.call_soon_threadsafe(work.cancel)

        handlers = {signum: signal.signal(signum, stop) for signum in _STOP_SIGNALS}
        try:
            saver = asyncio.ensure_future(_save_every(checkpoint, checkpoint_every))
            interrupted = False
            try:
                await work
            except asyncio.CancelledError:
                if not received:
                    raise
                interrupted = True
            finally:
                saver.cancel()
                if progress is not None:
                    progress.close()
            if interrupted:
                checkpoint.save()
            else:
                checkpoint.complete()
        finally:
            for signum, handler in handlers.items():
                signal.signal(signum, handler)
            if checkpoint.journal is not None:
                checkpoint.journal.close()
        return _Outcome(
            dict(sorted(updates.items())),
            dict(sorted(audits.items())),
            fetcher.stats,
            received[0] if interrupted else None,
            TakeCounts(
                prober.observed_takes,
                prober.observed_refetched,
                prober.probed_takes,
                prober.fetches_saved,
            )
            if archive is not None
            else None,
        )


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _say(line: str) -> None:
    """A line on stderr from a signal handler: one unbuffered write, never a re-entered
    buffer."""
    os.write(2, (line + "\n").encode("utf-8", "replace"))


async def _save_every(checkpoint: Checkpoint, seconds: float) -> None:
    while True:
        await asyncio.sleep(seconds)
        if checkpoint.unsaved:
            checkpoint.save()


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
    *,
    resumed: int = 0,
    replayed: int = 0,
    archive: Archive | None = None,
    takes: TakeCounts | None = None,
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
            f"{u.domain}: {_count(count, 'pattern')} left undecided, asked again on the next "
            f"run: {cause.message}"
            for u in updates
            for cause, count in sorted(Counter(u.undecided.values()).items())
        ),
        *_audit_summary(audits),
        *([_resumed(resumed, replayed)] if resumed or replayed else []),
        *(_archive_summary(archive, takes) if archive is not None else []),
        f"time: {seconds:.1f}s",
        f"maps written to {path}",
    ]
    out.write("\n".join(lines) + "\n")


def _archive_summary(archive: Archive, takes: TakeCounts | None) -> list[str]:
    """What the archives held, how much of the run they answered, and their bad input."""
    lines = [
        f"archives: {_count(archive.files, 'file')} read, {archive.records} records, "
        f"{len(archive.pages)} pages usable as evidence, {archive.unjudgeable} not "
        "(429, 5xx, interstitials, shells: fetched if needed)"
    ]
    if takes is not None:
        lines.append(
            f"pages compared: {takes.observed} from the archives "
            f"({takes.refetched} of them fetched again to judge a difference), "
            f"{takes.probed} probed; fetches saved: {takes.saved}"
        )
    if archive.bad:
        lines.append(
            "archives' bad input (not used, nothing else lost): "
            + ", ".join(f"{kind}: {n}" for kind, n in _by_count(archive.bad))
        )
    return lines


def _resumed(domains: int, replayed: int) -> str:
    """``resumed: 2 domains done by the interrupted run, not fetched again; 57 fetches
    replayed from the journal, not made again``"""
    said = []
    if domains or not replayed:
        said.append(f"{_count(domains, 'domain')} done by the interrupted run, not fetched again")
    if replayed:
        said.append(f"{_fetches(replayed)} replayed from the journal, not made again")
    return "resumed: " + "; ".join(said)


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
        *([_robots_unanswered(stats)] if stats.robots_unanswered else []),
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
