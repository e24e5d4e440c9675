"""What the commands share: reading URL lists and maps files, and saying what is wrong with
them."""

from __future__ import annotations

from pathlib import Path

import pytest

from miqps.cli.common import MAX_INVALID_MESSAGES, load_maps, read_urls
from miqps.maps import DomainMap, write_maps
from tests.miqps.cli.support import run

AT = "2026-01-01T00:00:00Z"


def test_bad_maps_file_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "maps.jsonl"
    bad.write_text('{"schema": "something else"}\n')
    result = run("canonicalize", "--maps", str(bad), "http://a.example/")
    assert result.returncode == 2
    assert "maps.jsonl:1: not a MIQPS map" in result.stderr
    assert "Traceback" not in result.stderr


def test_read_urls_counts_blank_and_invalid_lines_and_caps_the_messages(
    capsys: pytest.CaptureFixture[str],
) -> None:
    lines = ["http://a.example/p?id=1", "  ", *(["ftp://x/"] * (MAX_INVALID_MESSAGES + 3)), ""]
    urls, blank, invalid = read_urls(lines, "urls.txt")
    assert ([url.url for url in urls], blank, invalid) == (
        ["http://a.example/p?id=1"],
        2,
        MAX_INVALID_MESSAGES + 3,
    )
    messages = capsys.readouterr().err.splitlines()
    assert len(messages) == MAX_INVALID_MESSAGES + 1
    assert messages[0] == "urls.txt:3: skipped: scheme 'ftp' is not http or https"
    assert messages[-1] == "urls.txt: 3 more invalid lines skipped"


def test_load_maps_skips_invalid_lines_only_when_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "maps.jsonl"
    write_maps(path, [DomainMap(domain, 1, AT) for domain in ("a.example", "b.example")])
    path.write_text(path.read_text() + "not json\n")
    assert load_maps(path, False, "miqps x", "maps") is None
    err = capsys.readouterr().err
    assert "miqps x: cannot read maps: " in err and "use --skip-invalid" in err
    loaded = load_maps(path, True, "miqps x", "maps")
    assert loaded is not None
    assert (sorted(loaded[0]), loaded[1]) == (["a.example", "b.example"], 1)
    assert f"miqps x: {path}: 1 invalid map lines skipped, 2 maps read" in capsys.readouterr().err
    assert load_maps(tmp_path / "none.jsonl", True, "miqps x", "maps") is None
    assert "miqps x: cannot read maps: " in capsys.readouterr().err
