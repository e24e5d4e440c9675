"""The keep/drop rule of the learner, as pure arithmetic (S=6, T=0.2, N=3)."""

from __future__ import annotations

import pytest

from miqps.learner import LearnConfig
from miqps.maps import Layer, ParamEvidence

CONFIG = LearnConfig(samples=6, threshold=0.2, min_conclusive=3)


@pytest.mark.parametrize(
    ("changed", "conclusive", "tried", "expected"),
    [
        (0, 6, 6, ("drop", Layer.LEARNED)),
        (1, 6, 6, ("drop", Layer.LEARNED)),
        (2, 6, 6, ("keep", Layer.LEARNED)),
        (1, 3, 3, ("keep", Layer.LEARNED)),
        (0, 2, 2, ("keep", Layer.INSUFFICIENT)),
        (0, 0, 4, ("keep", Layer.INSUFFICIENT)),
        # 1 changed of 2 conclusive: with the whole budget left it could still be a drop ...
        (1, 2, 2, ("keep", Layer.INSUFFICIENT)),
        # ... but with one sample lost to a timeout, 1 of at most 5 is still >= T: content.
        (1, 2, 3, ("keep", Layer.LEARNED)),
        (2, 2, 2, ("keep", Layer.LEARNED)),
    ],
)
def test_verdict(changed: int, conclusive: int, tried: int, expected: tuple[str, Layer]) -> None:
    assert CONFIG.verdict(changed, conclusive, tried) == expected


def test_sampling_settles_once_no_outcome_can_change_the_decision() -> None:
    assert CONFIG.settled(ParamEvidence(samples=2, changed=2))
    assert not CONFIG.settled(ParamEvidence(samples=2, unchanged=2))
    assert CONFIG.settled(ParamEvidence(samples=6, unchanged=6))
    assert not CONFIG.settled(ParamEvidence(samples=5, changed=1, unchanged=4))


@pytest.mark.parametrize(
    "arguments",
    [
        {"samples": 0},
        {"min_conclusive": 7},
        {"threshold": 0.0},
        {"threshold": 1.5},
        {"verify_samples": 0},
    ],
)
def test_impossible_settings_are_refused(arguments: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        LearnConfig(**arguments)  # type: ignore[arg-type]
