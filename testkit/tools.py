"""Running workers as processes, producing input and reading topics: for the demo, the
benchmark and the tests."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import AlterConfigOpType, ConfigEntry, ConfigResource

from streams.kafka.admin import consumer_config, producer_config
from streams.kafka.clients import DeliveryReports, read_to_end
from streams.kafka.clients import produce as send
from streams.settings import Settings, variables


def worker_command() -> list[str]:
    """``miqps worker`` from this environment (the console script next to the interpreter)."""
    script = Path(sys.executable).with_name("miqps")
    if script.exists():
        return [str(script), "worker"]
    return [sys.executable, "-m", "streams", "worker"]


def worker_env(settings: Settings, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment with every setting of ``settings`` (an unset one, such
    as no proxy, removed), then ``extra``."""
    env = dict(os.environ)
    for variable in variables():
        env.pop(variable.name, None)
    env.update(settings.to_env())
    env["PYTHONUNBUFFERED"] = "1"
    if extra:
        env.update(extra)
    return env


ALERT_LEVELS = ("WARNING", "ERROR", "CRITICAL")


FATAL_ERROR = "Fatal Python error"
"""How ``faulthandler`` (enabled in the worker's processes) begins the stacks it writes when
a process crashes in native code."""


def crash_report(lines: list[str], most: int = 160) -> list[str]:
    """The last crash ``faulthandler`` wrote among ``lines``, with the stack of each thread,
    or nothing: a failed test shows it whole, after the last lines."""
    starts = [n for n, line in enumerate(lines) if FATAL_ERROR in line]
    if not starts:
        return []
    return ["-- the crash it reported:", *lines[starts[-1] :][:most]]


class WorkerProcess:
    """One ``miqps worker`` subprocess with its log in a file."""

    def __init__(
        self,
        settings: Settings,
        agents: str,
        log_path: Path,
        extra_env: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self.agents = agents
        self.log_path = log_path
        self.extra_env = extra_env
        self.process: subprocess.Popen[bytes] | None = None
        self.killed = False
        self._log: IO[bytes] | None = None

    def start(self) -> WorkerProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            worker_command(),
            env=worker_env(self.settings, {"MIQPS_AGENTS": self.agents, **(self.extra_env or {})}),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        self.killed = True
        if self.alive():
            assert self.process is not None
            self.process.kill()
            self.process.wait(30)
        self._close_log()

    def stop(self, timeout: float = 40.0) -> int | None:
        if self.process is None:
            return None
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(30)
        self._close_log()
        return self.process.returncode

    def log_digest(self, alerts: int = 40, last: int = 10) -> str:
        """What a failed test needs of this worker's log: whether it runs, its last
        ``alerts`` warning, error and critical lines (with their tracebacks), then its last
        ``last`` lines."""
        flagged: list[str] = []
        in_alert = False
        lines = self.log_text().splitlines()
        for line in lines:
            if line.startswith("["):
                in_alert = any(f"] [{level}] " in line for level in ALERT_LEVELS)
            if in_alert:
                flagged.append(line)
        if self.process is None:
            state = "never started"
        elif self.alive():
            state = "running"
        else:
            state = f"exited with {self.process.returncode}"
        return "\n".join(
            [
                f"-- {self.log_path.name}: {state}; its last warnings and errors:",
                *flagged[-alerts:],
                "-- its last lines:",
                *lines[-last:],
                *crash_report(lines),
            ]
        )

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text("utf-8", "replace")
        except OSError:
            return ""

    def __enter__(self) -> WorkerProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def produce(
    settings: Settings,
    topic: str,
    values: Iterable[bytes | None],
    keys: Iterable[bytes | None] | None = None,
) -> int:
    """Send every value (with its key) to ``topic`` and wait until all are delivered;
    raises if any is not."""
    reports = DeliveryReports()
    producer = Producer(
        producer_config(
            settings,
            **{
                "enable.idempotence": False,
                "delivery.report.only.error": True,
                "on_delivery": reports,
            },
        )
    )
    count = 0
    key_iter = iter(keys) if keys is not None else None
    for value in values:
        key = next(key_iter) if key_iter is not None else None
        send(producer, topic, value, key)
        count += 1
        if count % 10_000 == 0:
            producer.poll(0)
    remaining = producer.flush(60)
    if remaining:
        raise RuntimeError(f"{remaining} messages not delivered to {topic}")
    reports.raise_errors()
    return count


class TopicReader:
    """Reads every partition of a topic from the beginning, incrementally."""

    def __init__(self, settings: Settings, topic: str) -> None:
        self.topic = topic
        self.consumer = Consumer(
            consumer_config(
                settings,
                f"miqps-reader-{uuid.uuid4().hex}",
                **{"enable.auto.commit": False, "fetch.wait.max.ms": 100},
            )
        )
        metadata = self.consumer.list_topics(topic, timeout=30).topics[topic]
        self.consumer.assign([TopicPartition(topic, p, 0) for p in metadata.partitions])
        self.records: list[tuple[bytes | None, bytes | None, int]] = []

    def poll(self, seconds: float = 0.5) -> int:
        """Read what arrived within ``seconds``; return how many records were new."""
        deadline = time.monotonic() + seconds
        new = 0
        while True:
            remaining = deadline - time.monotonic()
            messages = self.consumer.consume(10_000, max(0.0, min(remaining, 0.2)))
            for message in messages:
                if message.error() is None:
                    self.records.append((message.key(), message.value(), message.partition() or 0))
                    new += 1
            if remaining <= 0 and not messages:
                return new

    def wait_for(self, count: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while len(self.records) < count:
            if time.monotonic() > deadline:
                return False
            self.poll(0.5)
        return True

    def close(self) -> None:
        self.consumer.close()

    def __enter__(self) -> TopicReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def unique_prefix(label: str) -> str:
    return f"{label}-{uuid.uuid4().hex[:8]}."


def isolated_settings(
    base: Settings,
    label: str,
    state_dir: Path,
    **changes: object,
) -> Settings:
    """Settings with their own topic names, app id and state directory."""
    from streams.settings import Topics

    prefix = unique_prefix(label)
    topics = Topics.from_env({"MIQPS_TOPIC_PREFIX": prefix})
    return base.with_overrides(
        topics=topics, app_id=prefix.rstrip("."), state_dir=state_dir, **changes
    )


def delete_topics(settings: Settings, timeout: float = 30.0) -> list[str]:
    """Delete the topics of ``settings``, its Faust app's internal topics and any other topic
    named after its app id (as :func:`isolated_settings` names them), best effort."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers, "log_level": 0})
    names = set(settings.topics.all().values())
    prefixes = (f"{settings.app_id}-", f"{settings.app_id}.")
    doomed = sorted(
        name
        for name in admin.list_topics(timeout=timeout).topics
        if name in names or name.startswith(prefixes)
    )
    if doomed:
        for future in admin.delete_topics(doomed, operation_timeout=timeout).values():
            with contextlib.suppress(KafkaException):
                future.result(timeout)
    return doomed


def committed_in_transactions(settings: Settings, topic: str) -> bool:
    """Every run of records of ``topic`` at consecutive offsets (one transaction's, in a
    partition) is followed by a record no consumer is given: the marker that ends the
    transaction. Records sent outside one leave no such gap before the partition's end."""
    consumer = Consumer(
        consumer_config(
            settings, f"miqps-check-{uuid.uuid4().hex}", **{"enable.auto.commit": False}
        )
    )
    try:
        at = {(m.partition() or 0, m.offset() or 0) for m in read_to_end(consumer, topic)}
        ends = {
            partition: consumer.get_watermark_offsets(TopicPartition(topic, partition))[1]
            for partition in {partition for partition, _ in at}
        }
    finally:
        consumer.close()
    return bool(at) and all(
        offset + 1 < ends[partition]
        for partition, offset in at
        if (partition, offset + 1) not in at
    )


def set_max_message_bytes(settings: Settings, topic: str, limit: int) -> None:
    """Set ``topic``'s ``max.message.bytes``: a topic that refuses records, or takes them again."""
    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers, "log_level": 0})
    entry = ConfigEntry(
        "max.message.bytes", str(limit), incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
