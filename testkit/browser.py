"""The chromium the browser tests and ``bench.dashboard`` drive: Debian's, never a
downloaded one (``MIQPS_CHROMIUM`` names another)."""

from __future__ import annotations

import os

CHROMIUM = os.environ.get("MIQPS_CHROMIUM", "/usr/bin/chromium")
