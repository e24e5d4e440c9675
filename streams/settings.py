"""Worker settings, read from the environment; the command line overrides some of them."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True, slots=True)
class Topics:
    raw: str = "urls.raw"
    canonical: str = "urls.canonical"
    dlq: str = "urls.dlq"
    probe_requests: str = "miqps.probe-requests"
    maps: str = "miqps.maps"
    map_updates: str = "miqps.map-updates"
    samples: str = "miqps.pattern-samples"

    ENV: ClassVar[dict[str, str]] = {
        "raw": "MIQPS_TOPIC_RAW",
        "canonical": "MIQPS_TOPIC_CANONICAL",
        "dlq": "MIQPS_TOPIC_DLQ",
        "probe_requests": "MIQPS_TOPIC_PROBE_REQUESTS",
        "maps": "MIQPS_TOPIC_MAPS",
        "map_updates": "MIQPS_TOPIC_MAP_UPDATES",
        "samples": "MIQPS_TOPIC_SAMPLES",
    }

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Topics:
        """Each name from its variable, else the default behind ``MIQPS_TOPIC_PREFIX``."""
        prefix = env.get("MIQPS_TOPIC_PREFIX", "")
        defaults = cls()
        names = {
            attr: env.get(variable) or prefix + getattr(defaults, attr)
            for attr, variable in cls.ENV.items()
        }
        return cls(**names)

    def all(self) -> dict[str, str]:
        return {attr: getattr(self, attr) for attr in self.ENV}


@dataclass(frozen=True, slots=True)
class LearningPolicy:
    """When the canonicalizer asks for a pattern to be probed."""

    min_distinct_values: int = 6
    saturation_urls: int = 24
    rare_after: float = 300.0
    reverify_after: float = 7 * 24 * 3600.0
    retry_after: float = 900.0
    max_pool_urls: int = 64
    urls_per_pattern: int = 3
    max_patterns_per_shape: int = 256


@dataclass(frozen=True, slots=True)
class Settings:
    bootstrap_servers: str = DEFAULT_BOOTSTRAP
    app_id: str = "miqps"
    state_dir: Path = Path(".miqps-state")
    proxy: str | None = None
    allow_private: bool = False
    topics: Topics = field(default_factory=Topics)
    partitions: int = 4
    replication_factor: int = 1
    policy: LearningPolicy = field(default_factory=LearningPolicy)
    max_flip_share: float = 0.5
    batch_size: int = 5000
    batch_wait: float = 0.05
    max_message_bytes: int = 1024 * 1024
    topic_max_message_bytes: int = 16 * 1024 * 1024
    local_sampler_entries: int = 20_000
    rocksdb_block_cache_bytes: int = 8 * 1024 * 1024
    rocksdb_write_buffer_bytes: int = 4 * 1024 * 1024
    probe_rate_per_host: float = 10.0
    probe_concurrency_per_host: int = 2
    probe_timeout: float = 10.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        base = cls()
        policy = base.policy

        def number(name: str, default: float) -> float:
            text = env.get(name)
            return float(text) if text not in (None, "") else default

        def integer(name: str, default: int) -> int:
            text = env.get(name)
            return int(text) if text not in (None, "") else default

        return cls(
            bootstrap_servers=env.get("KAFKA_BOOTSTRAP_SERVERS") or DEFAULT_BOOTSTRAP,
            app_id=env.get("MIQPS_APP_ID") or base.app_id,
            state_dir=Path(env.get("MIQPS_STATE_DIR") or base.state_dir),
            proxy=env.get("MIQPS_PROXY") or None,
            allow_private=_truthy(env.get("MIQPS_ALLOW_PRIVATE")),
            topics=Topics.from_env(env),
            partitions=integer("MIQPS_PARTITIONS", base.partitions),
            replication_factor=integer("MIQPS_REPLICATION_FACTOR", base.replication_factor),
            policy=LearningPolicy(
                min_distinct_values=integer("MIQPS_MIN_DISTINCT_VALUES",
                                            policy.min_distinct_values),
                saturation_urls=integer("MIQPS_SATURATION_URLS", policy.saturation_urls),
                rare_after=number("MIQPS_RARE_AFTER", policy.rare_after),
                reverify_after=number("MIQPS_REVERIFY_AFTER", policy.reverify_after),
                retry_after=number("MIQPS_PROBE_RETRY_AFTER", policy.retry_after),
            ),
            max_flip_share=number("MIQPS_MAX_FLIP_SHARE", base.max_flip_share),
            batch_size=integer("MIQPS_BATCH_SIZE", base.batch_size),
            batch_wait=number("MIQPS_BATCH_WAIT", base.batch_wait),
            max_message_bytes=integer("MIQPS_MAX_MESSAGE_BYTES", base.max_message_bytes),
            local_sampler_entries=integer("MIQPS_LOCAL_SAMPLER_ENTRIES",
                                          base.local_sampler_entries),
            rocksdb_block_cache_bytes=integer("MIQPS_ROCKSDB_BLOCK_CACHE_BYTES",
                                              base.rocksdb_block_cache_bytes),
            probe_rate_per_host=number("MIQPS_PROBE_RATE", base.probe_rate_per_host),
            probe_timeout=number("MIQPS_PROBE_TIMEOUT", base.probe_timeout),
        )

    def with_overrides(self, **changes: Any) -> Settings:
        return replace(self, **{k: v for k, v in changes.items() if v is not None})
