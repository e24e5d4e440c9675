"""The worker replaces a canonicalizer front whose whole process froze (a native call that
never returns while it holds the GIL, so no watchdog inside it can run): seen from the
worker's process by the missing heartbeat, within ``MIQPS_FRONT_HEARTBEAT_TIMEOUT``, with
the frozen process's stacks on stderr, counted in a metric, and exactly once kept. A
process of the worker that dies in native code leaves its Python stacks in the log."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from streams.kafka.admin import ensure_topics
from streams.settings import Settings
from testkit.chaos import OutputLedger
from testkit.scrape import free_port, scrape
from testkit.tools import WorkerProcess, delete_topics, isolated_settings, produce

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

FREEZE_HOOK = Path(__file__).with_name("freezehook")
HEARTBEAT_TIMEOUT = 5.0
INPUTS = 300


@pytest.fixture
def settings(bootstrap: str, tmp_path: Path) -> Iterator[Settings]:
    base = Settings.from_env({"KAFKA_BOOTSTRAP_SERVERS": bootstrap})
    made = isolated_settings(
        base,
        "watchdog",
        tmp_path / "state",
        partitions=2,
        processing_guarantee="exactly_once",
        front_heartbeat_timeout=HEARTBEAT_TIMEOUT,
        metrics_port=free_port(),
    )
    ensure_topics(made)
    yield made
    delete_topics(made)


def wait_for(condition: object, timeout: float, what: str) -> float:
    """Seconds until ``condition()`` held; fails after ``timeout``."""
    started = time.monotonic()
    while not condition():  # type: ignore[operator]
        if time.monotonic() - started > timeout:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.2)
    return time.monotonic() - started


def test_a_front_frozen_holding_the_gil_is_replaced_and_every_input_comes_out_once(
    settings: Settings, tmp_path: Path
) -> None:
    frozen = tmp_path / "frozen"
    path = os.pathsep.join(p for p in (str(FREEZE_HOOK), os.environ.get("PYTHONPATH")) if p)
    worker = WorkerProcess(
        settings,
        "canonicalize",
        tmp_path / "worker.log",
        {"PYTHONPATH": path, "MIQPS_TEST_FREEZE_FRONT": str(frozen)},
    ).start()
    ledger = OutputLedger(settings)
    ledger.start()
    try:
        wait_for(lambda: "Worker ready" in worker.log_text(), 90, "the worker")
        produce(
            settings,
            settings.topics.raw,
            (
                orjson.dumps({"url": f"https://shop.test/p?id={seq}&ref=r", "seq": seq})
                for seq in range(INPUTS)
            ),
        )
        wait_for(frozen.exists, 60, "the front to freeze on its first batch")
        replaced_after = wait_for(
            lambda: "canonicalizer front froze" in worker.log_text(),
            HEARTBEAT_TIMEOUT + 10,
            "the worker to replace the frozen front",
        )
        missing = ledger.wait_for(set(range(INPUTS)), 90)
        assert missing == set(), worker.log_digest()
        time.sleep(2.0)  # whatever the new front would write twice comes in this time
        samples = scrape(settings.metrics_port or 0)["miqps_front_replacements_total"]
        assert worker.alive(), worker.log_digest()
    finally:
        ledger.stop()
        worker.stop()
    log = worker.log_text()
    print(f"\nfrozen front replaced {replaced_after:.1f}s after it froze")
    assert "freeze_holding_the_gil" in log, "the frozen process's stacks are on stderr"
    assert {s.labels["reason"]: s.value for s in samples} == {"stuck": 0.0, "frozen": 1.0}
    assert max(ledger.outputs.values()) == 1, "exactly once: no input has two outputs"
    assert len(ledger.outputs) == INPUTS


def front_pids(worker_pid: int) -> list[int]:
    """The worker's canonicalizer front: its child started by ``multiprocessing.spawn``."""
    found = []
    for task in Path(f"/proc/{worker_pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            command = Path(f"/proc/{child}/cmdline").read_bytes()
            if b"spawn_main" in command:
                found.append(int(child))
    return found


@pytest.mark.parametrize("process", ["faust", "front"])
def test_a_crash_in_native_code_leaves_the_python_stacks_in_the_log(
    settings: Settings, tmp_path: Path, process: str
) -> None:
    worker = WorkerProcess(settings, "canonicalize", tmp_path / "worker.log").start()
    try:
        wait_for(lambda: "Worker ready" in worker.log_text(), 90, "the worker")
        wait_for(lambda: front_pids(worker.pid), 30, "the front")
        target = worker.pid if process == "faust" else front_pids(worker.pid)[0]
        os.kill(target, signal.SIGSEGV)
        wait_for(lambda: not worker.alive(), 60, "the worker to end")
    finally:
        worker.stop()
    log = worker.log_text()
    assert "Fatal Python error: Segmentation fault" in log, worker.log_digest()
    assert "most recent call first" in log, worker.log_digest()
    crash = worker.log_digest().split("-- the crash it reported:\n", 1)[-1]
    assert crash.startswith("Fatal Python error: Segmentation fault"), worker.log_digest()
    assert "most recent call first" in crash, worker.log_digest()
