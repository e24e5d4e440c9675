"""Measuring workers through broker outages: numbered inputs, which of them came out, how
long a stop took and how often the log repeated itself. For the outage tests and the
outage benchmark."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from collections import Counter

import orjson

from testkit.tools import TopicReader, WorkerProcess

LOG_LINE = re.compile(r"^\[([^]]+)\] \[(\d+)\] \[(WARNING|ERROR|CRITICAL)\] (.*)$")
SUPPRESSED_NOTE = re.compile(r" \[\d+ more like this in the last \d+s\]")


def numbered_inputs(count: int, start: int = 0) -> list[bytes]:
    """``urls.raw`` records whose ``seq`` comes back in the output's ``meta``."""
    return [
        orjson.dumps({"url": f"https://d{n % 7}.example/p?id={n}&utm_source=s{n % 3}", "seq": n})
        for n in range(start, start + count)
    ]


def output_seqs(reader: TopicReader) -> set[int]:
    reader.poll(0.3)
    return {
        orjson.loads(value)["meta"]["seq"] for _, value, _ in reader.records if value is not None
    }


def sigterm_and_time(worker: WorkerProcess, limit: float) -> tuple[int | None, float]:
    """SIGTERM, then wait up to ``limit`` s: (exit code, or None if it was still alive and
    got killed; seconds until it exited)."""
    assert worker.process is not None
    began = time.monotonic()
    worker.process.send_signal(signal.SIGTERM)
    try:
        code: int | None = worker.process.wait(limit)
    except subprocess.TimeoutExpired:
        code = None
    elapsed = time.monotonic() - began
    worker.kill()
    return code, elapsed


def log_problems(log_text: str) -> Counter[str]:
    """How many times each warning or error was written, per process, digits masked (and
    librdkafka's own stderr lines, which bypass logging)."""
    counts: Counter[str] = Counter()
    for line in log_text.splitlines():
        if line.startswith("%"):
            counts["librdkafka stderr " + re.sub(r"\d+", "#", line[:120])] += 1
            continue
        match = LOG_LINE.match(line)
        if match:
            message = SUPPRESSED_NOTE.sub("", match[4])
            counts[f"{match[2]} {match[3]} {re.sub(r'[0-9]+', '#', message)}"] += 1
    return counts


def reported_uncommitted(log_text: str) -> int | None:
    """How many consumed inputs the canonicalizer said, when it stopped, it had not
    committed (None if it said nothing)."""
    said = re.findall(
        r"(\d+) consumed inputs have no committed offset|"
        r"(Every consumed input has its offset committed)",
        log_text,
    )
    if not said:
        return None
    count, none_left = said[-1]
    return 0 if none_left else int(count)
