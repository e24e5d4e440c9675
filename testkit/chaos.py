"""Faults on a replicated cluster: numbered inputs flowing at a steady rate through worker
processes while a broker or a worker is killed, or workers join and leave; what came out,
what did not, what came out twice, and how long the outputs took to flow again. For the
cluster tests and the chaos benchmark.

The rig runs the simulated web and worker subprocesses on a :class:`LocalBroker` cluster;
every topic is replicated (``MIQPS_REPLICATION_FACTOR``) and the workers play their part
as a supervisor would restart them.
"""

from __future__ import annotations

import itertools
import signal
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType

import orjson
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from simweb.corpus import generate_corpus
from simweb.server import SimWeb
from simweb.sites import Site, build_sites
from streams.kafka.admin import consumer_config, ensure_topics, producer_config
from streams.kafka.clients import read_compacted
from streams.settings import LearningPolicy, Settings
from testkit.localbroker import LocalBroker
from testkit.tools import WorkerProcess, delete_topics, isolated_settings

CANONICALIZE = "canonicalize"
PROBE = "probe"
STOP_TIMEOUT = 10.0
# The rig's own clients see the faults too: their connection errors would only be noise.
QUIET = {"log_level": 0}
JOINED = "Joined group"  # Faust's consumer, in every worker's log


class InputStream(threading.Thread):
    """Produces ``{"url", "seq"}`` inputs at ``rate`` per second until stopped, cycling
    through ``urls``; remembers when each was produced and whether the cluster acknowledged
    it (an input the cluster never took is not the workers' to lose)."""

    def __init__(self, settings: Settings, urls: list[str], rate: float) -> None:
        super().__init__(name="chaos-inputs", daemon=True)
        self.topic = settings.topics.raw
        self.urls = urls
        self.rate = rate
        self.producer = Producer(
            producer_config(settings, **QUIET, **{"message.timeout.ms": 300_000})
        )
        self.produced_at: dict[int, float] = {}
        self.acknowledged: set[int] = set()
        self.refused: Counter[str] = Counter()
        self.refused_seqs: set[int] = set()
        self._stopping = threading.Event()

    def _on_delivery(self, error: KafkaError | None, message: Message) -> None:
        seq = orjson.loads(message.value() or b"{}")["seq"]
        if error is None:
            self.acknowledged.add(seq)
        else:
            self.refused[error.str()] += 1
            self.refused_seqs.add(seq)

    def run(self) -> None:
        tick = 0.1
        began = time.monotonic()
        for seq in itertools.count():
            if self._stopping.is_set():
                break
            due = began + seq / self.rate
            wait = due - time.monotonic()
            if wait > 0:
                self.producer.poll(min(wait, tick))
                if self._stopping.is_set():
                    break
            url = self.urls[seq % len(self.urls)]
            while True:
                try:
                    self.producer.produce(
                        self.topic,
                        orjson.dumps({"url": url, "seq": seq}),
                        on_delivery=self._on_delivery,
                    )
                    break
                except BufferError:
                    self.producer.poll(tick)
            self.produced_at[seq] = time.monotonic()
            self.producer.poll(0)

    def stop(self, flush_timeout: float = 300.0) -> None:
        """Stop producing and wait until every input is acknowledged or refused."""
        self._stopping.set()
        self.join(30)
        left = self.producer.flush(flush_timeout)
        if left:
            self.refused[f"still unacknowledged after {flush_timeout:g}s"] += left

    @property
    def count(self) -> int:
        return len(self.produced_at)


class OutputLedger(threading.Thread):
    """Reads every partition of the canonical topic from the beginning, in a thread, as a
    ``read_committed`` consumer: how many outputs each input ``seq`` got, and when the
    first of them was read."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(name="chaos-outputs", daemon=True)
        topic = settings.topics.canonical
        self.consumer = Consumer(
            consumer_config(
                settings,
                f"miqps-chaos-{uuid.uuid4().hex}",
                **QUIET,
                **{
                    "enable.auto.commit": False,
                    "fetch.wait.max.ms": 100,
                    "isolation.level": "read_committed",
                },
            )
        )
        partitions = self.consumer.list_topics(topic, timeout=30).topics[topic].partitions
        self.consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        self.first_read: dict[int, float] = {}
        self.outputs: Counter[int] = Counter()
        self._stopping = threading.Event()

    def run(self) -> None:
        try:
            while not self._stopping.is_set():
                for message in self.consumer.consume(5000, 0.2):
                    value = message.value()
                    if message.error() is not None or value is None:
                        continue
                    seq = orjson.loads(value)["meta"]["seq"]
                    self.outputs[seq] += 1
                    self.first_read.setdefault(seq, time.monotonic())
        finally:
            self.consumer.close()

    def stop(self) -> None:
        self._stopping.set()
        self.join(30)

    def missing(self, wanted: set[int]) -> set[int]:
        return {seq for seq in wanted if seq not in self.first_read}

    def wait_for(self, wanted: set[int], timeout: float) -> set[int]:
        """Wait until every input of ``wanted`` has an output; return those still missing."""
        deadline = time.monotonic() + timeout
        while (missing := self.missing(wanted)) and time.monotonic() < deadline:
            time.sleep(0.5)
        return missing


@dataclass(frozen=True, slots=True)
class ChaosReport:
    scenario: str
    inputs: int
    missing: int
    duplicates: int
    recovery: float | None
    worst_latency: float
    maps_converged: bool
    refused_inputs: int = 0
    note: str = ""
    exited: tuple[str, ...] = ()
    """Workers of the pipeline that exited by themselves (not killed by the scenario)."""

    @property
    def duplicate_share(self) -> float:
        return self.duplicates / self.inputs if self.inputs else 0.0

    def line(self) -> str:
        recovery = "n/a" if self.recovery is None else f"{self.recovery:.1f}s"
        refused = (
            f"; {self.refused_inputs} inputs refused by the cluster" if self.refused_inputs else ""
        )
        note = f"; {self.note}" if self.note else ""
        exited = f"; exited by themselves: {', '.join(self.exited)}" if self.exited else ""
        return (
            f"{self.scenario}: {self.inputs} inputs, {self.missing} missing, "
            f"{self.duplicates} duplicates ({self.duplicate_share:.2%}), recovery "
            f"{recovery}, worst input-to-output {self.worst_latency:.1f}s, maps "
            f"{'converged' if self.maps_converged else 'NOT converged'}{refused}{note}{exited}"
        )


def recovery_time(
    produced_at: dict[int, float], first_read: dict[int, float], fault_at: float
) -> float | None:
    """From ``fault_at`` until every input produced before it has an output and an input
    produced after it has one too (None if either never happened)."""
    before = [seq for seq, at in produced_at.items() if at <= fault_at]
    after = [
        first_read[seq] for seq, at in produced_at.items() if at > fault_at and seq in first_read
    ]
    if not after or any(seq not in first_read for seq in before):
        return None
    backlog_out = max((first_read[seq] for seq in before), default=fault_at)
    return max(backlog_out, min(after)) - fault_at


class ChaosRig:
    """The simulated web, replicated topics of their own on ``cluster``, worker processes
    by name (processing ``guarantee``: ``MIQPS_PROCESSING_GUARANTEE``), an input stream
    and an output ledger."""

    def __init__(
        self,
        cluster: LocalBroker,
        workdir: Path,
        label: str,
        *,
        partitions: int = 6,
        rate: float = 200.0,
        sites: int = 3,
        urls_per_site: int = 250,
        guarantee: str = "at_least_once",
    ) -> None:
        self.cluster = cluster
        self.workdir = workdir
        self.sites: list[Site] = build_sites("tuning", sites, 0)
        self.web = SimWeb(self.sites, seed=0, rate_limit_per_second=0, flaky_rate=0.0)
        self.urls = [item.url for item in generate_corpus(self.sites, urls_per_site, 1)]
        self.rate = rate
        self.partitions = partitions
        self.label = label
        self.guarantee = guarantee
        self.settings: Settings | None = None
        self.workers: dict[str, WorkerProcess] = {}
        self.leaving: list[WorkerProcess] = []
        self.stream: InputStream | None = None
        self.ledger: OutputLedger | None = None
        self._worker_starts = itertools.count()

    def __enter__(self) -> ChaosRig:
        self.web.__enter__()
        base = Settings.from_env({"KAFKA_BOOTSTRAP_SERVERS": self.cluster.bootstrap})
        self.settings = isolated_settings(
            base,
            self.label,
            self.workdir / "state",
            partitions=self.partitions,
            replication_factor=min(3, self.cluster.brokers),
            proxy=self.web.proxy_url,
            probe_rate_per_host=50.0,
            policy=LearningPolicy(rare_after=4.0, retry_after=60.0),
        ).with_overrides(processing_guarantee=self.guarantee)
        ensure_topics(self.settings)
        self.ledger = OutputLedger(self.settings)
        self.ledger.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.stream is not None and self.stream.is_alive():
            self.stream.stop(30)
        for worker in [*self.workers.values(), *self.leaving]:
            worker.kill()
        if self.ledger is not None:
            self.ledger.stop()
        if self.settings is not None:
            delete_topics(self.settings)
        self.web.__exit__(exc_type, exc, tb)

    @property
    def config(self) -> Settings:
        assert self.settings is not None, "the rig is not entered"
        return self.settings

    @property
    def outputs(self) -> OutputLedger:
        assert self.ledger is not None, "the rig is not entered"
        return self.ledger

    def start_worker(self, name: str, agents: str) -> WorkerProcess:
        """Start (or restart) worker ``name``; each start has a state directory of its own,
        as a fresh container would."""
        settings = self.config.with_overrides(
            state_dir=self.workdir / f"state-{name}-{next(self._worker_starts)}"
        )
        worker = WorkerProcess(
            settings,
            agents,
            self.workdir / f"{name}.log",
            {
                "MIQPS_REPLICATION_FACTOR": str(settings.replication_factor),
                "MIQPS_STOP_TIMEOUT": str(STOP_TIMEOUT),
            },
        )
        self.workers[name] = worker.start()
        return worker

    def kill_worker(self, name: str) -> None:
        """SIGKILL worker ``name``, as a crash would (its front process exits with it)."""
        self.workers[name].kill()

    def leave(self, name: str) -> None:
        """SIGTERM worker ``name`` without waiting: it leaves its groups as it stops."""
        worker = self.workers.pop(name)
        if worker.process is not None and worker.alive():
            worker.process.send_signal(signal.SIGTERM)
        self.leaving.append(worker)

    def start_pipeline(self, timeout: float) -> None:
        """Two canonicalizer workers (``c1``, ``c2``) and a probing one (``p1``), the input
        stream, and a wait until outputs flow."""
        for name, agents in (("c1", CANONICALIZE), ("c2", CANONICALIZE), ("p1", PROBE)):
            self.start_worker(name, agents)
        self.start_inputs()
        self.wait_flowing(timeout)

    def start_inputs(self) -> InputStream:
        self.stream = InputStream(self.config, self.urls, self.rate)
        self.stream.start()
        return self.stream

    def wait_flowing(self, timeout: float) -> None:
        """Until some input produced from now on has an output."""
        assert self.stream is not None
        since = self.stream.count
        deadline = time.monotonic() + timeout
        while not any(seq >= since for seq in list(self.outputs.first_read)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no outputs within {timeout:g}s; {self.worker_logs()}")
            time.sleep(0.5)

    def domains_with_maps(self) -> set[str]:
        domains = set()
        for _, value in read_compacted(self.config, self.config.topics.maps, timeout=60):
            if value is not None:
                domains.add(orjson.loads(value)["domain"])
        return domains

    def wait_maps(self, timeout: float) -> bool:
        """Until every site of the simulated web has a published map."""
        wanted = {site.host for site in self.sites}
        deadline = time.monotonic() + timeout
        while not wanted <= self.domains_with_maps():
            if time.monotonic() > deadline:
                return False
            time.sleep(2.0)
        return True

    def mark(self) -> int:
        """The number of the next input: a measurement window starts here."""
        assert self.stream is not None
        return self.stream.count

    def measure(
        self,
        scenario: str,
        since: int,
        fault_at: float | None,
        drain_timeout: float,
        maps_timeout: float,
    ) -> ChaosReport:
        """Inputs from number ``since`` to now, while the stream goes on: wait until the
        cluster has acknowledged or refused each, then until each acknowledged one has an
        output (up to ``drain_timeout``) and every site has a map (up to ``maps_timeout``)."""
        stream = self.stream
        assert stream is not None
        until = stream.count
        window = range(since, until)
        deadline = time.monotonic() + drain_timeout
        while (
            any(seq not in stream.acknowledged and seq not in stream.refused_seqs for seq in window)
            and time.monotonic() < deadline
        ):
            time.sleep(0.5)
        wanted = {seq for seq in window if seq in stream.acknowledged}
        missing = self.outputs.wait_for(wanted, max(1.0, deadline - time.monotonic()))
        converged = self.wait_maps(maps_timeout)
        time.sleep(1.0)  # late duplicates still in flight are counted too
        first_read = dict(self.outputs.first_read)
        outputs = Counter(self.outputs.outputs)
        produced_at = {seq: stream.produced_at[seq] for seq in wanted}
        latencies = [first_read[seq] - produced_at[seq] for seq in wanted if seq in first_read]
        return ChaosReport(
            scenario=scenario,
            inputs=len(wanted),
            missing=len(missing),
            duplicates=sum(outputs[seq] - 1 for seq in wanted if outputs[seq] > 1),
            recovery=None if fault_at is None else recovery_time(produced_at, first_read, fault_at),
            worst_latency=max(latencies, default=0.0),
            maps_converged=converged,
            refused_inputs=sum(1 for seq in window if seq in stream.refused_seqs),
            exited=self.exited(),
        )

    def exited(self) -> tuple[str, ...]:
        """The workers that exited by themselves, with their exit codes."""
        return tuple(
            f"{name} (exit code {worker.process.returncode})"
            for name, worker in self.workers.items()
            if worker.process is not None and not worker.alive() and not worker.killed
        )

    def worker_logs(self) -> str:
        """Each worker's state, warnings, errors and last lines, for a failed check; those
        that exited by themselves come last, where a report cut short still shows them."""
        workers = sorted(
            self.workers.values(),
            key=lambda worker: (
                worker.process is not None and not worker.alive() and not worker.killed
            ),
        )
        return "\n" + "\n".join(worker.log_digest() for worker in workers)


def leader_of(settings: Settings, topic: str, partition: int = 0) -> int:
    """The broker id that leads ``partition`` of ``topic``."""
    consumer = Consumer(consumer_config(settings, f"miqps-chaos-{uuid.uuid4().hex}", **QUIET))
    try:
        metadata = consumer.list_topics(topic, timeout=30).topics[topic]
        leader: int = metadata.partitions[partition].leader
        return leader
    finally:
        consumer.close()


@dataclass(frozen=True, slots=True)
class Timing:
    """How long a scenario lets the inputs flow: before the fault, while it lasts (until
    what was killed is restarted), after it; and how long outputs and maps may take."""

    before: float = 5.0
    down: float = 5.0
    after: float = 15.0
    drain: float = 240.0
    maps: float = 240.0


def kill_worker_scenario(rig: ChaosRig, name: str, agents: str, timing: Timing) -> ChaosReport:
    """kill -9 of worker ``name``, restarted ``timing.down`` seconds later."""
    rig.wait_flowing(timing.drain)
    since = rig.mark()
    time.sleep(timing.before)
    fault_at = time.monotonic()
    rig.kill_worker(name)
    time.sleep(timing.down)
    rig.start_worker(name, agents)
    time.sleep(timing.after)
    return rig.measure(f"kill -9 {agents} worker", since, fault_at, timing.drain, timing.maps)


def kill_broker_scenario(rig: ChaosRig, timing: Timing) -> ChaosReport:
    """kill -9 of the broker leading the first partition of the inputs, restarted
    ``timing.down`` seconds later."""
    rig.wait_flowing(timing.drain)
    since = rig.mark()
    time.sleep(timing.before)
    node = leader_of(rig.config, rig.config.topics.raw)
    fault_at = time.monotonic()
    rig.cluster.kill(node)
    try:
        time.sleep(timing.down)
    finally:
        rig.cluster.start_node(node)
    time.sleep(timing.after)
    return rig.measure(
        f"kill -9 broker {node} of {rig.cluster.brokers}",
        since,
        fault_at,
        timing.drain,
        timing.maps,
    )


def rebalance_storm(
    rig: ChaosRig, timing: Timing, every: float = 5.0, at_once: int = 3
) -> ChaosReport:
    """For ``timing.down`` seconds, a worker joins every ``every`` seconds (canonicalizer
    and probing in turn) and, beyond ``at_once`` of them, the oldest leaves (SIGTERM).
    There is no single fault to recover from: the worst input-to-output time tells how long
    outputs stalled."""
    rig.wait_flowing(timing.drain)
    since = rig.mark()
    time.sleep(timing.before)
    began = time.monotonic()
    storm: list[str] = []
    started: list[WorkerProcess] = []
    for turn in itertools.count():
        if time.monotonic() - began >= timing.down:
            break
        name = f"storm{turn}"
        started.append(rig.start_worker(name, CANONICALIZE if turn % 2 == 0 else PROBE))
        storm.append(name)
        if len(storm) > at_once:
            rig.leave(storm.pop(0))
        time.sleep(max(0.0, began + every * (turn + 1) - time.monotonic()))
    for name in storm:
        rig.leave(name)
    time.sleep(timing.after)
    report = rig.measure(
        f"rebalance storm ({timing.down:g}s, a worker every {every:g}s)",
        since,
        None,
        timing.drain,
        timing.maps,
    )
    joined = sum(JOINED in worker.log_text() for worker in started)
    return replace(
        report, note=f"{joined} of {len(started)} storm workers joined a group before leaving"
    )
