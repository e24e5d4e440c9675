"""The app's tables: their names, the topic each is partitioned like, and RocksDB options
(each partition's database has its own block cache and write buffers, 2 GiB and 3 x 64 MiB
by default in Faust, so they are kept small)."""

from __future__ import annotations

from typing import Any

from streams.settings import Settings

PATTERN_STATS_TABLE = "pattern-stats"
PROBE_DEMAND_TABLE = "probe-demand"


def changelog_topics(settings: Settings) -> dict[str, str]:
    """Each table's changelog topic (as Faust names it) and the topic it is partitioned
    like. The worker creates them before Faust starts: Faust's own creation can race with
    its metadata (a changelog "with 0 partitions" crashes the agent for good)."""
    return {
        f"{settings.app_id}-{PATTERN_STATS_TABLE}-changelog": settings.topics.samples,
        f"{settings.app_id}-{PROBE_DEMAND_TABLE}-changelog": settings.topics.probe_requests,
    }


def rocksdb_options(settings: Settings) -> dict[str, Any]:
    return {
        "block_cache_size": settings.rocksdb_block_cache_bytes,
        "block_cache_compressed_size": 0,
        "write_buffer_size": settings.rocksdb_write_buffer_bytes,
        "max_write_buffer_number": 2,
        "max_open_files": 256,
    }
