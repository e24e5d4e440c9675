"""The keep/drop rule of the learner, as pure arithmetic (S=6, N=3, 30 items for a choice)."""

from __future__ import annotations

import pytest

from miqps.learner import LearnConfig
from miqps.maps import Layer, ParamEvidence

CONFIG = LearnConfig(samples=6, threshold=0.2, min_conclusive=3, choice_items=30, choice_sampled=12)


@pytest.mark.parametrize(
    ("changed", "items", "conclusive", "choice", "available", "expected"),
    [
        (0, 6, 6, False, None, ("drop", Layer.LEARNED)),
        # one confirmed change on one item of many keeps it
        (1, 40, 41, False, None, ("keep", Layer.LEARNED)),
        (1, 1, 1, True, None, ("keep", Layer.LEARNED)),
        (0, 5, 5, False, None, ("keep", Layer.INSUFFICIENT)),
        # a choice among a few values needs many more items ...
        (0, 6, 6, True, None, ("keep", Layer.INSUFFICIENT)),
        (0, 29, 29, True, None, ("keep", Layer.INSUFFICIENT)),
        (0, 30, 30, True, None, ("drop", Layer.LEARNED)),
        # ... unless the path shape has no more: then S items do, and N for the others
        (0, 6, 6, True, 6, ("drop", Layer.LEARNED)),
        (0, 5, 5, True, 8, ("keep", Layer.INSUFFICIENT)),
        (0, 5, 5, True, 5, ("drop", Layer.LEARNED)),
        (0, 3, 3, False, 3, ("drop", Layer.LEARNED)),
        (0, 2, 2, False, 2, ("keep", Layer.INSUFFICIENT)),
        # a shape of one item (a home page): N outcomes on it, all unchanged
        (0, 1, 3, False, 1, ("drop", Layer.LEARNED)),
        (0, 1, 2, False, 1, ("keep", Layer.INSUFFICIENT)),
        (0, 0, 0, False, None, ("keep", Layer.INSUFFICIENT)),
    ],
)
def test_verdict(
    changed: int,
    items: int,
    conclusive: int,
    choice: bool,
    available: int | None,
    expected: tuple[str, Layer],
) -> None:
    assert CONFIG.verdict(changed, items, conclusive, choice=choice, available=available) == (
        expected
    )


def test_sampling_settles_once_no_outcome_can_change_the_decision() -> None:
    assert CONFIG.settled(ParamEvidence(samples=2, changed=1, unchanged=1, items=2))
    assert not CONFIG.settled(ParamEvidence(samples=2, unchanged=2, items=2))
    assert CONFIG.settled(ParamEvidence(samples=6, unchanged=6, items=6))
    assert not CONFIG.settled(ParamEvidence(samples=6, unchanged=6, items=6), choice=True)
    # a choice is sampled on 12 items; verifying the shape's patterns brings the rest
    assert CONFIG.settled(ParamEvidence(samples=12, unchanged=12, items=12), choice=True)
    assert CONFIG.verdict(0, 12, 12, choice=True, sampling=True) == ("drop", Layer.LEARNED)
    assert CONFIG.verdict(0, 12, 12, choice=True) == ("keep", Layer.INSUFFICIENT)
    # a budget spent mostly on pages that could not be judged
    assert CONFIG.settled(ParamEvidence(samples=4, unchanged=1, inconclusive=3, items=1))


@pytest.mark.parametrize(
    "arguments",
    [
        {"samples": 0},
        {"min_conclusive": 7},
        {"threshold": 0.0},
        {"threshold": 1.5},
        {"verify_samples": 0},
        {"choice_items": 5},
    ],
)
def test_impossible_settings_are_refused(arguments: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        LearnConfig(**arguments)  # type: ignore[arg-type]
