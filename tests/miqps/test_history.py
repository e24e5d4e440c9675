"""Rollback, freeze and the diff between versions, in the core; and that learning, by
``update_map`` and by ``miqps learn``, leaves a frozen map as it is."""

from __future__ import annotations

from pathlib import Path

import pytest

from miqps.cli import main
from miqps.fetch import Fetcher
from miqps.history import Change, diff_maps, rollback, with_frozen
from miqps.learner import LearnConfig, Learner
from miqps.maps import (
    DomainMap,
    InvalidMap,
    Layer,
    ParamEvidence,
    PatternDecision,
    Verification,
    parse_map,
    read_maps,
    write_maps,
)
from miqps.prober import PageProber
from miqps.update import Request, update_map
from miqps.urls import parse
from tests.miqps.drifting import DriftingSite

DOMAIN = "drift.test"
PATTERN = "/p?id&ref"


def decision(kept: set[str], dropped: set[str], changed: int = 5) -> PatternDecision:
    params = {name: ParamEvidence("keep", Layer.LEARNED, 6, changed, 6 - changed) for name in kept}
    params |= {name: ParamEvidence("drop", Layer.LEARNED, 6, 0, 6) for name in dropped}
    return PatternDecision(
        frozenset(kept), frozenset(dropped), params, Verification(3), "2026-12-01T00:00:00Z"
    )


def version(number: int, patterns: dict[str, PatternDecision], frozen: bool = False) -> DomainMap:
    return DomainMap(DOMAIN, number, "2026-12-01T00:00:00Z", patterns, frozen)


def test_the_diff_names_added_removed_and_changed_patterns_not_new_evidence() -> None:
    before = version(
        1,
        {
            "/p?id&ref": decision({"id"}, {"ref"}),
            "/q?a": decision({"a"}, set()),
            "/r?x": decision({"x"}, set()),
        },
    )
    after = version(
        2,
        {
            "/p?id&ref": decision({"id", "ref"}, set()),
            "/q?a": decision({"a"}, set(), changed=2),
            "/s?b": decision(set(), {"b"}),
        },
    )
    changes = {change.pattern: change for change in diff_maps(before, after)}
    assert sorted(changes) == ["/p?id&ref", "/r?x", "/s?b"]
    assert changes["/p?id&ref"].change is Change.CHANGED
    assert changes["/p?id&ref"].newly_kept() == {"ref"}
    assert changes["/p?id&ref"].describe() == "/p?id&ref: now keeps ref"
    assert changes["/r?x"].change is Change.REMOVED
    assert changes["/s?b"].describe() == "/s?b: added (keeps nothing; drops b)"
    assert [c.change for c in diff_maps(None, before)] == [Change.ADDED] * 3


def test_a_rollback_is_the_old_content_as_the_next_version_and_the_gate_does_not_block_it() -> None:
    old = version(1, {PATTERN: decision({"id"}, {"ref"})})
    current = version(4, {PATTERN: decision({"id", "ref"}, set()), "/q?a": decision({"a"}, set())})
    rolled, verdict = rollback(current, old, freeze=False, max_flip_share=0.0)
    assert rolled.version == 5 and rolled.patterns == old.patterns and not rolled.frozen
    assert verdict.accepted
    assert verdict.flipped == ((PATTERN, "ref"),)
    assert "operator's rollback to version 1" in verdict.reason
    assert "would have rejected it" in verdict.reason
    frozen, _ = rollback(current, old, freeze=True, max_flip_share=0.5)
    assert frozen.frozen
    stays_frozen, _ = rollback(with_frozen(current, True), old, freeze=False, max_flip_share=0.5)
    assert stays_frozen.frozen and stays_frozen.version == 6
    with pytest.raises(ValueError, match="cannot roll back"):
        rollback(current, DomainMap("other.test", 1), freeze=False, max_flip_share=0.5)


def test_the_frozen_flag_round_trips_and_is_validated() -> None:
    plain = version(2, {PATTERN: decision({"id"}, {"ref"})})
    assert "frozen" not in plain.to_json(), "maps that are not frozen are written as before"
    frozen = with_frozen(plain, True)
    assert frozen.version == 3 and frozen.patterns == plain.patterns
    assert parse_map(frozen.dumps()).frozen
    assert not parse_map(with_frozen(frozen, False).dumps()).frozen
    with pytest.raises(InvalidMap, match="schema"):
        parse_map(frozen.dumps().replace('"frozen":true', '"frozen":"yes"'))


def urls(offset: int = 0) -> list[str]:
    return [f"http://{DOMAIN}/p?id={n}&ref=r{n}" for n in range(offset, offset + 8)]


async def test_update_map_leaves_a_frozen_map_as_it_is_without_a_fetch(fetcher: Fetcher) -> None:
    learner = Learner(PageProber(fetcher), LearnConfig())
    sample = [parse(url) for url in urls()]
    first = await update_map(learner, DOMAIN, None, sample)
    assert first.published is not None
    frozen = with_frozen(first.published, True)
    basis = frozen.patterns[PATTERN].decided_at
    new_pattern = [parse(f"http://{DOMAIN}/p?id={n}&lang=l{n}") for n in range(8)]
    refused = await update_map(
        learner,
        DOMAIN,
        frozen,
        sample + new_pattern,
        {PATTERN: Request(basis), "/p?id&lang": Request()},
    )
    assert refused.frozen == ["/p?id&lang", PATTERN]
    assert refused.published is None and refused.candidate is None
    assert refused.fetches == 0 and not refused.decided
    learned = await update_map(learner, DOMAIN, with_frozen(frozen, False), new_pattern)
    assert learned.published is not None and "/p?id&lang" in learned.published.patterns


def test_miqps_learn_leaves_a_frozen_map_as_it_is(
    site_and_proxy: tuple[DriftingSite, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url_file = tmp_path / "urls.txt"
    url_file.write_text("\n".join(urls()) + "\n")
    out = tmp_path / "maps.jsonl"
    frozen = version(3, {"/p?id": decision({"id"}, set())}, frozen=True)
    write_maps(out, [frozen])
    learn = [
        "learn",
        "--urls",
        str(url_file),
        "--out",
        str(out),
        "--proxy",
        site_and_proxy[1],
        "--rate",
        "500",
        "--no-progress",
    ]
    assert main(learn) == 0
    assert read_maps(out)[DOMAIN] == frozen
    assert (
        "drift.test: the map is frozen, not changed: 1 patterns not learned"
        in capsys.readouterr().err
    )
    write_maps(out, [with_frozen(frozen, False)])
    assert main(learn) == 0
    assert PATTERN in read_maps(out)[DOMAIN].patterns
