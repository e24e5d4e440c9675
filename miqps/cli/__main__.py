"""``python -m miqps.cli ...``: the same as ``miqps ...``."""

from __future__ import annotations

import sys

from miqps.cli import main

sys.exit(main())
