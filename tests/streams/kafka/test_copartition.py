"""The co-partitioning contract without a broker: which topics must agree, the error line
when they do not, and the partition counts of the topics a worker creates."""

from __future__ import annotations

import pytest

from streams.kafka.admin import topic_specs
from streams.kafka.copartition import (
    PartitioningMismatch,
    check,
    count_to_create,
    domain_keyed_topics,
    mismatch,
)
from streams.settings import Settings

SETTINGS = Settings.from_env({"MIQPS_PARTITIONS": "4"})
KEYED_INPUT = SETTINGS.with_overrides(input_keyed_by_domain=True)
DOMAIN_KEYED = [
    "miqps.maps",
    "miqps.map-history",
    "miqps.map-updates",
    "miqps.probe-requests",
    "miqps.pattern-samples",
    "miqps.observations",
]


def counts(settings: Settings, **changed: int) -> dict[str, int]:
    """Every topic of ``settings`` with 4 partitions, but ``changed`` (by attribute)."""
    topics = settings.topics.all()
    by_name = {name: 4 for name in topics.values()}
    by_name.update({topics[attribute]: count for attribute, count in changed.items()})
    return by_name


def test_the_domain_keyed_topics_take_in_the_input_only_when_it_is_keyed() -> None:
    assert domain_keyed_topics(SETTINGS) == DOMAIN_KEYED
    assert domain_keyed_topics(KEYED_INPUT) == [*DOMAIN_KEYED, "urls.raw"]


def test_topics_that_agree_pass_whatever_the_others_have() -> None:
    assert mismatch(SETTINGS, counts(SETTINGS, raw=12, canonical=1, dlq=3)) is None
    check(KEYED_INPUT, counts(KEYED_INPUT, canonical=1, dlq=3))


def test_a_mismatch_names_every_domain_keyed_topic_with_its_count() -> None:
    error = mismatch(SETTINGS, counts(SETTINGS, samples=8, raw=2))
    assert error is not None
    assert "\n" not in error
    assert (
        "miqps.maps has 4, miqps.map-history has 4, miqps.map-updates has 4, "
        "miqps.probe-requests has 4, miqps.pattern-samples has 8, miqps.observations has 4."
        in error
    )
    assert "urls.raw" not in error  # not keyed by domain here
    assert "Create the others again with the count of miqps.maps" in error
    with pytest.raises(PartitioningMismatch, match="pattern-samples has 8"):
        check(SETTINGS, counts(SETTINGS, samples=8))


def test_keyed_input_must_agree_too_and_the_error_says_how_to_opt_out() -> None:
    assert mismatch(SETTINGS, counts(SETTINGS, raw=8)) is None
    error = mismatch(KEYED_INPUT, counts(KEYED_INPUT, raw=8))
    assert error is not None
    assert "(urls.raw too, as MIQPS_INPUT_KEYED_BY_DOMAIN is set)" in error
    assert "miqps.observations has 4, urls.raw has 8." in error
    assert "or unset MIQPS_INPUT_KEYED_BY_DOMAIN" in error


def test_a_created_domain_keyed_topic_takes_the_count_of_the_existing_ones() -> None:
    assert count_to_create(SETTINGS, {}) == 4
    assert count_to_create(SETTINGS, {"urls.raw": 9, "urls.canonical": 7}) == 4
    assert count_to_create(SETTINGS, {"miqps.pattern-samples": 6}) == 6
    assert count_to_create(SETTINGS, {"miqps.pattern-samples": 6, "miqps.maps": 3}) == 3
    assert count_to_create(KEYED_INPUT, {"urls.raw": 9}) == 9


def test_topic_specs_give_the_domain_keyed_topics_their_count() -> None:
    plain = {spec.name: spec.partitions for spec in topic_specs(SETTINGS, 6)}
    assert {name: plain[name] for name in DOMAIN_KEYED} == dict.fromkeys(DOMAIN_KEYED, 6)
    assert (plain["urls.raw"], plain["urls.canonical"], plain["urls.dlq"]) == (4, 4, 4)
    keyed = {spec.name: spec.partitions for spec in topic_specs(KEYED_INPUT, 6)}
    assert keyed["urls.raw"] == 6
    assert {spec.partitions for spec in topic_specs(SETTINGS)} == {4}
