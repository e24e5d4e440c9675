"""Test data from other projects, kept in the repository; README.md beside this file gives
each file's source and license. The paths are named once, in :mod:`testkit.corpora`."""

from __future__ import annotations

from testkit.corpora import DATA, PEER_URL_CASES, WPT_URLTESTDATA

__all__ = ["DATA", "PEER_URL_CASES", "WPT_URLTESTDATA"]
