"""A crawl of the simulated web sent as observations (:mod:`miqps.observations`), for the
benchmark and the tests of the stream's observations."""

from __future__ import annotations

from collections.abc import Sequence

import httpx

from miqps.observations import InvalidObservation, observation_record
from miqps.urls import InvalidURL, parse
from simweb.server import SimWeb


def crawl_observations(web: SimWeb, urls: Sequence[str]) -> list[tuple[bytes, bytes]]:
    """Fetch each of ``urls`` once through the simulated web, redirects followed, and
    return the (key, value) of its observation, as the Scrapy add-on writes them."""
    records: list[tuple[bytes, bytes]] = []
    with httpx.Client(proxy=web.proxy_url, timeout=10, trust_env=False) as client:
        for url in urls:
            try:
                response = client.get(
                    url, headers={"Accept-Encoding": "identity"}, follow_redirects=True
                )
                value = observation_record(
                    url,
                    response.status_code,
                    response.content,
                    final_url=str(response.url),
                    redirects=len(response.history),
                    content_type=response.headers.get("Content-Type", ""),
                )
                key = parse(url).host.encode()
            except (httpx.HTTPError, InvalidObservation, InvalidURL):
                continue
            records.append((key, value))
    return records
