"""The `miqps` command as external tools call it: real processes, the simulated web as proxy."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import jsonschema
import pytest

from simweb.corpus import generate_corpus
from simweb.server import SimWeb
from simweb.sites import build_sites

MIQPS = str(Path(sys.executable).with_name("miqps"))
SCHEMA = json.loads(
    (Path(__file__).resolve().parents[2] / "schemas" / "miqps-map.schema.json").read_text()
)


def run(*args: str, stdin: str = "", timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [MIQPS, *args], input=stdin, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="module")
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


def test_bad_maps_file_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "maps.jsonl"
    bad.write_text('{"schema": "something else"}\n')
    result = run("canonicalize", "--maps", str(bad), "http://a.example/")
    assert result.returncode == 2
    assert "maps.jsonl:1: not a MIQPS map" in result.stderr
    assert "Traceback" not in result.stderr


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


def test_version_is_the_installed_package_version() -> None:
    result = run("--version")
    assert result.returncode == 0
    assert result.stdout == f"miqps {version('miqps')}\n"


def test_worker_and_maps_options_pass_through_to_the_stream_processor() -> None:
    result = run("worker", "--agents", "canonicalize", "--help")
    assert result.returncode == 0, result.stderr
    assert "usage: miqps worker" in result.stdout and "--agents" in result.stdout
    assert run("maps", "--help").returncode == 0


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
