"""``streams.scrapy``, the add-on's 0.2.0 name, still enables :mod:`miqps.scrapy`."""

from __future__ import annotations

from pathlib import Path

from scrapy import Request
from scrapy.utils.test import get_crawler

from miqps.maps import write_maps
from miqps.scrapy import MapsRequestFingerprinter
from tests.miqps.test_api import HOST, product_map


def test_the_0_2_0_addon_path_installs_the_maps_fingerprinter(tmp_path: Path) -> None:
    path = tmp_path / "maps.jsonl"
    write_maps(path, [product_map()])
    crawler = get_crawler(
        settings_dict={"ADDONS": {"streams.scrapy.Addon": 600}, "MIQPS_MAPS": str(path)}
    )
    crawler._apply_settings()
    fingerprinter = crawler.request_fingerprinter
    assert isinstance(fingerprinter, MapsRequestFingerprinter)
    fingerprint = fingerprinter.fingerprint
    assert fingerprint(Request(f"https://{HOST}/p/1?id=7&ref=a&sid=1")) == fingerprint(
        Request(f"https://{HOST}/p/1?sid=9&id=7&ref=b")
    )
