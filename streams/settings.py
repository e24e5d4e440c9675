"""Worker settings: one frozen, nested model whose every field declares its environment
variable once, where the field is declared.

Fields of this module's classes carry their variable in their metadata (:func:`setting`).
The core's :class:`~miqps.fetch.FetchConfig` and :class:`~miqps.learner.LearnConfig` are
used as they are; the field that holds each declares its fields' variables
(:func:`section`). :func:`variables` lists them all: reading the environment, writing it for
a child worker (:meth:`Settings.to_env`), the command line's options and the documentation
all derive from that list. ``python -m streams.settings`` prints the documentation table.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from types import NoneType, UnionType
from typing import (
    TYPE_CHECKING,
    Any,
    ClassVar,
    Literal,
    TypeVar,
    Union,
    get_args,
    get_origin,
    get_type_hints,
)

from miqps.audit import DEFAULT_AUDIT_SHARE
from miqps.fetch import FetchConfig
from miqps.learner import LearnConfig
from miqps.sampling import SamplingRule

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_APP_ID = "miqps"
ENV_KEY = "miqps.env"
SECTION_KEY = "miqps.section"
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")

Role = Literal["canonicalize", "probe"]
Model = TypeVar("Model", bound="DataclassInstance")


class SettingsError(ValueError):
    """A setting with a value that cannot be used; the message names the variable."""


@dataclass(frozen=True, slots=True)
class Env:
    """An environment variable, what it means, and the bounds of a number."""

    name: str
    help: str
    minimum: float | None = None
    maximum: float | None = None


def setting(
    name: str,
    help: str,
    default: Any,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
) -> Any:
    """A field read from the variable ``name``."""
    return field(default=default, metadata={ENV_KEY: Env(name, help, minimum, maximum)})


def section(**variables: Env) -> dict[str, Any]:
    """The metadata of a field holding a class of the core: the variable of each of its
    fields."""
    return {SECTION_KEY: variables}


@dataclass(frozen=True, slots=True)
class Variable:
    """One declared variable: where its value lives in :class:`Settings`, and its type."""

    env: Env
    path: tuple[str, ...]
    annotation: Any
    default: Any

    @property
    def name(self) -> str:
        return self.env.name

    def parse(self, text: str) -> Any:
        """The value of ``text``, or :class:`SettingsError` naming the variable."""
        try:
            return self.convert(text)
        except ValueError as error:
            raise SettingsError(f"{self.name}={text!r}: {error}") from None

    def convert(self, text: str) -> Any:
        """The value of ``text``, or ValueError saying what is wrong with it."""
        value = _parse(text.strip(), self.annotation)
        env = self.env
        if isinstance(value, int | float) and not isinstance(value, bool):
            if env.minimum is not None and value < env.minimum:
                raise ValueError(f"must be at least {env.minimum:g}")
            if env.maximum is not None and value > env.maximum:
                raise ValueError(f"must be at most {env.maximum:g}")
        return value

    def format(self, value: Any) -> str:
        """``value`` as text that :meth:`parse` reads back."""
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, tuple):
            return ",".join(value)
        return str(value)


def _parse(text: str, annotation: Any) -> Any:
    origin = get_origin(annotation)
    if origin in (Union, UnionType):
        options = [option for option in get_args(annotation) if option is not NoneType]
        return _parse(text, options[0]) if text else None
    if origin is Literal:
        choices = get_args(annotation)
        if text not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return text
    if origin is tuple:
        items = tuple(item.strip() for item in text.split(",") if item.strip())
        if not items:
            raise ValueError("must name at least one item, separated by commas")
        return tuple(_parse(item, get_args(annotation)[0]) for item in items)
    if annotation is bool:
        if text.lower() in TRUE_WORDS:
            return True
        if text.lower() in FALSE_WORDS:
            return False
        raise ValueError(f"not a yes/no value ({'/'.join(TRUE_WORDS + FALSE_WORDS)})")
    if annotation is int:
        try:
            return int(text)
        except ValueError:
            raise ValueError("not an integer") from None
    if annotation is float:
        try:
            number = float(text)
        except ValueError:
            raise ValueError("not a number") from None
        if not math.isfinite(number):
            raise ValueError("not a finite number")
        return number
    if annotation is Path:
        if not text:
            raise ValueError("an empty path")
        return Path(text)
    if annotation is str:
        return text
    raise TypeError(f"no parser for settings of type {annotation!r}")


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
        return _from_env(base, env)

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
        "MIQPS_PARTITIONS", "partitions of the topics a worker creates", 4, minimum=1
    )
    replication_factor: int = setting(
        "MIQPS_REPLICATION_FACTOR",
        "replication factor of the topics a worker creates",
        1,
        minimum=1,
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
                "T: share of conclusive samples that must change to keep",
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
    on_bug: Literal["stop", "retry"] = setting(
        "MIQPS_ON_BUG",
        "on an unexpected exception (a bug), a worker logs it and `stop`s, or backs off "
        "and `retry`s; the batch is not committed either way",
        "stop",
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
        return _from_env(base, env)

    def to_env(self) -> dict[str, str]:
        """Every variable with its value here (unset ones, such as no proxy, left out), as
        :meth:`from_env` reads them back."""
        return {
            variable.name: variable.format(value)
            for variable, value in _values(self)
            if value is not None
        }

    def with_values(self, values: Mapping[tuple[str, ...], Any]) -> Settings:
        """These settings with the value at each path (``("fetch", "proxy")``) replaced."""
        return _replace_paths(self, values)

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
    return [variable for variable, _ in _values(model if model is not None else Settings())]


def variable_at(*path: str) -> Variable:
    """The variable of the setting at ``path``, e.g. ``variable_at("fetch", "proxy")``."""
    for variable in variables():
        if variable.path == path:
            return variable
    raise KeyError(f"no setting at {'.'.join(path)}")


def _values(
    instance: Any, prefix: tuple[str, ...] = (), declared: Mapping[str, Env] | None = None
) -> Iterator[tuple[Variable, Any]]:
    hints = get_type_hints(type(instance))
    defaults = type(instance)()
    for item in fields(instance):
        value = getattr(instance, item.name)
        path = (*prefix, item.name)
        env = declared.get(item.name) if declared is not None else item.metadata.get(ENV_KEY)
        if env is not None:
            yield Variable(env, path, hints[item.name], getattr(defaults, item.name)), value
        elif SECTION_KEY in item.metadata:
            yield from _values(value, path, item.metadata[SECTION_KEY])
        elif is_dataclass(value) and declared is None:
            yield from _values(value, path)


def _from_env(base: Model, env: Mapping[str, str]) -> Model:
    values: dict[tuple[str, ...], Any] = {}
    problems: list[str] = []
    read: list[str] = []
    for variable, _ in _values(base):
        text = env.get(variable.name, "")
        if not text.strip():
            continue
        try:
            values[variable.path] = variable.parse(text)
        except SettingsError as error:
            problems.append(str(error))
        read.append(f"{variable.name}={text!r}")
    if problems:
        raise SettingsError("; ".join(problems))
    try:
        return _replace_paths(base, values)
    except ValueError as error:
        raise SettingsError(f"{error} (from {', '.join(read)})") from None


def _replace_paths(instance: Model, values: Mapping[tuple[str, ...], Any]) -> Model:
    direct: dict[str, Any] = {}
    nested: dict[str, dict[tuple[str, ...], Any]] = {}
    for path, value in values.items():
        if len(path) == 1:
            direct[path[0]] = value
        else:
            nested.setdefault(path[0], {})[path[1:]] = value
    for name, inner in nested.items():
        direct[name] = _replace_paths(getattr(instance, name), inner)
    return replace(instance, **direct) if direct else instance


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


if __name__ == "__main__":
    print(documentation_table())
