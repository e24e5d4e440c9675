"""The app's tables: their names, the topic each is partitioned like, and RocksDB options
(each partition's database has its own block cache and write buffers, 2 GiB and 3 x 64 MiB
by default in Faust, so they are kept small)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

from rocksdict import Options, Rdict

from streams.settings import Settings

log = logging.getLogger(__name__)

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


def discard_corrupt_stores(folder: Path) -> list[Path]:
    """Remove each table partition's RocksDB under ``folder`` that does not open (its files
    corrupt or cut short, as a crash or a full disk can leave them), and return them.

    Faust would crash the worker on it at every start; removed, it is created empty and
    restored from the table's changelog from its beginning, as Kafka Streams does with a
    corrupt state store. A store locked by a running process is left alone."""
    discarded: list[tuple[Path, str]] = []
    for path in sorted(folder.glob("*.db")):
        if not path.is_dir():
            continue
        try:
            Rdict(str(path), Options(raw_mode=True)).close()
        except Exception as error:  # rocksdict raises Exception for every RocksDB error
            if "lock" in str(error).lower():
                continue
            shutil.rmtree(path, ignore_errors=True)
            discarded.append((path, str(error)))
    if discarded:
        # One line for all: repeated warnings differing only in digits are rate-limited.
        log.warning(
            "table stores that do not open were removed, to be restored from their changelogs: %s",
            "; ".join(f"{path} ({error})" for path, error in discarded),
        )
    return [path for path, _ in discarded]
