"""The journal of probe outcomes a learning run keeps beside its maps: what it holds, what
a kill leaves of it, and the order a resumed run is served it in."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from miqps.checkpoint import JournalEntry, ProbeJournal, journal_path, read_journal
from miqps.content import Snapshot
from miqps.prober import TakeOutcome

RUN = "a" * 64
PAGE = TakeOutcome(
    Snapshot(200, "http://shop.test/p?id=1", {2**64 - 1: 7, 3: 2**63, 1: 0}, "/p/1", 1),
    fetches=2,
)
FAILED = TakeOutcome(None, "HTTP 503, Retry-After 90s too long", "Retry-After too long", 3)


def _journal(tmp_path: Path, *outcomes: tuple[str, TakeOutcome]) -> Path:
    """A journal of ``RUN`` beside ``tmp_path/maps.jsonl`` holding ``outcomes``, each the
    first take of its URL, closed."""
    journal = ProbeJournal.open(tmp_path / "maps.jsonl", RUN, replay=False)
    for url, outcome in outcomes:
        journal.record(url, 0, outcome)
    journal.close()
    return journal.path


def test_an_outcome_is_read_back_as_it_was_journaled(tmp_path: Path) -> None:
    path = _journal(tmp_path, ("http://shop.test/p?id=1", PAGE), ("http://shop.test/x", FAILED))
    assert path == journal_path(tmp_path / "maps.jsonl")
    entries = read_journal(path, RUN)
    assert entries == [
        JournalEntry("http://shop.test/p?id=1", 0, PAGE),
        JournalEntry("http://shop.test/x", 0, FAILED),
    ]
    snapshot = entries[0].outcome.snapshot
    assert snapshot is not None and list(snapshot.blocks) == [2**64 - 1, 3, 1], "in page order"
    assert b"<html" not in path.read_bytes()


def test_a_line_torn_by_a_kill_is_left_out_and_the_rest_served(tmp_path: Path) -> None:
    path = _journal(tmp_path, ("http://shop.test/p?id=1", PAGE), ("http://shop.test/x", FAILED))
    whole = path.read_bytes()
    torn = whole[: whole.rindex(b'"kind"')]  # the process died while writing the last line
    path.write_bytes(torn)
    assert read_journal(path, RUN) == [JournalEntry("http://shop.test/p?id=1", 0, PAGE)]
    journal = ProbeJournal.open(tmp_path / "maps.jsonl", RUN, replay=True)
    journal.record("http://shop.test/x", 0, FAILED)  # probed again, journaled after
    journal.close()
    assert journal.held == 2
    assert read_journal(path, RUN) == [
        JournalEntry("http://shop.test/p?id=1", 0, PAGE),
        JournalEntry("http://shop.test/x", 0, FAILED),
    ]


def test_the_journal_of_another_run_is_not_served(tmp_path: Path) -> None:
    path = _journal(tmp_path, ("http://shop.test/p?id=1", PAGE))
    assert read_journal(path, "b" * 64) == []
    journal = ProbeJournal.open(tmp_path / "maps.jsonl", "b" * 64, replay=True)
    journal.close()
    assert journal.held == 0
    assert read_journal(path, RUN) == [], "started afresh for the run that uses it"


def test_the_outcomes_of_the_domains_done_are_dropped(tmp_path: Path) -> None:
    _journal(tmp_path, ("http://shop.test/p?id=1", PAGE), ("http://done.test/x", FAILED))
    journal = ProbeJournal.open(tmp_path / "maps.jsonl", RUN, replay=True, done={"done.test"})
    journal.close()
    assert dict(journal.journaled) == {"shop.test": 2}
    assert [entry.url for entry in read_journal(journal.path, RUN)] == ["http://shop.test/p?id=1"]


async def test_outcomes_are_served_in_the_order_they_came_each_once_the_tasks_wait(
    tmp_path: Path,
) -> None:
    """Two tasks ask for the journal's outcomes in the other order: each is served in its
    turn, the second once the task served the first has gone as far as it can, through
    tasks of its own; a take the journal lacks is probed, and numbered per URL."""
    first, second = "http://shop.test/p?id=1", "http://shop.test/p?id=2"
    _journal(tmp_path, (first, PAGE), (second, FAILED))
    journal = ProbeJournal.open(tmp_path / "maps.jsonl", RUN, replay=True)
    said: list[str] = []

    async def a() -> None:
        await asyncio.sleep(0)  # asks after b
        assert await journal.recall(first) == (0, PAGE)
        said.append("first")
        await asyncio.gather(*(asyncio.sleep(0) for _ in range(3)))
        await asyncio.ensure_future(asyncio.sleep(0))
        said.append("first, followed up")

    async def b() -> None:
        assert await journal.recall(second) == (0, FAILED)
        said.append("second")
        assert await journal.recall(second) == (1, None), "its second take: to probe"

    await asyncio.wait_for(asyncio.gather(a(), b()), 5)
    journal.close()
    assert said == ["first", "first, followed up", "second"]
    assert journal.replayed == PAGE.fetches + FAILED.fetches


async def test_an_outcome_no_take_asks_for_is_passed_over(tmp_path: Path) -> None:
    """A resumed run that goes another way never waits for an outcome it does not ask for;
    served later, it is served at once."""
    first, second = "http://shop.test/p?id=1", "http://shop.test/p?id=2"
    _journal(tmp_path, (first, PAGE), (second, FAILED))
    journal = ProbeJournal.open(tmp_path / "maps.jsonl", RUN, replay=True)
    assert await asyncio.wait_for(journal.recall(second), 5) == (0, FAILED)
    assert await asyncio.wait_for(journal.recall(first), 5) == (0, PAGE)
    journal.close()


@pytest.mark.parametrize("line", [b"", b"{", b"[]", b'{"url": 1, "take": 0, "fetches": 1}'])
def test_a_line_that_is_no_entry_is_left_out(tmp_path: Path, line: bytes) -> None:
    path = _journal(tmp_path, ("http://shop.test/p?id=1", PAGE))
    path.write_bytes(path.read_bytes() + line + b"\n")
    assert read_journal(path, RUN) == [JournalEntry("http://shop.test/p?id=1", 0, PAGE)]
