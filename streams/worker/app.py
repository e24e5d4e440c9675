"""The Faust app of one worker process, with the agents of its roles.

Every worker joins the same Faust consumer group (the app id); the assignor only gives a
worker the partitions of topics its agents subscribe to, so canonicalize-only and
probe-only workers can share the group and scale apart. Each assignment sets the maps
partitions the process follows: those of its agents' partitions
(:mod:`streams.worker.ownedmaps`).
"""

from __future__ import annotations

from typing import Any

import faust
from faust.types import TP

from streams.agents import pattern_stats, probe
from streams.kafka.tables import discard_corrupt_stores
from streams.worker.runtime import CANONICALIZE, PROBE, Runtime


def broker_urls(bootstrap_servers: str) -> list[str]:
    return [
        f"kafka://{server.strip()}" for server in bootstrap_servers.split(",") if server.strip()
    ]


def create_app(runtime: Runtime) -> faust.App:
    settings = runtime.settings
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    app = faust.App(
        settings.app_id,
        broker=broker_urls(settings.bootstrap_servers),
        store="rocksdb://",
        datadir=str(settings.state_dir),
        topic_partitions=runtime.partitions[settings.topics.samples],
        topic_replication_factor=settings.replication_factor,
        topic_disable_leader=True,
        table_standby_replicas=0,
        web_enabled=False,
        consumer_auto_offset_reset="earliest",
        producer_max_request_size=settings.topic_max_message_bytes,
        consumer_max_fetch_size=settings.topic_max_message_bytes,
        producer_linger=0.005,
        broker_session_timeout=10.0,
        broker_heartbeat_interval=2.0,
        autodiscover=False,
    )
    discard_corrupt_stores(app.conf.tabledir)
    runtime.metrics.follow_app(app)

    async def follow_owned_maps(sender: Any, /, *args: Any, signal: Any, **_: Any) -> None:
        assigned: set[TP] = args[0]
        runtime.maps.assigned(assigned)

    app.on_partitions_assigned.connect(follow_owned_maps)

    if CANONICALIZE in runtime.roles:
        pattern_stats.register(app, runtime)
    if PROBE in runtime.roles:
        probe.register(app, runtime)
    return app
