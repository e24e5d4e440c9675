"""What is on the wire: one frozen record type per topic record, and how each is read.

:mod:`~streams.messages.codec` reads JSON into typed records, :mod:`~streams.messages.records`
holds the records, :mod:`~streams.messages.audit` words the map-update audit, and
:mod:`~streams.messages.fastread` is the pattern-stats agent's hand-written sample reader.
Other modules import from this package, which re-exports every name they use.
"""

from streams.messages.audit import (
    FROZEN,
    NO_SAMPLES,
    ONE_PAGE,
    UNDECIDED_CAUSES,
    UNREACHABLE,
    audit_records,
    undecided_reason,
)
from streams.messages.codec import BadInput
from streams.messages.fastread import Observation, read_observation
from streams.messages.records import (
    AUDIT,
    SAMPLE_TYPES,
    CanonicalOutput,
    CountSample,
    DeadLetter,
    DueSample,
    MapUpdateRecord,
    MapVersion,
    ProbeRequest,
    ProducedBy,
    RawURL,
    RequestedPattern,
    RequestReason,
    SamplePack,
    Source,
    Stage,
    UrlSample,
    decode_input,
    input_domain,
    read_sample,
    read_sample_items,
    sample_to_bytes,
)

__all__ = [
    "AUDIT",
    "FROZEN",
    "NO_SAMPLES",
    "ONE_PAGE",
    "SAMPLE_TYPES",
    "UNDECIDED_CAUSES",
    "UNREACHABLE",
    "BadInput",
    "CanonicalOutput",
    "CountSample",
    "DeadLetter",
    "DueSample",
    "MapUpdateRecord",
    "MapVersion",
    "Observation",
    "ProbeRequest",
    "ProducedBy",
    "RawURL",
    "RequestReason",
    "RequestedPattern",
    "SamplePack",
    "Source",
    "Stage",
    "UrlSample",
    "audit_records",
    "decode_input",
    "input_domain",
    "read_observation",
    "read_sample",
    "read_sample_items",
    "sample_to_bytes",
    "undecided_reason",
]
