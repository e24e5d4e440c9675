"""``python -m streams worker|maps|dashboard ...``: the same as ``miqps ...``."""

from __future__ import annotations

import sys

from miqps.cli import main

if __name__ == "__main__":
    if len(sys.argv) < 2:
        print("usage: python -m streams {worker,maps,dashboard} [options]", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1:]))
