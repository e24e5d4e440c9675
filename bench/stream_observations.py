"""The stream with a crawl sent as observations: how much of the second pass is learned,
at what cost in probe fetches, with no observations and with a crawl of a share of the
distinct URLs, both measured in one run.

    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 .venv/bin/python -m bench.stream_observations \
        [--family tuning] [--sites 4] [--urls-per-site 600] [--share 0.3] [--rate 250] \
        [--quiet 45] [--seed 7]

Each run serves the simulated web on loopback, creates topics of its own, and sends to
``miqps.observations`` the pages of a crawl that fetched a random share of the distinct
URLs once each (redirects followed, each page reduced by
:func:`miqps.observations.observation_record`, as the Scrapy add-on sends them; none for
the baseline). It then starts one ``miqps worker`` (canonicalizer and probing agents),
waits until it holds the observed pages, and streams the URL corpus twice, as
``testkit.demo`` does, waiting after the first pass until map updates have been quiet for
``--quiet`` seconds. For each pass it prints the share of URLs with a query that were
``learned`` when they passed, the distinct canonical URLs against the raw ones (and the
ideal, from the simulated web's ground truth), and false merges (canonical URLs that stand
for two different pages); then the probe fetches counted at the simulated web's server
(the crawl's own fetches not counted) and how many of them fetched a URL again, the pages
observed and fetched that the map updates report (each learning run counted once), the
first takes served by pages the worker's earlier learning runs fetched (its
``miqps_recalled_takes_total``), and the patterns whose URLs stayed provisional in the
second pass. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from prometheus_client.parser import text_string_to_metric_families

from simweb.corpus import CorpusURL, generate_corpus
from simweb.server import SimWeb
from simweb.sites import FAMILIES, Site, build_sites
from streams.kafka.admin import ensure_topics
from streams.settings import LearningPolicy, Settings
from testkit.localbroker import free_port
from testkit.observations import crawl_observations
from testkit.quality import PassFigures, stream_pass_figures
from testkit.tools import TopicReader, WorkerProcess, delete_topics, isolated_settings, produce


@dataclass
class RunFigures:
    share: float
    observations_sent: int
    observations_kept: int
    passes: list[PassFigures]
    fetches: int
    repeated: int
    """Probe fetches of a URL the run had fetched already: refetches that learn noise or
    confirm a change, and first pages of samples an earlier learning run fetched too."""
    observed: int
    recalled: int
    """First takes of learning runs served by pages the worker fetched in earlier runs."""
    update_fetches: int
    provisional: list[tuple[str, int]]
    restored: list[str]
    """Each parameter an audit restored (a drop a newly audited item refuted): domain,
    name, in how many patterns, and whether before the second pass began."""
    merged: list[str]
    """Each output of a canonical URL that stands for two pages, and the map updates of its
    pattern."""


def metric(port: int, name: str, **labels: str) -> float | None:
    """The sum of the samples of ``name`` with ``labels`` on the worker's /metrics; None
    while the worker does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return None
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
        and all(sample.labels.get(key) == wanted for key, wanted in labels.items())
    )


def stream_pass(settings: Settings, corpus: Sequence[CorpusURL], number: int, rate: float) -> int:
    values = [orjson.dumps({"url": item.url, "pass": number}) for item in corpus]
    chunk = max(1, int(rate / 10))
    begin = time.monotonic()
    for start in range(0, len(values), chunk):
        produce(settings, settings.topics.raw, values[start : start + chunk])
        ahead = begin + (start + chunk) / rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
    return len(values)


def merge_lines(
    number: int,
    docs: list[dict[str, Any]],
    merged: set[str],
    truth: dict[str, str],
    audits: list[dict[str, Any]],
) -> list[str]:
    """The outputs of pass ``number`` whose canonical URL is in ``merged``, each with its
    page and decision, then the accepted map updates of their patterns."""
    lines: list[str] = []
    patterns = set()
    for doc in docs:
        if doc["canonical_url"] in merged:
            patterns.add((doc["domain"], doc["pattern"]))
            lines.append(
                f"pass {number}: {doc['url']} -> {doc['canonical_url']} (page "
                f"{truth.get(doc['url'], '?')}; {doc['status']}, map v{doc['map_version']}, "
                f"kept {doc['kept']}, dropped {doc['dropped']})"
            )
    for audit in audits:
        if (audit["domain"], audit["pattern"]) in patterns and audit["accepted"]:
            lines.append(
                f"  update {audit['domain']} {audit['pattern']} v{audit['version_after']} "
                f"({audit['reason']}; {audit['request_reason']}): kept {audit['kept_after']}, "
                f"dropped {audit['dropped_after']}, observed {audit.get('observed', 0)}, "
                f"evidence {orjson.dumps(audit.get('evidence')).decode()[:600]}"
            )
    return lines


def run(
    args: argparse.Namespace,
    base: Settings,
    sites: Sequence[Site],
    corpus: Sequence[CorpusURL],
    share: float,
    state: Path,
) -> RunFigures:
    distinct = sorted({item.url for item in corpus})
    crawled = random.Random(f"{args.seed}:{share}").sample(distinct, round(share * len(distinct)))
    truth = {item.url: item.content_key for item in corpus}
    with SimWeb(sites, seed=args.seed, rate_limit_per_second=0) as web:
        settings = isolated_settings(
            base,
            "bench-obs",
            state / "worker",
            proxy=web.proxy_url,
            probe_rate_per_host=args.probe_rate,
            partitions=args.partitions,
            metrics_port=free_port(),
            policy=LearningPolicy(rare_after=args.rare_after),
        )
        ensure_topics(settings)
        worker = WorkerProcess(settings, "canonicalize,probe", state / "worker.log")
        outputs = updates = None
        try:
            observations = crawl_observations(web, crawled)
            if observations:
                produce(
                    settings,
                    settings.topics.observations,
                    [value for _, value in observations],
                    [key for key, _ in observations],
                )
            web.reset_counters()
            worker.start()
            port = settings.metrics_port or 0
            deadline = time.monotonic() + args.timeout
            kept = 0.0
            while True:
                if not worker.alive():
                    raise RuntimeError(f"the worker exited: {worker.log_digest()}")
                kept = metric(port, "miqps_observations_total", outcome="kept") or 0.0
                read = metric(port, "miqps_observations_total")
                if read is not None and read >= len(observations):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("the worker did not read the observations in time")
                time.sleep(0.5)
            print(
                f"  {share:.0%}: {len(observations)} observations sent, {kept:.0f} kept "
                f"as evidence; streaming {len(corpus)} URLs x 2 at {args.rate:g}/s",
                flush=True,
            )
            outputs = TopicReader(settings, settings.topics.canonical)
            updates = TopicReader(settings, settings.topics.map_updates)
            produced = 0
            second_pass = ""
            for number in (1, 2):
                if number == 2:
                    second_pass = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                sending = threading.Thread(
                    target=stream_pass, args=(settings, corpus, number, args.rate), daemon=True
                )
                started = time.monotonic()
                sending.start()
                produced += len(corpus)
                while sending.is_alive() or len(outputs.records) < produced:
                    outputs.poll(0.5)
                    updates.poll(0.05)
                    if not worker.alive():
                        raise RuntimeError(f"the worker exited: {worker.log_digest()}")
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"pass {number} did not come out in time")
                sending.join()
                if number == 1:
                    quiet_since, seen = time.monotonic(), len(updates.records)
                    while time.monotonic() - quiet_since < args.quiet:
                        updates.poll(1.0)
                        if len(updates.records) != seen:
                            seen, quiet_since = len(updates.records), time.monotonic()
                        if time.monotonic() > deadline:
                            break
                print(
                    f"  {share:.0%}: pass {number} out after {time.monotonic() - started:.0f} s"
                    f"{' and the quiet wait' if number == 1 else ''}; "
                    f"{len(updates.records)} map updates, {web.requests_total()} fetches",
                    flush=True,
                )
            updates.poll(1.0)
            fetches = web.requests_total()
            repeated = web.repeated_requests()
            recalled = metric(port, "miqps_recalled_takes_total") or 0.0
        finally:
            worker.stop()
            for reader in (outputs, updates):
                if reader is not None:
                    reader.close()
            delete_topics(settings)
    docs = [orjson.loads(value) for _, value, _ in outputs.records if value]
    by_pass: defaultdict[int, list[dict[str, Any]]] = defaultdict(list)
    for doc in docs:
        by_pass[(doc["meta"] or {}).get("pass", 0)].append(doc)
    audits = [orjson.loads(value) for _, value, _ in updates.records if value]
    passes, merged = [], []
    for number in (1, 2):
        figures, names = stream_pass_figures(by_pass[number], truth)
        passes.append(figures)
        merged.extend(merge_lines(number, by_pass[number], set(names), truth, audits))
    provisional: Counter[str] = Counter(
        f"{doc['domain']} {doc['pattern']}"
        for doc in by_pass[2]
        if (doc["kept"] or doc["dropped"]) and doc["status"] != "learned"
    )
    # A learning run writes one record per pattern, each with the run's counts.
    runs = {
        (audit["domain"], audit["at"], audit["version_before"]): {
            "observed": int(audit.get("observed", 0)),
            "fetches": int(audit.get("fetches", 0)),
        }
        for audit in audits
    }
    restores: Counter[tuple[str, str, bool]] = Counter()
    for audit in audits:
        if audit["accepted"] and audit["request_reason"] == "audit":
            for name in set(audit["kept_after"]) - set(audit["kept_before"] or ()):
                restores[audit["domain"], name, audit["at"] < second_pass] += 1
    return RunFigures(
        share=share,
        observations_sent=len(observations),
        observations_kept=int(kept),
        passes=passes,
        fetches=fetches,
        repeated=repeated,
        observed=sum(run["observed"] for run in runs.values()),
        recalled=int(recalled),
        update_fetches=sum(run["fetches"] for run in runs.values()),
        provisional=provisional.most_common(args.show),
        restored=[
            f"{domain} {name}: {count} patterns, "
            f"{'before' if before else 'after'} the second pass began"
            for (domain, name, before), count in sorted(restores.items())
        ],
        merged=merged,
    )


def report(runs: Sequence[RunFigures], distinct: int) -> None:
    print(
        f"\n{'observed':>8} {'pass':>4} {'URLs':>6} {'learned*':>9} {'raw -> canonical':>17} "
        f"{'ratio':>6} {'ideal':>6} {'false merges':>13}"
    )
    for figures in runs:
        for number, row in enumerate(figures.passes, 1):
            print(
                f"{figures.share:>8.0%} {number:>4} {row.urls:>6} {row.learned:>9.1%} "
                f"{f'{row.raw} -> {row.canonical}':>17} {row.canonical / max(row.raw, 1):>6.3f} "
                f"{row.ideal / max(row.raw, 1):>6.3f} {row.false_merges:>13}"
            )
    print("  * share of the URLs with a query whose pattern was learned when they passed")
    baseline = runs[0].fetches or 1
    print(
        f"\n{'observed':>8} {'sent':>6} {'kept':>6} {'probe fetches':>14} {'per URL':>8} "
        f"{'vs 0%':>6} {'refetches':>10} {'pages observed':>15} {'recalled':>9} "
        f"{'fetches in updates':>19}"
    )
    for figures in runs:
        print(
            f"{figures.share:>8.0%} {figures.observations_sent:>6} "
            f"{figures.observations_kept:>6} {figures.fetches:>14} "
            f"{figures.fetches / max(distinct, 1):>8.3f} {figures.fetches / baseline:>6.2f} "
            f"{figures.repeated:>10} {figures.observed:>15} {figures.recalled:>9} "
            f"{figures.update_fetches:>19}"
        )
    for figures in runs:
        if figures.provisional:
            print(f"\nprovisional in the second pass, {figures.share:.0%} observed (URLs):")
            for name, count in figures.provisional:
                print(f"  {count:>5}  {name}")
        if figures.restored:
            print(f"\nrestored by audits, {figures.share:.0%} observed:")
            for line in figures.restored:
                print(f"  {line}")
        if figures.merged:
            print(f"\nfalse merges, {figures.share:.0%} observed:")
            for line in figures.merged:
                print(f"  {line}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.stream_observations",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--family", choices=FAMILIES, default="tuning")
    parser.add_argument("--sites", type=int, default=4)
    parser.add_argument("--urls-per-site", type=int, default=600)
    parser.add_argument("--share", type=float, default=0.3, help="share of distinct URLs crawled")
    parser.add_argument(
        "--no-baseline", action="store_true", help="skip the run without observations"
    )
    parser.add_argument("--rate", type=float, default=250.0, help="URLs per second streamed")
    parser.add_argument("--probe-rate", type=float, default=40.0, help="fetches/s per host")
    parser.add_argument("--rare-after", type=float, default=20.0)
    parser.add_argument(
        "--quiet", type=float, default=45.0, help="seconds without map updates after pass 1"
    )
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds for each run")
    parser.add_argument("--show", type=int, default=15, help="provisional patterns listed")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    base = Settings.from_env()
    sites = build_sites(args.family, args.sites, seed=args.seed)
    corpus = generate_corpus(sites, args.urls_per_site, seed=args.seed)
    distinct = len({item.url for item in corpus})
    print(
        f"{len(corpus)} URLs ({distinct} distinct) on {args.sites} {args.family} sites; "
        f"broker {base.bootstrap_servers}",
        flush=True,
    )
    runs = []
    with tempfile.TemporaryDirectory(prefix="miqps-bench-obs-") as temporary:
        for share in (args.share,) if args.no_baseline else (0.0, args.share):
            state = Path(temporary) / f"share-{share:g}"
            runs.append(run(args, base, sites, corpus, share, state))
    report(runs, distinct)
    return 0


if __name__ == "__main__":
    sys.exit(main())
