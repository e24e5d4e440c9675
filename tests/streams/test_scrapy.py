"""The Scrapy add-on: a real crawl of the simulated web with and without it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from scrapy import Request
from scrapy.settings import Settings
from scrapy.utils.request import RequestFingerprinter
from scrapy.utils.test import get_crawler

from miqps import Canonicalizer
from miqps.fetch import FetchConfig
from miqps.learner import LearnConfig
from miqps.maps import DomainMap, merge_update, write_maps
from simweb.corpus import content_key_for, generate_corpus
from simweb.server import SimWeb
from simweb.sites import Site, build_sites
from streams.scrapy import Addon, MapsRequestFingerprinter
from streams.settings import Settings as StreamSettings
from streams.tools import TopicReader
from tests.miqps.conftest import learn_on
from tests.miqps.test_api import HOST, maps_topic, product_map

__all__ = ["maps_topic"]  # a fixture shared with test_api


def _fingerprinter(maps: list[DomainMap], tmp_path: Path,
                   **settings: Any) -> MapsRequestFingerprinter:
    path = tmp_path / "maps.jsonl"
    write_maps(path, maps)
    crawler = get_crawler(settings_dict={"MIQPS_MAPS": str(path), **settings})
    return MapsRequestFingerprinter.from_crawler(crawler)


def test_mapped_domains_are_fingerprinted_by_canonical_url(tmp_path: Path) -> None:
    fingerprinter = _fingerprinter([product_map()], tmp_path)
    fingerprint = fingerprinter.fingerprint
    base = f"https://{HOST}/p/1?id=7&ref=a&sid=1"
    assert fingerprint(Request(base)) == fingerprint(Request(f"https://{HOST}/p/1?sid=9&id=7&ref=b"))
    assert fingerprint(Request(base)) != fingerprint(Request(f"https://{HOST}/p/1?id=8&ref=a&sid=1"))
    assert fingerprint(Request(base)) != fingerprint(Request(base, method="POST"))
    # A site redirecting to the canonical URL: the redirect is not its source's duplicate.
    redirected = Request(f"https://{HOST}/p/1?id=7&ref=a&sid=1",
                         meta={"redirect_urls": [f"https://{HOST}/p/1?id=7&ref=x&sid=2"]})
    assert fingerprint(redirected) != fingerprint(Request(base))
    stats = fingerprinter.stats
    assert stats is not None
    assert stats.get_value("miqps/params_dropped") == 2 * 8  # ref and sid, 8 requests
    assert stats.get_value("miqps/domains_without_map") is None


def test_domains_without_a_map_keep_the_fallback_fingerprint(tmp_path: Path) -> None:
    fingerprinter = _fingerprinter([product_map()], tmp_path)
    default = RequestFingerprinter()
    for url in ("https://other.test/p/1?id=7&ref=a", "https://third.test/?utm_source=x"):
        assert fingerprinter.fingerprint(Request(url)) == default.fingerprint(Request(url))
    stats = fingerprinter.stats
    assert stats is not None and stats.get_value("miqps/domains_without_map") == 2


def test_the_addon_installs_the_fingerprinter_and_keeps_the_old_one_as_fallback() -> None:
    other = f"{__name__}.OtherFingerprinter"
    settings = Settings({"REQUEST_FINGERPRINTER_CLASS": other})
    Addon().update_settings(settings)
    assert settings["REQUEST_FINGERPRINTER_CLASS"] is MapsRequestFingerprinter
    assert settings["MIQPS_FALLBACK_REQUEST_FINGERPRINTER_CLASS"] == other
    Addon().update_settings(settings)  # enabled twice: the fallback stays
    assert settings["MIQPS_FALLBACK_REQUEST_FINGERPRINTER_CLASS"] == other


class OtherFingerprinter(RequestFingerprinter):
    """A project's own fingerprinter, which the add-on keeps for domains without a map."""


def test_a_crawl_without_maps_is_refused_clearly() -> None:
    with pytest.raises(ValueError, match="MIQPS_MAPS"):
        MapsRequestFingerprinter.from_crawler(get_crawler())


# --- a real crawl --------------------------------------------------------------------

@dataclass
class Crawl:
    fetched: int
    item_urls: list[str]
    lost: set[str]
    stats: dict[str, Any]


@dataclass
class SimWebCrawls:
    without: Crawl
    with_addon: Crawl
    maps_path: Path


def _crawl(tmp_path: Path, config: dict[str, Any], sites: dict[str, Site]) -> Crawl:
    config_path = tmp_path / f"crawl-{bool(config['maps'])}.json"
    out_path = config_path.with_suffix(".out.json")
    config_path.write_text(json.dumps(config), "utf-8")
    subprocess.run([sys.executable, "-m", "tests.streams.scrapy_crawl", str(config_path),
                    str(out_path)], check=True, timeout=240)
    out = json.loads(out_path.read_text("utf-8"))

    def key(url: str) -> str:
        return content_key_for(sites[urlsplit(url).hostname or ""], url)

    scraped = {key(url) for url in out["items"]}
    # Ground truth: every page the crawl was sent to (fetched or filtered as a duplicate)
    # that exists must be among the items; a missing page is no item.
    lost = {k for k in map(key, out["discovered"]) if k not in scraped
            and not k.endswith("|notfound")}
    stats = out["stats"]
    return Crawl(stats.get("downloader/response_count", 0), out["items"], lost, stats)


@pytest.fixture(scope="module")
def simweb_crawls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimWebCrawls]:
    tmp_path = tmp_path_factory.mktemp("crawl")
    site_list = build_sites("tuning", 3, seed=5)
    sites = {site.host: site for site in site_list}
    learning = generate_corpus(site_list, 300, seed=5)
    seeds = [entry.url for entry in generate_corpus(site_list, 20, seed=6)]
    with SimWeb(site_list, seed=5, rate_limit_per_second=300, hang_seconds=2.0,
                flaky_rate=0.0) as web:
        fetch_config = FetchConfig(proxy=web.proxy_url, per_host_rate=200, timeout=2.0,
                                   backoff_base=0.05)
        maps, *_ = learn_on(web, learning, LearnConfig(), fetch_config)
    maps_path = tmp_path / "maps.jsonl"
    write_maps(maps_path, [merge_update(None, m) for m in maps.values()])
    with SimWeb(site_list, seed=6, rate_limit_per_second=1000, flaky_rate=0.0,
                interstitials=False) as web:
        config = {"proxy": web.proxy_url, "start_urls": seeds, "hosts": sorted(sites),
                  "depth": 1, "maps": None}
        without = _crawl(tmp_path, config, sites)
        with_addon = _crawl(tmp_path, {**config, "maps": str(maps_path)}, sites)
    yield SimWebCrawls(without, with_addon, maps_path)


@pytest.mark.timeout(300)
def test_the_addon_loses_no_item_and_fetches_fewer_pages(simweb_crawls: SimWebCrawls) -> None:
    without, with_addon = simweb_crawls.without, simweb_crawls.with_addon
    print(f"\nwithout the add-on: {without.fetched} pages fetched, {len(without.item_urls)} items, "
          f"{len(without.lost)} lost\nwith the add-on:    {with_addon.fetched} pages fetched, "
          f"{len(with_addon.item_urls)} items, {len(with_addon.lost)} lost "
          f"({1 - with_addon.fetched / without.fetched:.0%} fewer pages)")
    assert without.lost == set()
    assert with_addon.lost == set()
    assert with_addon.fetched < without.fetched
    stats = with_addon.stats
    assert stats["miqps/params_dropped"] > 0
    assert stats["miqps/duplicates_filtered"] > 0
    assert "miqps/requests_canonicalized" not in without.stats


def test_the_addon_fetches_the_sites_own_urls(simweb_crawls: SimWebCrawls) -> None:
    """Requests are not rewritten: pages are fetched at the URL the site gave, tracking
    parameters included, though their fingerprint left them out."""
    canonicalizer = Canonicalizer.from_file(simweb_crawls.maps_path)
    fetched = simweb_crawls.with_addon.item_urls
    assert any(canonicalizer.canonicalize(url) != url for url in fetched)


@pytest.mark.kafka
@pytest.mark.timeout(120)
def test_unlearned_patterns_are_fed_to_the_raw_topic(
        maps_topic: tuple[str, Callable[[DomainMap | None], None]], tmp_path: Path) -> None:
    bootstrap, topic = maps_topic[0].split("|")  # an empty topic of our own
    fingerprinter = _fingerprinter([product_map()], tmp_path, MIQPS_FEED_UNLEARNED=bootstrap,
                                   MIQPS_RAW_TOPIC=topic, MIQPS_FEED_PER_PATTERN=2)
    learned = [f"https://{HOST}/p/1?id={n}&ref=a&sid=1" for n in range(3)]
    unlearned = [f"https://{HOST}/p/1?id={n}&color=red" for n in range(3)]
    unmapped = ["https://other.test/?q=1"]
    for url in learned + unlearned + unmapped:
        fingerprinter.fingerprint(Request(url))
    fingerprinter.close()
    with TopicReader(StreamSettings(bootstrap_servers=bootstrap), topic) as reader:
        assert reader.wait_for(3, 30)
        reader.poll(1.0)
        sent = sorted(value.decode() for _, value, _ in reader.records if value)
    assert sent == sorted(unlearned[:2] + unmapped)
    stats = fingerprinter.stats
    assert stats is not None and stats.get_value("miqps/unlearned_fed") == 3
