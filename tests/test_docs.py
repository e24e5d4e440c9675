"""The documentation: the site builds in strict mode, and the README stays short."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README_MAX_LINES = 200


def test_the_site_builds_in_strict_mode_without_a_warning(tmp_path: Path) -> None:
    """A broken link, a missing anchor or a page left out of ``nav`` fails the build."""
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    warnings = [line for line in built.stderr.splitlines() if "WARNING" in line]
    assert built.returncode == 0, built.stderr
    assert warnings == []
    assert (tmp_path / "site" / "index.html").is_file()


def test_the_readme_is_read_in_five_minutes() -> None:
    lines = (REPO / "README.md").read_text("utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"


def test_the_readme_links_only_to_files_that_exist() -> None:
    text = (REPO / "README.md").read_text("utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    missing = [t for t in targets if "://" not in t and not (REPO / t).exists()]
    assert targets and missing == []
