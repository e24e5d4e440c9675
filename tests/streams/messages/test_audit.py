"""The audit wording of map updates (streams.messages.audit)."""

from __future__ import annotations

from miqps.update import Undecided
from streams.messages import FROZEN, NO_SAMPLES, ONE_PAGE, UNDECIDED_CAUSES, UNREACHABLE


def test_each_undecided_cause_has_a_reason_of_its_own() -> None:
    assert len(UNDECIDED_CAUSES) == len(Undecided) + 2
    assert {UNREACHABLE, ONE_PAGE, NO_SAMPLES, FROZEN} <= UNDECIDED_CAUSES.keys()
