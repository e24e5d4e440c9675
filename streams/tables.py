"""RocksDB options of every table: each partition's database has its own block cache and
write buffers (2 GiB and 3 x 64 MiB by default in Faust), so they are kept small."""

from __future__ import annotations

from typing import Any

from streams.settings import Settings


def rocksdb_options(settings: Settings) -> dict[str, Any]:
    return {
        "block_cache_size": settings.rocksdb_block_cache_bytes,
        "block_cache_compressed_size": 0,
        "write_buffer_size": settings.rocksdb_write_buffer_bytes,
        "max_write_buffer_number": 2,
        "max_open_files": 256,
    }
