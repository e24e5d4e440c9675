"""Java's default partitioner for keyed records: ``murmur2(key) & 0x7fffffff % partitions``.

Kafka's Java clients, aiokafka (so Faust) and confluent-kafka with ``murmur2_random`` all
put a key in this partition; the canonicalizer uses it to address a partition itself.
"""

from __future__ import annotations

import struct

SEED = 0x9747B28C
MULTIPLIER = 0x5BD1E995
MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit murmur2, as a signed int like Java's ``Utils.murmur2``."""
    length = len(data)
    h = (SEED ^ length) & MASK
    whole = length - length % 4
    for k in struct.unpack_from(f"<{length >> 2}I", data):
        k = (k * MULTIPLIER) & MASK
        k ^= k >> 24
        k = (k * MULTIPLIER) & MASK
        h = ((h * MULTIPLIER) & MASK) ^ k
    tail = length % 4
    if tail >= 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * MULTIPLIER) & MASK
    h ^= h >> 13
    h = (h * MULTIPLIER) & MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def key_partition(key: bytes, partitions: int) -> int:
    """The partition Java clients, aiokafka and Faust choose for ``key``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions
