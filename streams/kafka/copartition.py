"""The co-partitioning contract: every topic keyed by domain has the same partition count,
and a domain goes to ``murmur2(domain) % count`` (:func:`~streams.kafka.partitioning.key_partition`)
in each of them. So partition *p* of the maps topic holds the maps of exactly the domains
whose samples, probe requests, map history and audits are in partition *p* of theirs, as
Kafka Streams asks of the topics it joins.

The domain-keyed topics are ``miqps.maps``, ``miqps.map-history`` and ``miqps.map-updates``
(key: the domain), ``miqps.probe-requests`` (key: the domain) and ``miqps.pattern-samples``
(no key: the front writes each sample to its domain's partition itself). With
``MIQPS_INPUT_KEYED_BY_DOMAIN``, the producers of ``urls.raw`` key every URL by its domain,
so ``urls.raw`` joins them; with ``MIQPS_REPARTITION_INPUT``, the topic the repartition hop
writes (``miqps.urls-by-domain``, key: the domain) does. The tables' changelogs follow the
topic their table reads (the worker creates them so, and Faust refuses to start when they
do not).

A worker checks the contract once its topics exist, before it consumes anything
(:func:`check`); creating missing topics, it gives a domain-keyed one the count the existing
ones have (:func:`count_to_create`).
"""

from __future__ import annotations

from collections.abc import Mapping

from streams.settings import Settings

INPUT_KEYED_VARIABLE = "MIQPS_INPUT_KEYED_BY_DOMAIN"


class PartitioningMismatch(RuntimeError):
    """The domain-keyed topics do not all have the same partition count."""


def domain_keyed_topics(settings: Settings) -> list[str]:
    """The topics that must agree, the maps topic first; the front's input last, when it
    is keyed by domain."""
    topics = settings.topics
    names = [
        topics.maps,
        topics.map_history,
        topics.map_updates,
        topics.probe_requests,
        topics.samples,
        topics.observations,
    ]
    if settings.domain_keyed_input:
        names.append(settings.front_input_topic)
    return names


def count_to_create(settings: Settings, existing: Mapping[str, int]) -> int:
    """The partition count of a domain-keyed topic the worker creates: that of the first
    domain-keyed topic that exists (the maps topic first), else ``MIQPS_PARTITIONS``."""
    for name in domain_keyed_topics(settings):
        if existing.get(name):
            return existing[name]
    return settings.partitions


def mismatch(settings: Settings, counts: Mapping[str, int]) -> str | None:
    """The error line when the domain-keyed topics among ``counts`` disagree, else None."""
    names = [name for name in domain_keyed_topics(settings) if name in counts]
    if len({counts[name] for name in names}) <= 1:
        return None
    listed = ", ".join(f"{name} has {counts[name]}" for name in names)
    keyed_input = (
        f" ({settings.topics.raw} too, as {INPUT_KEYED_VARIABLE} is set)"
        if settings.input_keyed_by_domain
        else ""
    )
    unset = f", or unset {INPUT_KEYED_VARIABLE}" if settings.input_keyed_by_domain else ""
    return (
        f"the domain-keyed topics must have one partition count{keyed_input}, so that a "
        f"domain is in the same partition of each: {listed}. Create the others again with "
        f"the count of {names[0]} (adding partitions to a keyed topic moves domains to other "
        f'partitions){unset}; see "Co-partitioning by domain" in docs/STREAMS.md'
    )


def check(settings: Settings, counts: Mapping[str, int]) -> None:
    """Raise :class:`PartitioningMismatch` unless the domain-keyed topics agree."""
    error = mismatch(settings, counts)
    if error is not None:
        raise PartitioningMismatch(error)
