"""Start-up waiting, stop deadlines, outage classification and log rate limits, without a
broker."""

from __future__ import annotations

import asyncio
import itertools
import logging
import subprocess
import sys
import textwrap
import threading
import time
from types import SimpleNamespace

import pytest
from aiokafka.errors import KafkaTimeoutError, NodeNotReadyError, UnsupportedVersionError
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from faust.exceptions import NotReady
from faust.transport.drivers.aiokafka import Transport

from streams.front.loop import UncommittedInputs
from streams.kafka.lograte import RateLimitFilter
from streams.worker.lifecycle import is_broker_outage, wait_for_broker

pytestmark = pytest.mark.timeout(60)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def record(
    message: str, *args: object, level: int = logging.ERROR, name: str = "aiokafka"
) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, message, args, None)


def test_a_repeated_error_passes_once_per_interval_and_then_says_how_many_were_left_out() -> None:
    clock = FakeClock()
    limit = RateLimitFilter(10.0, clock=clock)
    passed = []
    for step in range(100):  # 10 a second for 10 s, as aiokafka does without a broker
        clock.now = step * 0.1
        candidate = record("Unable connect to node with id %s: %s", 1, f"after {step}ms")
        if limit.filter(candidate):
            passed.append(candidate.getMessage())
    clock.now = 10.5
    late = record("Unable connect to node with id %s: %s", 1, "after 3ms")
    assert limit.filter(late)
    assert len(passed) == 1
    assert late.getMessage() == (
        "Unable connect to node with id 1: after 3ms [99 more like this in the last 10s]"
    )


def test_different_messages_levels_and_loggers_are_limited_apart_and_info_never() -> None:
    limit = RateLimitFilter(10.0, clock=FakeClock())
    assert limit.filter(record("fetch failed"))
    assert limit.filter(record("metadata failed"))
    assert limit.filter(record("fetch failed", level=logging.WARNING))
    assert limit.filter(record("fetch failed", name="librdkafka"))
    assert not limit.filter(record("fetch failed"))
    assert all(limit.filter(record("progress", level=logging.INFO)) for _ in range(5))


@pytest.mark.parametrize(
    "error",
    [
        KafkaException(KafkaError(KafkaError._TRANSPORT)),
        KafkaException(KafkaError(KafkaError._ALL_BROKERS_DOWN)),
        KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION)),
        NodeNotReadyError("node 1"),
        ConnectionRefusedError(111, "refused"),
        KafkaTimeoutError(),
        TimeoutError(),
        NotReady("Not connected to Kafka Broker"),
    ],
)
def test_errors_that_mean_the_broker_is_unreachable_are_outages(error: Exception) -> None:
    assert is_broker_outage(error)
    wrapped = RuntimeError("map feed failed")
    wrapped.__cause__ = error
    assert is_broker_outage(wrapped)


@pytest.mark.parametrize(
    "error",
    [
        KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)),
        KafkaException(KafkaError(KafkaError.INVALID_CONFIG)),
        UnsupportedVersionError(),
        ValueError("bad map"),
    ],
)
def test_other_errors_are_not_outages(error: Exception) -> None:
    assert not is_broker_outage(error)


def error_of_faust_looking_for_a_controller_without_brokers() -> Exception:
    without_brokers = SimpleNamespace(cluster=SimpleNamespace(brokers=list))
    try:
        asyncio.run(Transport._get_controller_node(None, None, without_brokers))  # type: ignore[arg-type]
    except Exception as error:
        return error
    raise AssertionError("Faust found a controller among no brokers")


def test_faust_finding_no_controller_is_an_outage_and_the_same_error_elsewhere_is_not() -> None:
    error = error_of_faust_looking_for_a_controller_without_brokers()
    assert is_broker_outage(error)
    try:
        raise Exception(*error.args)
    except Exception as elsewhere:
        assert not is_broker_outage(elsewhere)


@pytest.mark.slow  # waits 1 s, then 2 s
def test_waiting_for_the_broker_retries_outages_with_growing_pauses(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[float] = []

    def attempt() -> str:
        calls.append(time.monotonic())
        if len(calls) < 3:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        return "topics"

    with caplog.at_level(logging.INFO, "streams.worker.lifecycle"):
        assert wait_for_broker("k:9092", attempt, threading.Event()) == "topics"
    pauses = [later - earlier for earlier, later in itertools.pairwise(calls)]
    assert pauses[0] >= 0.9 and pauses[1] >= 1.9, pauses
    waiting = [r.getMessage() for r in caplog.records if "waiting for Kafka" in r.getMessage()]
    assert len(waiting) == 2 and "next try in 1s" in waiting[0] and "in 2s" in waiting[1]
    assert "Kafka at k:9092 answered" in caplog.text


def test_waiting_for_the_broker_raises_other_errors_and_ends_on_a_stop_request() -> None:
    def misconfigured() -> None:
        raise KafkaException(KafkaError(KafkaError.INVALID_CONFIG))

    with pytest.raises(KafkaException):
        wait_for_broker("k:9092", misconfigured, threading.Event())

    stopping = threading.Event()

    def unreachable() -> None:
        stopping.set()
        raise KafkaException(KafkaError(KafkaError._TRANSPORT))

    began = time.monotonic()
    assert wait_for_broker("k:9092", unreachable, stopping) is None
    assert time.monotonic() - began < 1.0


def test_a_stop_deadline_ends_a_process_that_hangs_and_says_what_is_left() -> None:
    script = textwrap.dedent("""
        import logging, time
        from streams.worker.lifecycle import StopDeadline
        logging.basicConfig(level="INFO", format="%(message)s")
        StopDeadline(0.5, "hung", lambda: "3 inputs will be delivered again.").arm()
        time.sleep(30)
    """)
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=20)
    assert time.monotonic() - began < 10
    assert done.returncode == 0
    assert b"hung: not stopped 0.5s after the stop request; exiting now. 3 inputs" in done.stderr


def test_a_stop_deadline_after_a_broker_outage_starts_the_process_again() -> None:
    script = textwrap.dedent("""
        import logging, os, time
        from streams.worker.lifecycle import StopDeadline
        logging.basicConfig(level="INFO", format="%(message)s")
        if os.environ.get("STARTED_AGAIN"):
            print("started again", flush=True)
            raise SystemExit(0)
        os.environ["STARTED_AGAIN"] = "1"
        deadline = StopDeadline(0.5, "hung", lambda: "nothing.")
        deadline.restart_after = ConnectionRefusedError(111, "refused")
        deadline.arm()
        time.sleep(30)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=20)
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"started again\n"
    assert b"Kafka became unreachable (ConnectionRefusedError" in done.stderr


class FakeMessage:
    def __init__(self, topic: str, partition: int, offset: int) -> None:
        self._where = (topic, partition, offset)

    def topic(self) -> str:
        return self._where[0]

    def partition(self) -> int:
        return self._where[1]

    def offset(self) -> int:
        return self._where[2]


def test_uncommitted_inputs_are_those_consumed_past_the_last_confirmed_commit() -> None:
    inputs = UncommittedInputs()
    batch = [FakeMessage("raw", 0, 100), FakeMessage("raw", 1, 7), FakeMessage("raw", 0, 101)]
    inputs.consumed(batch, {("raw", 0): 102, ("raw", 1): 8})  # type: ignore[arg-type]
    inputs.consumed([FakeMessage("raw", 0, 102)], {("raw", 0): 103})  # type: ignore[list-item]
    assert inputs.describe() == (
        "4 consumed inputs have no committed offset and will be "
        "delivered again (at least once): raw[0] offsets 100-102, "
        "raw[1] offsets 7-7."
    )
    inputs.committed([TopicPartition("raw", 0, 102), TopicPartition("raw", 1, 8)])
    assert (
        inputs.describe().startswith("1 consumed inputs")
        and "raw[0] offsets 102-102" in inputs.describe()
    )
    inputs.forget([TopicPartition("raw", 0)])
    assert inputs.describe() == "Every consumed input has its offset committed."
