"""The worker's settings: one frozen, nested model whose every field declares its
environment variable once, where the field is declared (:mod:`streams.settings.fields`).

The core's :class:`~miqps.fetch.FetchConfig` and :class:`~miqps.learner.LearnConfig` are
used as they are; the field that holds each declares its fields' variables. :func:`variables`
lists them all: reading the environment, writing it for a child worker
(:meth:`Settings.to_env`), the command line's options and the documentation all derive from
that list. ``python -m streams.settings`` prints the documentation table.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, Literal

from miqps.audit import DEFAULT_AUDIT_SHARE
from miqps.canonical import DEFAULT_CACHE_DOMAINS
from miqps.fetch import FetchConfig
from miqps.learner import LearnConfig
from miqps.sampling import SamplingRule
from streams.settings.fields import (
    ENV_KEY,
    Env,
    Variable,
    declared_values,
    from_env,
    replace_paths,
    section,
    setting,
)

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_APP_ID = "miqps"

Role = Literal["canonicalize", "probe"]


@dataclass(frozen=True, slots=True)
class Topics:
    raw: str = setting("MIQPS_TOPIC_RAW", "input URLs", "urls.raw")
    canonical: str = setting(
        "MIQPS_TOPIC_CANONICAL", "one canonical URL per valid input", "urls.canonical"
    )
    dlq: str = setting("MIQPS_TOPIC_DLQ", "bad input, with the reason", "urls.dlq")
    probe_requests: str = setting(
        "MIQPS_TOPIC_PROBE_REQUESTS", "patterns to learn (internal)", "miqps.probe-requests"
    )
    maps: str = setting("MIQPS_TOPIC_MAPS", "the maps (compacted)", "miqps.maps")
    map_updates: str = setting(
        "MIQPS_TOPIC_MAP_UPDATES", "audit of every map update", "miqps.map-updates"
    )
    map_history: str = setting(
        "MIQPS_TOPIC_MAP_HISTORY",
        "every published version of every map, whole",
        "miqps.map-history",
    )
    samples: str = setting(
        "MIQPS_TOPIC_SAMPLES", "pattern samples (internal)", "miqps.pattern-samples"
    )
    observations: str = setting(
        "MIQPS_TOPIC_OBSERVATIONS",
        "pages a crawler fetched, keyed by domain: evidence that spares probe fetches",
        "miqps.observations",
    )
    by_domain: str = setting(
        "MIQPS_TOPIC_BY_DOMAIN",
        "with `MIQPS_REPARTITION_INPUT`, the input URLs keyed by domain (internal)",
        "miqps.urls-by-domain",
    )

    PREFIX: ClassVar[Env] = Env(
        "MIQPS_TOPIC_PREFIX", "prefix of every default topic name (e.g. `staging.`)"
    )
    # Attribute -> variable, for callers that name the variables themselves.
    ENV: ClassVar[dict[str, str]]

    @classmethod
    def with_prefix(cls, prefix: str) -> Topics:
        """The default names behind ``prefix``."""
        return cls(
            **{
                item.name: prefix + item.default
                for item in fields(cls)
                if isinstance(item.default, str)
            }
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Topics:
        """Each name from its variable, else the default behind ``MIQPS_TOPIC_PREFIX``."""
        base = cls.with_prefix(env.get(cls.PREFIX.name, ""))
        return from_env(base, env)

    def all(self) -> dict[str, str]:
        return {item.name: getattr(self, item.name) for item in fields(self)}


Topics.ENV = {item.name: item.metadata[ENV_KEY].name for item in fields(Topics)}


def app_id_for(prefix: str) -> str:
    """The app id of a deployment whose topics carry ``prefix``: its consumer groups and
    changelog topics, named after the app id, then carry the prefix too."""
    return prefix + DEFAULT_APP_ID


DEFAULT_SAMPLING = SamplingRule()


@dataclass(frozen=True, slots=True)
class LearningPolicy:
    """When the canonicalizer asks for a pattern to be probed. The fields that make the
    core's :class:`~miqps.sampling.SamplingRule` (:attr:`sampling`) take its defaults."""

    min_distinct_values: int = setting(
        "MIQPS_MIN_DISTINCT_VALUES",
        "distinct items a parameter waits for (if choice-like, the learner's choice_items)",
        DEFAULT_SAMPLING.min_distinct_values,
        minimum=1,
    )
    saturation_urls: int = setting(
        "MIQPS_SATURATION_URLS",
        "URLs after which a parameter has shown all its items (and 4 per item it showed)",
        DEFAULT_SAMPLING.saturation_urls,
        minimum=1,
    )
    rare_after: float = setting(
        "MIQPS_RARE_AFTER",
        "seconds before a rare pattern is probed with what it has",
        300.0,
        minimum=0,
    )
    reverify_after: float = setting(
        "MIQPS_REVERIFY_AFTER",
        "age (s) at which a decision is re-verified",
        7 * 24 * 3600.0,
        minimum=0,
    )
    retry_after: float = setting(
        "MIQPS_PROBE_RETRY_AFTER",
        "seconds after which an unanswered probe request is sent again",
        120.0,
        minimum=1,
    )
    max_pool_urls: int = setting(
        "MIQPS_MAX_POOL_URLS",
        "sample URLs kept per path shape",
        DEFAULT_SAMPLING.max_pool_urls,
        minimum=1,
    )
    urls_per_pattern: int = setting(
        "MIQPS_URLS_PER_PATTERN",
        "sample URLs kept per pattern",
        DEFAULT_SAMPLING.urls_per_pattern,
        minimum=1,
    )
    max_patterns_per_shape: int = setting(
        "MIQPS_MAX_PATTERNS_PER_SHAPE", "patterns tracked per path shape", 256, minimum=1
    )

    @property
    def sampling(self) -> SamplingRule:
        return SamplingRule(
            min_distinct_values=self.min_distinct_values,
            saturation_urls=self.saturation_urls,
            max_pool_urls=self.max_pool_urls,
            urls_per_pattern=self.urls_per_pattern,
        )


@dataclass(frozen=True, slots=True)
class Settings:
    bootstrap_servers: str = setting(
        "KAFKA_BOOTSTRAP_SERVERS", "Kafka brokers, HOST:PORT[,...]", DEFAULT_BOOTSTRAP
    )
    agents: tuple[Role, ...] = setting(
        "MIQPS_AGENTS",
        "roles of this worker: `canonicalize`, `probe` or both",
        ("canonicalize", "probe"),
    )
    app_id: str = setting(
        "MIQPS_APP_ID",
        "Faust app id = consumer group and changelogs' prefix; the front uses "
        "`<app id>-canonicalizer`; with `MIQPS_TOPIC_PREFIX`, `<prefix>miqps`",
        DEFAULT_APP_ID,
    )
    state_dir: Path = field(
        default=Path(".miqps-state"),
        metadata={ENV_KEY: Env("MIQPS_STATE_DIR", "RocksDB state; one per worker process")},
    )
    topics: Topics = field(default_factory=Topics)
    partitions: int = setting(
        "MIQPS_PARTITIONS",
        "partitions of the topics a worker creates; a domain-keyed one takes the count of "
        "those that exist",
        4,
        minimum=1,
    )
    replication_factor: int = setting(
        "MIQPS_REPLICATION_FACTOR",
        "replication factor of the topics a worker creates",
        1,
        minimum=1,
    )
    input_keyed_by_domain: bool = setting(
        "MIQPS_INPUT_KEYED_BY_DOMAIN",
        "the producers of the input topic key every URL by its domain, with Java's "
        "partitioner (murmur2): each front then meets only its partitions' domains; the "
        "input topic must have the domain-keyed topics' partition count",
        False,
    )
    repartition_input: bool = setting(
        "MIQPS_REPARTITION_INPUT",
        "the input topic's keys are anything: each worker re-keys every URL by its domain "
        "into `MIQPS_TOPIC_BY_DOMAIN` (a repartition hop) and canonicalizes from there, so "
        "each front meets only its partitions' domains; not with "
        "`MIQPS_INPUT_KEYED_BY_DOMAIN`",
        False,
    )
    policy: LearningPolicy = field(default_factory=LearningPolicy)
    fetch: FetchConfig = field(
        default_factory=FetchConfig,
        metadata=section(
            proxy=Env("MIQPS_PROXY", "HTTP proxy for every probe fetch, as for `miqps learn`"),
            allow_private=Env(
                "MIQPS_ALLOW_PRIVATE", "allow loopback and private targets, as for `miqps learn`"
            ),
            timeout=Env("MIQPS_PROBE_TIMEOUT", "seconds per fetch", minimum=0.001),
            max_bytes=Env("MIQPS_PROBE_MAX_BYTES", "largest page read", minimum=1),
            max_redirects=Env("MIQPS_PROBE_MAX_REDIRECTS", "redirects followed", minimum=0),
            per_host_concurrency=Env(
                "MIQPS_PROBE_CONCURRENCY", "fetches at once per host", minimum=1
            ),
            per_host_rate=Env("MIQPS_PROBE_RATE", "fetches per second per host", minimum=0.001),
            max_attempts=Env("MIQPS_PROBE_MAX_ATTEMPTS", "attempts per fetch", minimum=1),
            backoff_base=Env(
                "MIQPS_PROBE_BACKOFF", "first retry delay (s), doubled each time", minimum=0
            ),
            max_retry_after=Env(
                "MIQPS_PROBE_MAX_RETRY_AFTER", "longest Retry-After (s) honoured", minimum=0
            ),
            user_agent=Env(
                "MIQPS_USER_AGENT",
                "User-Agent of probe fetches, as for `miqps learn`; robots.txt groups are "
                "matched on its product token",
            ),
            contact_url=Env(
                "MIQPS_CONTACT_URL", "a page telling site owners who probes them, in the User-Agent"
            ),
            never_probe=Env(
                "MIQPS_NEVER_PROBE",
                "file of domains never fetched, one per line, subdomains included",
            ),
            max_crawl_delay=Env(
                "MIQPS_PROBE_MAX_CRAWL_DELAY",
                "longest Crawl-delay (s) honoured; a host asking for more is not probed",
                minimum=0,
            ),
            adaptive_pace=Env(
                "MIQPS_PROBE_ADAPTIVE_PACE", "each host's delay follows its latency and errors"
            ),
            max_delay=Env(
                "MIQPS_PROBE_MAX_DELAY",
                "longest delay (s) the adaptive pace puts between requests to a host",
                minimum=0,
            ),
        ),
    )
    learn: LearnConfig = field(
        default_factory=LearnConfig,
        metadata=section(
            samples=Env(
                "MIQPS_LEARN_SAMPLES",
                "S: unchanged distinct items that drop a parameter",
                minimum=1,
            ),
            threshold=Env(
                "MIQPS_LEARN_THRESHOLD",
                "T: a change on a smaller share of conclusive samples is confirmed by a second "
                "look",
                minimum=0,
                maximum=1,
            ),
            min_conclusive=Env(
                "MIQPS_LEARN_MIN_CONCLUSIVE",
                "N: conclusive samples below which a parameter is kept",
                minimum=1,
            ),
            verify_samples=Env(
                "MIQPS_LEARN_VERIFY_SAMPLES",
                "URLs the final canonical form is verified on",
                minimum=1,
            ),
            choice_items=Env(
                "MIQPS_LEARN_CHOICE_ITEMS",
                "unchanged distinct items that drop a choice-like parameter (sizes, colours)",
                minimum=1,
            ),
            choice_sampled=Env(
                "MIQPS_LEARN_CHOICE_SAMPLED",
                "items of a choice-like parameter sampled before verification supplies the rest",
                minimum=1,
            ),
            choice_values=Env(
                "MIQPS_LEARN_CHOICE_VALUES",
                "most distinct values a parameter has to look like a choice",
                minimum=1,
            ),
            choice_repeats=Env(
                "MIQPS_LEARN_CHOICE_REPEATS",
                "least URLs per value, on average, for a parameter to look like a choice",
                minimum=1,
            ),
            default_confirmations=Env(
                "MIQPS_LEARN_DEFAULT_CONFIRMATIONS",
                "pages that must confirm a default value",
                minimum=1,
            ),
            default_candidates=Env(
                "MIQPS_LEARN_DEFAULT_CANDIDATES",
                "default-value candidates tried per parameter",
                minimum=0,
            ),
            default_min_share=Env(
                "MIQPS_LEARN_DEFAULT_MIN_SHARE",
                "least share of URLs a default-value candidate needs",
                minimum=0,
                maximum=1,
            ),
            generalize_values=Env(
                "MIQPS_LEARN_GENERALIZE_VALUES",
                "distinct values left unchanged before a drop covers values never tried",
                minimum=1,
            ),
            parallel_samples=Env(
                "MIQPS_LEARN_PARALLEL_SAMPLES", "samples of a parameter fetched at once", minimum=1
            ),
            seed=Env("MIQPS_LEARN_SEED", "seed of the sample choice"),
        ),
    )
    map_history_retention_days: float = setting(
        "MIQPS_MAP_HISTORY_RETENTION_DAYS",
        "days the map history keeps a version (0: forever); set when the topic is created",
        90.0,
        minimum=0,
    )
    max_flip_share: float = setting(
        "MIQPS_MAX_FLIP_SHARE",
        "anomaly gate: largest share of kept parameters one update may drop",
        0.5,
        minimum=0,
        maximum=1,
    )
    observed_pages: int = setting(
        "MIQPS_OBSERVED_PAGES",
        "observed pages (`miqps.observations`) the probing worker holds in memory, the "
        "least recently observed or used going first, and reads again from each partition "
        "it is assigned (0: none read)",
        100_000,
        minimum=0,
    )
    recalled_pages: int = setting(
        "MIQPS_RECALLED_PAGES",
        "pages the probing worker fetched that it holds in memory for its domains' next "
        "learning runs, the oldest going first (0: none held)",
        20_000,
        minimum=0,
    )
    recall_seconds: float = setting(
        "MIQPS_RECALL_SECONDS",
        "seconds a page the probing worker fetched stays evidence for its domain's next "
        "learning runs, from the end of the run that fetched it (0: none held)",
        1800.0,
        minimum=0,
    )
    observations_restore_wait: float = setting(
        "MIQPS_OBSERVATIONS_RESTORE_WAIT",
        "seconds a learning run waits for the restore of its domain's `miqps.observations` "
        "partition before it fetches what the restore would bring back",
        30.0,
        minimum=0,
    )
    audit_share: float = setting(
        "MIQPS_AUDIT_SHARE",
        "share of the new items of every dropped parameter re-tested (audits; 0: none); an "
        "item is a path with its kept parameters' values, two fetches an audit",
        DEFAULT_AUDIT_SHARE,
        minimum=0,
        maximum=1,
    )
    batch_size: int = setting("MIQPS_BATCH_SIZE", "inputs per front batch", 5000, minimum=1)
    batch_wait: float = setting(
        "MIQPS_BATCH_WAIT", "seconds a front batch waits to fill", 0.05, minimum=0
    )
    max_message_bytes: int = setting(
        "MIQPS_MAX_MESSAGE_BYTES", "larger inputs are dead-lettered", 1024 * 1024, minimum=1
    )
    topic_max_message_bytes: int = setting(
        "MIQPS_TOPIC_MAX_MESSAGE_BYTES",
        "`max.message.bytes` of the input, DLQ and map topics; a dead letter keeps half",
        16 * 1024 * 1024,
        minimum=1024,
    )
    local_sampler_entries: int = setting(
        "MIQPS_LOCAL_SAMPLER_ENTRIES",
        "patterns the front remembers forwarding samples of",
        20_000,
        minimum=1,
    )
    maps_cache_domains: int = setting(
        "MIQPS_MAPS_CACHE_DOMAINS",
        "domains whose maps each worker process holds in memory, the rest on disk under "
        "`MIQPS_STATE_DIR/live-maps/`; 0: every map in memory",
        DEFAULT_CACHE_DOMAINS,
        minimum=0,
    )
    rocksdb_block_cache_bytes: int = setting(
        "MIQPS_ROCKSDB_BLOCK_CACHE_BYTES",
        "RocksDB block cache per table partition",
        8 * 1024 * 1024,
        minimum=0,
    )
    rocksdb_write_buffer_bytes: int = setting(
        "MIQPS_ROCKSDB_WRITE_BUFFER_BYTES",
        "RocksDB write buffer per table partition",
        4 * 1024 * 1024,
        minimum=64 * 1024,
    )
    # The bounds leave the front process and the worker their margins.
    stop_timeout: float = setting(
        "MIQPS_STOP_TIMEOUT",
        "seconds a worker may take to stop after SIGTERM, even with the broker gone; inputs "
        "not committed by then are delivered again",
        30.0,
        minimum=5,
        maximum=3600,
    )
    front_heartbeat_timeout: float = setting(
        "MIQPS_FRONT_HEARTBEAT_TIMEOUT",
        "seconds without a heartbeat from the canonicalizer front's process (frozen in a "
        "Kafka client call that holds the GIL, say) before the worker dumps its stacks, "
        "kills it and starts a new one",
        60.0,
        minimum=2,
        maximum=3600,
    )
    front_rebalance: Literal["cooperative", "eager"] = setting(
        "MIQPS_FRONT_REBALANCE",
        "how the canonicalizer fronts of a group share the input partitions when one joins "
        "or leaves: `cooperative` moves only the partitions that change owner, and the "
        "others are read on; `eager` revokes every partition and assigns them all again. "
        "Every front of a group must use the same",
        "cooperative",
    )
    on_bug: Literal["stop", "retry"] = setting(
        "MIQPS_ON_BUG",
        "on an unexpected exception (a bug), a worker logs it and `stop`s, or backs off "
        "and `retry`s; the batch is not committed either way",
        "stop",
    )
    processing_guarantee: Literal["at_least_once", "exactly_once"] = setting(
        "MIQPS_PROCESSING_GUARANTEE",
        "`at_least_once`: after a crash, inputs since the last commit are delivered again; "
        "`exactly_once`: the front writes its outputs and offsets in Kafka transactions, so "
        "a `read_committed` consumer sees each input once",
        "at_least_once",
    )
    commit_interval_ms: int | None = setting(
        "MIQPS_COMMIT_INTERVAL_MS",
        "milliseconds between the front's offset commits (at least once) or transaction "
        "commits (exactly once); unset: 1000 and 100, as Kafka Streams' shorter one",
        None,
        minimum=10,
        maximum=60_000,
    )
    metrics_port: int | None = setting(
        "MIQPS_METRICS_PORT",
        "serve Prometheus metrics at `/metrics` on this port, on every interface; unset: "
        "no metrics server",
        None,
        minimum=1,
        maximum=65535,
    )

    # Flat names of fetch settings that callers used before the core's FetchConfig held them.
    ALIASES: ClassVar[dict[str, tuple[str, ...]]] = {
        "proxy": ("fetch", "proxy"),
        "allow_private": ("fetch", "allow_private"),
        "probe_timeout": ("fetch", "timeout"),
        "probe_rate_per_host": ("fetch", "per_host_rate"),
        "probe_concurrency_per_host": ("fetch", "per_host_concurrency"),
    }

    def __post_init__(self) -> None:
        if self.input_keyed_by_domain and self.repartition_input:
            raise ValueError(
                "MIQPS_INPUT_KEYED_BY_DOMAIN and MIQPS_REPARTITION_INPUT exclude each other: "
                "input keyed by domain needs no repartition hop"
            )

    @property
    def domain_keyed_input(self) -> bool:
        """The front's input is keyed by domain: by its producers, or by the hop."""
        return self.input_keyed_by_domain or self.repartition_input

    @property
    def front_input_topic(self) -> str:
        """The topic the canonicalizer front reads."""
        return self.topics.by_domain if self.repartition_input else self.topics.raw

    @property
    def exactly_once(self) -> bool:
        return self.processing_guarantee == "exactly_once"

    @property
    def commit_interval(self) -> float:
        """Seconds between the front's commits, as set or as its guarantee's default."""
        if self.commit_interval_ms is not None:
            return self.commit_interval_ms / 1000
        return 0.1 if self.exactly_once else 1.0

    @property
    def proxy(self) -> str | None:
        return self.fetch.proxy

    @property
    def allow_private(self) -> bool:
        return self.fetch.allow_private

    @property
    def probe_timeout(self) -> float:
        return self.fetch.timeout

    @property
    def probe_rate_per_host(self) -> float:
        return self.fetch.per_host_rate

    @property
    def probe_concurrency_per_host(self) -> int:
        return self.fetch.per_host_concurrency

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Every declared variable of ``env`` (default: this process's environment) that is
        set and not empty; :class:`SettingsError` names every bad one."""
        env = os.environ if env is None else env
        prefix = env.get(Topics.PREFIX.name, "")
        base = cls(topics=Topics.with_prefix(prefix), app_id=app_id_for(prefix))
        return from_env(base, env)

    def to_env(self) -> dict[str, str]:
        """Every variable with its value here (unset ones, such as no proxy, left out), as
        :meth:`from_env` reads them back."""
        return {
            variable.name: variable.format(value)
            for variable, value in declared_values(self)
            if value is not None
        }

    def with_values(self, values: Mapping[tuple[str, ...], Any]) -> Settings:
        """These settings with the value at each path (``("fetch", "proxy")``) replaced."""
        return replace_paths(self, values)

    def with_overrides(self, **changes: Any) -> Settings:
        """These settings with each field (or alias) given a value other than None."""
        return self.with_values(
            {
                self.ALIASES.get(name, (name,)): value
                for name, value in changes.items()
                if value is not None
            }
        )


def variables(model: Any = None) -> list[Variable]:
    """Every variable declared in ``model`` (default: :class:`Settings`), in field order."""
    return [variable for variable, _ in declared_values(model if model is not None else Settings())]


def variable_at(*path: str) -> Variable:
    """The variable of the setting at ``path``, e.g. ``variable_at("fetch", "proxy")``."""
    for variable in variables():
        if variable.path == path:
            return variable
    raise KeyError(f"no setting at {'.'.join(path)}")


def documentation_table() -> str:
    """The settings table of docs/STREAMS.md."""
    rows = [
        "| variable | default | meaning |",
        "|---|---|---|",
        f"| `{Topics.PREFIX.name}` | none | {Topics.PREFIX.help} |",
    ]
    for variable in variables():
        default = variable.format(variable.default) if variable.default is not None else None
        shown = f"`{default}`" if default not in (None, "") else "unset"
        env = variable.env
        bounds = (
            f" ({env.minimum:g}–{env.maximum:g})"
            if env.minimum is not None and env.maximum is not None
            else ""
        )
        rows.append(f"| `{variable.name}` | {shown} | {env.help}{bounds} |")
    return "\n".join(rows)
