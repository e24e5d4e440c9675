"""``miqps learn`` as external tools call it: real processes, the simulated web as proxy."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import jsonschema
import pytest

from testkit.schemas import map_schema
from tests.miqps.cli.support import MIQPS, run

pytestmark = pytest.mark.timeout(60)

SCHEMA = map_schema()


def test_learn_skips_and_counts_blank_and_invalid_lines(
    learned: tuple[Path, list[str], str],
) -> None:
    _, urls, output = learned
    assert f"URLs read: {len(urls)} valid" in output
    assert "2 blank, 2 invalid" in output
    assert "scheme 'ftp' is not http or https" in output


def test_learn_writes_one_schema_valid_map_per_domain(
    learned: tuple[Path, list[str], str],
) -> None:
    maps_path, urls, output = learned
    documents = [json.loads(line) for line in maps_path.read_text().splitlines()]
    assert sorted(d["domain"] for d in documents) == sorted({u.split("/")[2] for u in urls})
    for document in documents:
        jsonschema.validate(document, SCHEMA)
        assert document["version"] == 1
    for word in ("patterns:", "kept", "dropped", "fetches:", "inconclusive samples:", "time:"):
        assert word in output


def test_learn_on_an_existing_file_decides_only_what_it_lacks(
    learned: tuple[Path, list[str], str], tmp_path: Path
) -> None:
    maps_path, _, _ = learned
    again = tmp_path / "maps.jsonl"
    again.write_bytes(maps_path.read_bytes())
    result = run("learn", "--urls", str(maps_path.parent / "urls.txt"), "--out", str(again))
    assert result.returncode == 0, result.stderr
    assert "patterns: 0 decided" in result.stdout and "fetches: 0 " in result.stdout
    assert again.read_bytes() == maps_path.read_bytes(), "nothing new: no new version"


def test_missing_urls_file_is_a_clear_error(tmp_path: Path) -> None:
    result = run("learn", "--urls", str(tmp_path / "nope.txt"), "--out", str(tmp_path / "m"))
    assert result.returncode == 2
    assert "cannot read" in result.stderr and "Traceback" not in result.stderr


def test_learn_refuses_private_targets_without_a_proxy(tmp_path: Path) -> None:
    urls = tmp_path / "urls.txt"
    urls.write_text("http://127.0.0.1:9/p?id=1&utm_source=x\nhttp://[::1]:9/p?id=2&sid=3\n")
    result = run("learn", "--urls", str(urls), "--out", str(tmp_path / "maps.jsonl"))
    assert result.returncode == 3, "nothing decided, every probe refused: a failure"
    assert "fetches: 0 " in result.stdout and "0 failed, 4 refused" in result.stdout
    assert "refused: loopback address: 4 (allowed with --allow-private)" in result.stdout
    assert "every probe failed" in result.stderr and "--allow-private" in result.stderr
    assert "2 left undecided" in result.stdout
    documents = [json.loads(line) for line in (tmp_path / "maps.jsonl").read_text().splitlines()]
    assert len(documents) == 2, "one map per domain, even with nothing decided"
    for document in documents:
        assert document["patterns"] == {}, "no evidence, no decision: asked again next run"


def test_learn_where_no_host_resolves_fails_and_says_what_to_try(tmp_path: Path) -> None:
    urls = tmp_path / "urls.txt"
    urls.write_text("http://shop.invalid/p?id=1&utm_source=x\nhttp://news.invalid/a?id=2\n")
    result = run("learn", "--urls", str(urls), "--out", str(tmp_path / "maps.jsonl"))
    assert result.returncode == 3, result.stdout
    assert "patterns: 0 decided" in result.stdout and "cannot resolve" in result.stdout
    assert "domains: 2 read, 0 with a pattern decided" in result.stdout, "none learned"
    for hint in ("nothing could be decided", "--proxy", "DNS", "--allow-private"):
        assert hint in result.stderr
    assert "Traceback" not in result.stderr


def test_learn_skips_an_invalid_utf8_line_like_canonicalize(tmp_path: Path) -> None:
    urls = tmp_path / "urls.txt"
    line = b"http://127.0.0.1:9/p?ref=\xff\xfe"
    urls.write_bytes(line + b"\nhttp://127.0.0.1:9/p?id=1\n")
    result = run("learn", "--urls", str(urls), "--out", str(tmp_path / "maps.jsonl"))
    assert "URLs read: 1 valid (1 distinct), 0 blank, 1 invalid" in result.stdout
    assert f"{urls}:1: skipped: not valid UTF-8" in result.stderr
    canonicalized = subprocess.run(
        [MIQPS, "canonicalize"], input=line + b"\n", capture_output=True, check=False
    )
    assert canonicalized.stdout == b"\n" and b"not valid UTF-8" in canonicalized.stderr
