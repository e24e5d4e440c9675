"""The error policy: a bug is never acknowledged; the worker stops, or backs off and retries."""

from __future__ import annotations

import asyncio
from typing import get_args, get_type_hints

import pytest

from streams.settings import Settings
from streams.worker.errorpolicy import BugBackoff, BugPolicy, OnBug


class Work:
    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    async def __call__(self) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise KeyError("a bug of ours")


def test_every_value_of_the_setting_is_a_policy_and_the_default_stops() -> None:
    accepted = get_args(get_type_hints(Settings)["on_bug"])
    assert {OnBug(value) for value in accepted} == set(OnBug)
    assert OnBug(Settings.from_env({}).on_bug) is OnBug.STOP


async def test_retry_backs_off_doubling_up_to_a_limit_then_returns_once_the_work_is_done() -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    policy = BugPolicy(
        OnBug.RETRY,
        lambda error: pytest.fail("must not stop"),
        first_backoff=1.0,
        max_backoff=5.0,
        sleep=sleep,
    )
    work = Work(failures=5)
    await policy.run(work, "test")
    assert work.calls == 6 and policy.bugs == 5
    assert waits == [1.0, 2.0, 4.0, 5.0, 5.0]


async def test_stop_stops_the_worker_and_never_returns_so_nothing_is_acked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stops: list[BaseException] = []
    policy = BugPolicy(OnBug.STOP, stops.append)
    acked = []

    async def agent() -> None:
        await policy.run(Work(failures=1), "pattern-stats at tp:7")
        acked.append(7)

    task = asyncio.ensure_future(agent())
    for _ in range(10):
        await asyncio.sleep(0)
    assert [type(error) for error in stops] == [KeyError]
    assert not task.done() and acked == []
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert acked == []
    assert "pattern-stats at tp:7 failed on a bug" in caplog.text
    assert "Traceback" in caplog.text and "KeyError: 'a bug of ours'" in caplog.text


async def test_a_cancelled_run_is_not_taken_for_a_bug() -> None:
    policy = BugPolicy(OnBug.RETRY, lambda error: pytest.fail("must not stop"))

    async def cancelled() -> None:
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await policy.run(cancelled, "test")
    assert policy.bugs == 0


def test_the_backoff_doubles_to_its_limit_and_starts_over_after_a_success() -> None:
    """The one schedule of the agents and the canonicalizer front alike."""
    backoff = BugBackoff(OnBug.RETRY, first=1, most=5)
    assert [backoff.after_bug() for _ in range(5)] == [1, 2, 4, 5, 5]
    backoff.succeeded()
    assert backoff.after_bug() == 1
    assert BugBackoff(OnBug.STOP).after_bug() is None
