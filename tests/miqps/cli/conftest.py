"""The maps of one ``miqps learn`` run on the simulated web, shared by the tests of the
commands that read maps."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from simweb.corpus import generate_corpus
from simweb.server import SimWeb
from simweb.sites import build_sites
from tests.miqps.cli.support import run


@pytest.fixture(scope="package")
def learned(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, list[str], str]]:
    folder = tmp_path_factory.mktemp("cli")
    sites = build_sites("tuning", 2, seed=11)
    urls = sorted({entry.url for entry in generate_corpus(sites, 250, seed=11)})
    lines = [urls[0], "", "not a url", "ftp://files.example/x", *urls[1:], "   "]
    (folder / "urls.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with SimWeb(sites, seed=11, rate_limit_per_second=0) as web:
        result = run(
            "learn",
            "--urls",
            str(folder / "urls.txt"),
            "--out",
            str(folder / "maps.jsonl"),
            "--proxy",
            web.proxy_url,
            "--timeout",
            "1",
            "--rate",
            "60",
        )
    assert result.returncode == 0, result.stderr
    yield folder / "maps.jsonl", urls, result.stdout + result.stderr
