"""``miqps canonicalize`` as external tools call it: real processes, on the maps of a learning
run and on maps written for the test."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.miqps.cli.support import MIQPS, run

pytestmark = pytest.mark.timeout(60)


def test_canonicalize_prints_one_line_per_input_in_order(
    learned: tuple[Path, list[str], str],
) -> None:
    maps_path, urls, _ = learned
    inputs = [urls[0], "javascript:alert(1)", urls[1], "", urls[2]]
    result = run("canonicalize", "--maps", str(maps_path), stdin="\n".join(inputs) + "\n")
    assert result.returncode == 0
    lines = result.stdout.split("\n")[:-1]
    assert len(lines) == len(inputs)
    assert lines[1] == "" and lines[3] == ""
    assert all(lines[i].startswith("http://") for i in (0, 2, 4))
    assert "line 2: invalid URL" in result.stderr
    assert "line 4: invalid URL: empty" in result.stderr


def test_canonicalize_takes_urls_as_arguments_and_is_idempotent(
    learned: tuple[Path, list[str], str],
) -> None:
    maps_path, urls, _ = learned
    first = run("canonicalize", "--maps", str(maps_path), *urls[:20]).stdout.splitlines()
    second = run("canonicalize", "--maps", str(maps_path), *first).stdout.splitlines()
    assert len(first) == 20
    assert first == second


def test_canonicalize_json_reports_kept_dropped_and_deciding_layer(
    learned: tuple[Path, list[str], str],
) -> None:
    maps_path, urls, _ = learned
    tracked = next(u for u in urls if "utm_" in u)
    result = run("canonicalize", "--maps", str(maps_path), "--json", tracked, "mailto:x@y")
    first, second = (json.loads(line) for line in result.stdout.splitlines())
    assert first["url"] == tracked
    assert set(first["kept"]) | set(first["dropped"]) == {
        p.split("=")[0] for p in tracked.split("?", 1)[1].split("&")
    }
    assert set(first["layers"]) == set(first["kept"]) | set(first["dropped"])
    assert first["status"] in ("learned", "provisional")
    assert "error" in second


def test_canonicalize_without_maps_uses_only_the_cold_start_prior() -> None:
    result = run("canonicalize", "http://a.example/p?utm_source=x&id=1&gclid=2")
    assert result.stdout == "http://a.example/p?id=1\n"
    result = run("canonicalize", "--no-prior", "http://a.example/p?utm_source=x&id=1")
    assert result.stdout == "http://a.example/p?id=1&utm_source=x\n"


def test_canonicalize_plain_and_json_agree_and_show_matrix_parameters(tmp_path: Path) -> None:
    from miqps.maps import DomainMap, Layer, ParamEvidence, PatternDecision, Verification
    from miqps.maps import write_maps as write

    AT = "2026-12-03T00:00:00Z"

    def evidence(keep: bool, defaults: list[str] | None = None) -> ParamEvidence:
        return ParamEvidence(
            "keep" if keep else "drop",
            Layer.LEARNED,
            3,
            3 * keep,
            3 * (not keep),
            0,
            defaults or [],
        )

    patterns = {
        "/p/*?;jsessionid&id": PatternDecision(
            frozenset({"id"}),
            frozenset({";jsessionid"}),
            {"id": evidence(True), ";jsessionid": evidence(False)},
            Verification(),
            AT,
            3,
        ),
        "/a?hl&id&utm_source": PatternDecision(
            frozenset({"hl", "id"}),
            frozenset({"utm_source"}),
            {"hl": evidence(True, ["hl=en"]), "id": evidence(True), "utm_source": evidence(False)},
            Verification(),
            AT,
            3,
        ),
    }
    write(tmp_path / "maps.jsonl", [DomainMap("java.example", 1, AT, patterns)])
    lines = [
        "http://java.example/p/12;jsessionid=AB12?id=3",
        "http://java.example/a?utm_source=a&utm_source=b&hl=en&id=7",
        "http://java.example/docs/guide;v=2",
        "http://java.example/%%36%31?x=%%32%45",
        "not a url",
    ]
    maps = ["--maps", str(tmp_path / "maps.jsonl")]
    plain = run("canonicalize", *maps, stdin="\n".join(lines) + "\n")
    as_json = run("canonicalize", "--json", *maps, stdin="\n".join(lines) + "\n")
    decisions = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert plain.stdout.splitlines() == [
        "http://java.example/p/12?id=3",
        "http://java.example/a?id=7",
        "http://java.example/docs/guide;v=2",
        "http://java.example/%%361?x=%%32E",
        "",
    ]
    assert [d.get("canonical_url", "") for d in decisions] == plain.stdout.splitlines()
    assert (decisions[0]["pattern"], decisions[0]["kept"], decisions[0]["dropped"]) == (
        "/p/*?;jsessionid&id",
        ["id"],
        [";jsessionid"],
    )
    assert decisions[2]["kept"] == [";v"] and decisions[2]["status"] == "provisional"
    # hl=en is its confirmed default value; utm_source has no effect.
    assert (decisions[1]["dropped"], decisions[1]["removed_as_default"]) == (
        ["hl", "utm_source"],
        ["hl"],
    )
    assert decisions[1]["layers"]["hl"] == "learned"
    assert all(decisions[i]["removed_as_default"] == [] for i in (0, 2, 3))


def _canonicalize_bytes(*args: str, stdin: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [MIQPS, "canonicalize", *args], input=stdin, capture_output=True, timeout=60, check=False
    )


def test_json_is_valid_unicode_for_lines_that_are_not_utf8_and_agrees_with_plain() -> None:
    """Bytes that are not UTF-8 are percent-encoded in the JSON's ``url``, as a URL would
    carry them: strict readers take every line, and the line is invalid in both outputs."""
    lines = [
        b"http://a.example/p\xff\xfe?x=1",
        b"http://a.example/p?id=1&utm_source=x",
        b"http://a.example/q?\xe9t\xc3=1",
        "http://a.example/caf\u00e9?x=2".encode(),
    ]
    stdin = b"\n".join(lines) + b"\n"
    plain = _canonicalize_bytes(stdin=stdin)
    as_json = _canonicalize_bytes("--json", stdin=stdin)
    assert plain.returncode == as_json.returncode == 0
    decisions = []
    for line in as_json.stdout.decode("utf-8").splitlines():
        decision = json.loads(line)
        json.dumps(decision, ensure_ascii=False).encode("utf-8")  # no lone surrogate
        decisions.append(decision)
    assert [d["url"] for d in decisions] == [
        "http://a.example/p%FF%FE?x=1",
        "http://a.example/p?id=1&utm_source=x",
        "http://a.example/q?%E9t%C3=1",
        "http://a.example/caf\u00e9?x=2",
    ]
    assert [d.get("canonical_url", "") for d in decisions] == plain.stdout.decode().splitlines()
    assert [bool(d.get("error")) for d in decisions] == [True, False, True, False]
    argument = _canonicalize_bytes("--json", os.fsdecode(lines[0]), stdin=b"")
    assert json.loads(argument.stdout)["url"] == "http://a.example/p%FF%FE?x=1"


def test_maps_read_through_an_index_give_the_same_output(
    learned: tuple[Path, list[str], str], tmp_path: Path
) -> None:
    """``--maps-index`` (what maps over 64 MiB get by default) prints what holding every
    map prints, plain and ``--json``; the index is built once, then opened as it is."""
    maps, urls, _ = learned
    stdin = "\n".join([*urls, "not a url", "https://elsewhere.example/?utm_source=x&id=1"])
    index = ["--maps-index", str(tmp_path / "index")]
    builds = []
    for extra in ([], ["--json"]):
        held = run("canonicalize", "--maps", str(maps), *extra, stdin=stdin)
        first = run("canonicalize", "--maps", str(maps), *index, *extra, stdin=stdin)
        again = run(
            "canonicalize", "--maps", str(maps), *index, "--maps-cache", "1", *extra, stdin=stdin
        )
        assert held.returncode == first.returncode == again.returncode == 0, first.stderr
        assert first.stdout == again.stdout == held.stdout
        builds += [first.stderr, again.stderr]
        assert "learned" in held.stdout or not extra
    assert ["indexing" in stderr for stderr in builds] == [True, False, False, False]


def test_an_indexed_maps_file_with_a_bad_line_says_what_reading_it_says(
    learned: tuple[Path, list[str], str], tmp_path: Path
) -> None:
    maps, _, _ = learned
    broken = tmp_path / "maps.jsonl"
    first, *rest = maps.read_text().splitlines()
    broken.write_text("\n".join([first, '{"domain": "x.example"', *rest, first]) + "\n")
    held = run("canonicalize", "--maps", str(broken), stdin="")
    indexed = run("canonicalize", "--maps", str(broken), "--maps-index", str(tmp_path / "i"))
    assert held.returncode == indexed.returncode == 2
    assert indexed.stderr.splitlines()[-2:] == held.stderr.splitlines()[-2:]
    skip = ["--skip-invalid"]
    held = run("canonicalize", "--maps", str(broken), *skip, "https://a.example/?x=1")
    indexed = run(
        "canonicalize",
        "--maps",
        str(broken),
        *skip,
        "--maps-index",
        str(tmp_path / "i"),
        "https://a.example/?x=1",
    )
    assert held.returncode == indexed.returncode == 0
    assert held.stdout == indexed.stdout
    skipped = [line for line in held.stderr.splitlines() if "skipped:" in line]
    assert [line for line in indexed.stderr.splitlines() if "skipped:" in line] == skipped
    assert len(skipped) == 2
    assert run("canonicalize", "--maps", str(maps), "--maps-cache", "0").returncode == 2
