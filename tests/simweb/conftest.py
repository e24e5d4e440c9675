from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from simweb.server import SimWeb
from simweb.sites import Site, build_sites


@pytest.fixture(scope="session")
def tuning_sites() -> list[Site]:
    return build_sites("tuning", 6)


@pytest.fixture(scope="session")
def holdout_sites() -> list[Site]:
    return build_sites("holdout", 6)


@pytest.fixture(scope="session")
def validation_sites() -> list[Site]:
    return build_sites("validation", 6)


@pytest.fixture(scope="session", params=["tuning", "holdout", "validation"])
def family_sites(
    request: pytest.FixtureRequest,
    tuning_sites: list[Site],
    holdout_sites: list[Site],
    validation_sites: list[Site],
) -> list[Site]:
    families = {"tuning": tuning_sites, "holdout": holdout_sites, "validation": validation_sites}
    return families[request.param]


@pytest.fixture(scope="session")
def all_sites(tuning_sites: list[Site], holdout_sites: list[Site]) -> list[Site]:
    return tuning_sites + holdout_sites


@pytest.fixture(scope="module")
def web(all_sites: list[Site]) -> Iterator[SimWeb]:
    with SimWeb(
        all_sites, rate_limit_per_second=0, flaky_rate=0, hang_seconds=1.0, interstitials=False
    ) as server:
        yield server


@pytest.fixture
def client(web: SimWeb) -> Iterator[httpx.Client]:
    with httpx.Client(proxy=web.proxy_url, timeout=10, follow_redirects=False) as c:
        yield c
