"""Follow the compacted maps topic into a :class:`miqps.canonical.Canonicalizer`
(:func:`from_kafka`, re-exported as ``streams.from_kafka``): Kafka lives here, so the core
never imports it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from miqps.canonical import Canonicalizer
from streams.maps.feed import MapFeed
from streams.maps.live import LiveMaps
from streams.settings import Settings, Topics


def _no_dead_letters(key: bytes | None, record: bytes) -> None:
    """A reader of the maps is no producer: the feed logs an invalid record and skips it."""


def follow_maps(
    canonicalizer: Canonicalizer, bootstrap: str, topic: str, timeout: float
) -> Callable[[], None]:
    """Read ``topic`` from the beginning into ``canonicalizer``, return once caught up, and
    keep following it in a thread; the function returned stops it. Raises
    :class:`TimeoutError` if the topic cannot be read up to its end within ``timeout``."""
    settings = Settings(
        bootstrap_servers=bootstrap, app_id="miqps-api", topics=replace(Topics(), maps=topic)
    )
    failures: list[BaseException] = []
    live_maps = LiveMaps(reverify_after=0.0, canonicalizer=canonicalizer)
    feed = MapFeed(settings, live_maps, failures.append, dead_letter=_no_dead_letters)
    feed.start()
    waited = 0.0
    while not feed.wait_ready(0.1):
        waited += 0.1
        if failures or waited >= timeout:
            feed.stop()
            cause = f": {failures[0]}" if failures else ""
            raise TimeoutError(
                f"could not read the maps topic {topic!r} from {bootstrap} "
                f"within {timeout:g}s{cause}"
            )
    return feed.stop


class FollowingCanonicalizer(Canonicalizer):
    """A canonicalizer whose maps come from the maps topic, followed until :meth:`close`."""

    _stop_following: Callable[[], None] | None = None

    def close(self) -> None:
        if self._stop_following is not None:
            self._stop_following()
            self._stop_following = None
        super().close()


def from_kafka(
    bootstrap: str,
    *,
    topic: str = "miqps.maps",
    timeout: float = 60.0,
    use_prior: bool = True,
) -> Canonicalizer:
    """A canonicalizer following the compacted maps topic live: it returns once the topic
    has been read up to where it ended, and a background thread installs every later map
    (and removes a tombstoned one) until ``close()``. An invalid record is logged and
    skipped; the last valid map of its domain stays. Raises :class:`TimeoutError` when the
    topic cannot be read within ``timeout`` seconds."""
    canonicalizer = FollowingCanonicalizer(use_prior=use_prior)
    canonicalizer._stop_following = follow_maps(canonicalizer, bootstrap, topic, timeout)
    return canonicalizer
