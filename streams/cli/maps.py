"""``miqps maps``: print the current maps from the compacted maps topic; and an operator's
map commands, ``miqps maps history|rollback|freeze|unfreeze|publish``.

Each change is published as a new version through :func:`streams.maps.history.publish_map`,
the path the probing workers use, so every worker applies it live. Exit codes of the
operator's commands: 0 done, 1 unknown domain or version (or a maps file that cannot be
read), 2 bad arguments, 3 Kafka unreachable or a topic missing.

Importing it needs no Kafka package: :func:`run` imports them.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from miqps.history import rollback, with_frozen
from miqps.maps import DomainMap, InvalidMap, utc_now
from streams.cli.common import add_common_options, extra_missing, settings_from
from streams.settings import Settings, Topics

if TYPE_CHECKING:
    from miqps.mapstore import MapStore
    from streams.maps.history import History, Publication
    from streams.messages import MapUpdateRecord, ProducedBy

NAME = "maps"
HELP = (
    "print current maps from the compacted topic; 'maps history|rollback|"
    "freeze|unfreeze|publish': an operator's map commands"
)
OWN_PARSER = True

OPERATOR_COMMANDS = ("history", "rollback", "freeze", "unfreeze", "publish")
PUBLISH_SCAN_DOMAINS = 50_000
"""Domains of a maps file whose current versions one read of the topics looks up."""
PUBLISH_BATCH_DOMAINS = 500
"""Domains published per transaction (exactly once) or per flush (at least once)."""
NOT_FOUND = 1
KAFKA_FAILED = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("args", nargs=argparse.REMAINDER)


def run(args: argparse.Namespace) -> int:
    if extra_missing(NAME, "confluent_kafka", "faust"):
        return 2
    if args.args[:1] and args.args[0] in OPERATOR_COMMANDS:
        return run_operator(args.args)
    return print_maps(args.args)


def maps_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="miqps maps",
        description="Print the current MIQPS maps from the compacted maps topic, one JSON "
        "map per line (the format of 'miqps learn').",
        epilog="Operators' commands: 'miqps maps history|rollback|freeze|unfreeze|publish --help'.",
    )
    parser.add_argument("domain", nargs="?", help="only this domain")
    add_common_options(parser)
    parser.add_argument("--topic", help="the maps topic (default: MIQPS_TOPIC_MAPS or miqps.maps)")
    parser.add_argument(
        "--timeout", type=float, default=30.0, help="seconds to wait for Kafka (default 30)"
    )
    return parser


def print_maps(argv: Sequence[str]) -> int:
    args = maps_parser().parse_args(list(argv))
    settings = settings_from(args)
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


class Failed(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def operator_parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="miqps maps",
        description="An operator's map commands. Every change is published as a new "
        "version, through the path the workers publish by, and applied live.",
    )
    commands = top.add_subparsers(dest="command", required=True)
    history = commands.add_parser("history", help="list the kept versions and what changed")
    history.add_argument("domain")
    history.add_argument(
        "--json", action="store_true", help="one JSON object per version instead of text"
    )
    back = commands.add_parser("rollback", help="publish an old version's content as a new version")
    back.add_argument("domain")
    back.add_argument(
        "--to",
        type=int,
        required=True,
        metavar="VERSION",
        help="the version to bring back (see 'miqps maps history DOMAIN')",
    )
    back.add_argument(
        "--freeze", action="store_true", help="also freeze the domain: learning leaves it as it is"
    )
    freeze = commands.add_parser("freeze", help="keep learning from changing the map")
    freeze.add_argument("domain")
    unfreeze = commands.add_parser("unfreeze", help="let learning change the map again")
    unfreeze.add_argument("domain")
    publish = commands.add_parser(
        "publish",
        help="publish every map of a maps file (as "
        "'miqps learn' writes it) as each domain's next version",
    )
    publish.add_argument("file", type=Path)
    for command in (back, freeze, unfreeze, publish):
        command.add_argument("--reason", default="", help="a note kept with the version")
    for command in (history, back, freeze, unfreeze, publish):
        add_common_options(command)
        command.add_argument(
            "--timeout", type=float, default=30.0, help="seconds to wait for Kafka (default 30)"
        )
    return top


def run_operator(argv: Sequence[str]) -> int:
    from confluent_kafka import KafkaException

    from streams.kafka.clients import DeliveryFailed, ProduceBlocked
    from streams.maps.history import UnknownDomain

    args = operator_parser().parse_args(list(argv))
    settings = settings_from(args)
    prog = f"miqps maps {args.command}"
    try:
        if args.command == "history":
            return show_history(settings, _domain(args.domain), args.json, args.timeout)
        if args.command == "publish":
            return publish_file(settings, args.file, args.reason, args.timeout)
        return change(settings, args)
    except Failed as failure:
        print(f"{prog}: {failure}", file=sys.stderr)
        return failure.code
    except UnknownDomain as error:
        print(
            f"{prog}: unknown domain {error}: no map and no kept version on "
            f"{settings.topics.maps} or {settings.topics.map_history}",
            file=sys.stderr,
        )
        return NOT_FOUND
    except (KafkaException, RuntimeError, TimeoutError, DeliveryFailed, ProduceBlocked) as error:
        print(f"{prog}: Kafka at {settings.bootstrap_servers}: {error}", file=sys.stderr)
        return KAFKA_FAILED


def _domain(text: str) -> str:
    return text.strip().lower().rstrip(".")


def show_history(settings: Settings, domain: str, as_json: bool, timeout: float) -> int:
    from streams.maps.history import history_rows, read_history

    history = read_history(settings, domain, timeout)
    _warn(history)
    out = sys.stdout
    for row in history_rows(history):
        if as_json:
            out.write(orjson.dumps(row).decode() + "\n")
            continue
        flags = " frozen" if row["frozen"] else ""
        note = f"  ({row['note']})" if row["note"] else ""
        out.write(
            f"v{row['version']}  {row['at']}  {row['produced_by']}{flags}  "
            f"{row['patterns']} patterns{note}\n"
        )
        if row["changes"] is None:
            out.write(
                "    (the version before it is not in the history: expired, or "
                "published before the history was kept)\n"
            )
        for line in row["changes"] or ():
            out.write(f"    {line['text']}\n")
    if history.current is not None and history.current.version > (
        history.versions[-1].version if history.versions else 0
    ):
        out.write(
            f"v{history.current.version} is live but not in the history (published "
            "before the history topic existed, or not yet delivered)\n"
        )
    out.flush()
    return 0


def _warn(history: History) -> None:
    for reason in history.unreadable:
        print(
            f"miqps maps: skipped an unreadable record of {history.domain}: {reason}",
            file=sys.stderr,
        )
    for version in sorted(set(history.republished)):
        print(
            f"miqps maps: version {version} of {history.domain} was published more than "
            "once; the last one is shown",
            file=sys.stderr,
        )


def change(settings: Settings, args: argparse.Namespace) -> int:
    """rollback, freeze or unfreeze: the next version of the domain's map."""
    from streams.maps.history import operator_audits, read_history

    domain = _domain(args.domain)
    history = read_history(settings, domain, args.timeout)
    _warn(history)
    current = history.newest()
    produced_by: ProducedBy
    audits: list[MapUpdateRecord] = []
    if args.command == "rollback":
        target = history.version(args.to)
        if target is None:
            kept = ", ".join(str(record.version) for record in history.versions) or "none"
            raise Failed(NOT_FOUND, f"{domain} has no kept version {args.to} (kept: {kept})")
        candidate, verdict = rollback(
            current, target.domain_map(), freeze=args.freeze, max_flip_share=settings.max_flip_share
        )
        audits = operator_audits(current, candidate, verdict, "rollback")
        produced_by, note = "rollback", f"rollback to version {args.to}"
    else:
        produced_by = "freeze" if args.command == "freeze" else "unfreeze"
        if current.frozen == (produced_by == "freeze"):
            state = "frozen" if current.frozen else "not frozen"
            print(f"{domain}: version {current.version} is {state} already; nothing published")
            return 0
        candidate, note = with_frozen(current, produced_by == "freeze"), produced_by
    if args.reason:
        note = f"{note}: {args.reason}"
    _publish(settings, [(candidate, produced_by, note)], audits, args.timeout)
    state = "frozen" if candidate.frozen else "not frozen"
    print(
        f"{domain}: version {candidate.version} published ({note}; {state}; "
        f"{len(audits)} patterns changed)"
    )
    return 0


def publish_file(settings: Settings, path: Path, reason: str, timeout: float) -> int:
    """Every map of a maps file as its domain's next version, after the current one (a
    frozen domain stays frozen), in domain order.

    The file is checked whole first, as ``miqps canonicalize`` checks it, into a temporary
    index on disk, so memory does not grow with the file. The current versions are read
    from the topics once per :data:`PUBLISH_SCAN_DOMAINS` domains, and the maps are
    published :data:`PUBLISH_BATCH_DOMAINS` at a time: under exactly once each batch is one
    transaction, so a failure leaves whole batches published and says how far it got."""
    import tempfile

    from miqps.mapstore import index_maps_file
    from streams.maps.history import Publication, current_versions

    note = f"{path.name}: {reason}" if reason else path.name
    with tempfile.TemporaryDirectory(prefix="miqps-publish-") as folder:
        try:
            store = index_maps_file(path, Path(folder) / "index")
        except InvalidMap as error:
            raise Failed(NOT_FOUND, str(error)) from None
        except OSError as error:
            raise Failed(NOT_FOUND, f"cannot read {path}: {error.strerror}") from None
        published = 0
        try:
            with _RecordWriter(settings, timeout) as writer:
                domains = store.domains()
                while chunk := list(islice(domains, PUBLISH_SCAN_DOMAINS)):
                    current = current_versions(settings, set(chunk), timeout)
                    for at in range(0, len(chunk), PUBLISH_BATCH_DOMAINS):
                        batch = chunk[at : at + PUBLISH_BATCH_DOMAINS]
                        publication = Publication()
                        versions = [
                            _next_version(
                                store,
                                settings.topics,
                                domain,
                                current.get(domain, (0, False)),
                                note,
                                publication,
                            )
                            for domain in batch
                        ]
                        writer.write(publication)
                        for domain, version in zip(batch, versions, strict=True):
                            print(f"{domain}: version {version} published")
                        published += len(batch)
        except BaseException:
            if published:
                print(
                    f"miqps maps publish: stopped after {published} maps published, in "
                    "domain order; publishing the file again gives those a further version",
                    file=sys.stderr,
                )
            raise
        finally:
            store.close()
    return 0


def _next_version(
    store: MapStore,
    topics: Topics,
    domain: str,
    current: tuple[int, bool],
    note: str,
    publication: Publication,
) -> int:
    """Add to ``publication`` the records that publish the map of ``domain`` in ``store``
    as the version after ``current`` (its version, and whether it is frozen: a frozen
    domain stays frozen), as :func:`~streams.maps.history.publish_map` sends them; return
    that version. The document is written as :meth:`DomainMap.to_json` writes it, without
    decoding its patterns."""
    from streams.messages import MapVersion

    stored = store.document(domain)
    assert stored is not None  # the index holds every domain it lists
    document = orjson.loads(stored)
    after, frozen = current
    at = utc_now()
    published = {
        "schema": document["schema"],
        "domain": domain,
        "version": after + 1,
        "updated_at": at,
        "patterns": document["patterns"],
    }
    if document.get("frozen") is True or frozen:
        published["frozen"] = True
    key = domain.encode()
    history = MapVersion(domain, after + 1, "publish", note, at, published)
    publication.records.append((topics.map_history, key, history.to_bytes()))
    publication.records.append((topics.maps, key, orjson.dumps(published)))
    return after + 1


class _RecordWriter:
    """Writes batches of records: each in one transaction under exactly once, else
    produced and flushed (every delivery checked)."""

    def __init__(self, settings: Settings, timeout: float) -> None:
        from streams.maps.history import ProducerSink, transactional_writer

        self._timeout = timeout
        self._writer = transactional_writer(settings, "operator", timeout)
        self._sink = ProducerSink(settings) if self._writer is None else None

    def write(self, publication: Publication) -> None:
        from streams.maps.history import write

        if self._writer is not None:
            self._writer.write(publication.records)
            return
        assert self._sink is not None
        asyncio.run(write(publication, self._sink, None))
        self._sink.flush(self._timeout)

    def __enter__(self) -> _RecordWriter:
        return self

    def __exit__(self, *_: object) -> None:
        if self._writer is not None:
            self._writer.close()


def _publish(
    settings: Settings,
    versions: list[tuple[DomainMap, ProducedBy, str]],
    audits: list[MapUpdateRecord],
    timeout: float,
) -> None:
    from streams.maps.history import (
        ProducerSink,
        Publication,
        publish_map,
        transactional_writer,
        write,
    )

    publication = Publication()

    async def gather() -> None:
        for domain_map, produced_by, note in versions:
            await publish_map(publication, settings.topics, domain_map, produced_by, note)
        for audit in audits:
            await publication.send(
                settings.topics.map_updates, audit.domain.encode(), audit.to_bytes()
            )

    asyncio.run(gather())
    writer = transactional_writer(settings, "operator", timeout)
    if writer is not None:
        try:
            writer.write(publication.records)
        finally:
            writer.close()
        return
    sink = ProducerSink(settings)
    asyncio.run(write(publication, sink, None))
    sink.flush(timeout)
