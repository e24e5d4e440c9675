"""Test data from other projects, kept in the repository; README.md beside this file gives
each file's source and license."""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parent
WPT_URLTESTDATA = DATA / "wpt-urltestdata.json"
PEER_URL_CASES = DATA / "peer-url-cases.jsonl"
