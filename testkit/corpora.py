"""Test data from other projects, for the tests and the benchmarks alike: the files are
in ``tests/data/``, whose README gives each one's source and license."""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
WPT_URLTESTDATA = DATA / "wpt-urltestdata.json"
PEER_URL_CASES = DATA / "peer-url-cases.jsonl"
