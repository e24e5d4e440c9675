from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from simweb.__main__ import main
from simweb.corpus import content_key_for
from simweb.sites import build_sites


def test_corpus_command_writes_url_and_key_lines(tmp_path: Path) -> None:
    out = tmp_path / "corpus.tsv"
    assert (
        main(
            [
                "corpus",
                "--family",
                "holdout",
                "--sites",
                "3",
                "--urls-per-site",
                "40",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    lines = out.read_text().splitlines()
    assert len(lines) == 120
    sites = {s.host: s for s in build_sites("holdout", 3)}
    for line in lines:
        url, key = line.split("\t")
        assert content_key_for(sites[url.split("/")[2]], url) == key
    again = tmp_path / "again.tsv"
    main(
        [
            "corpus",
            "--family",
            "holdout",
            "--sites",
            "3",
            "--urls-per-site",
            "40",
            "--out",
            str(again),
        ]
    )
    assert again.read_text() == out.read_text()


def test_serve_command_serves_until_sigterm() -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "simweb",
            "serve",
            "--family",
            "tuning",
            "--sites",
            "2",
            "--port",
            "0",
            "--flaky-rate",
            "0",
            "--no-interstitials",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        banner = proc.stdout.readline()
        assert "t01-shop.sim" in banner, banner
        found = re.search(r"http://127\.0\.0\.1:\d+", banner)
        assert found is not None, banner
        with httpx.Client(proxy=found.group(0), timeout=5) as client:
            assert client.get("http://t01-shop.sim/").status_code == 200
        proc.send_signal(signal.SIGTERM)
        start = time.monotonic()
        assert proc.wait(timeout=5) == 0
        assert time.monotonic() - start < 3
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
