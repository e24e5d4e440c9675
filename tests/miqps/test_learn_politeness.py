"""``miqps learn`` on sites that ask something of a crawler: what is fetched, and how the
patterns left undecided are named in the summary."""

from __future__ import annotations

import io
import itertools
import json
from collections.abc import Iterator
from contextlib import redirect_stdout
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from miqps.cli import main
from simweb.polite import PoliteWeb
from tests.miqps.loopback import send_html, serve

SHELL = (
    b"<html><head><script src='/app.js'></script></head><body><div id='root'></div>"
    b"<script>boot()</script></body></html>"
)


class _ShellSite(BaseHTTPRequestHandler):
    """Every page a client-side shell; no robots.txt."""

    def do_GET(self) -> None:
        if self.path.endswith("/robots.txt"):
            send_html(self, 404, b"")
        else:
            send_html(self, 200, SHELL)

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def shell_proxy() -> Iterator[str]:
    yield from serve(_ShellSite)


def _learn(tmp_path: Path, proxy: str, urls: list[str], *extra: str) -> tuple[int, str]:
    listed = tmp_path / "urls.txt"
    listed.write_text("\n".join(urls) + "\n", encoding="utf-8")
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(
            [
                "learn",
                "--urls",
                str(listed),
                "--out",
                str(tmp_path / "maps.jsonl"),
                "--proxy",
                proxy,
                "--rate",
                "100",
                "--no-progress",
                *extra,
            ]
        )
    return code, out.getvalue()


def test_learn_never_fetches_disallowed_paths_and_names_the_patterns_disallowed(
    tmp_path: Path,
) -> None:
    urls = [
        f"http://private.polite.test/account/orders?id={n}&utm_source=s{n}" for n in range(8)
    ] + [f"http://broken.polite.test/p/{n}?id={n}&utm_source=s{n}" for n in range(8)]
    with PoliteWeb() as web:
        code, summary = _learn(tmp_path, web.proxy_url, urls)
        private, broken = web.log("private.polite.test"), web.log("broken.polite.test")
    assert private.under("/account/") == 0
    assert private.paths["/robots.txt"] == 1
    assert broken.pages == 0
    assert code == 0, summary
    assert (
        "private.polite.test: 1 pattern left undecided, asked again on the next run: "
        "robots.txt disallows every sample" in summary
    ), summary
    assert "broken.polite.test: 1 pattern left undecided, asked again on the next run: " in (
        summary
    )
    assert "robots.txt does not answer" in summary
    assert "every fetch failed" not in summary
    assert "2 left undecided (1 disallowed, 1 robots-unreachable)" in summary


def test_every_disallowed_pattern_is_recorded_disallowed_even_those_never_sampled(
    tmp_path: Path,
) -> None:
    """Eight patterns of one disallowed path shape: the learner stops asking after a few
    refusals, so some patterns never had a sample of their own tried. They are disallowed
    all the same, not "every fetch failed", and nothing is a failure (exit 0)."""
    names = ("id", "page", "ref", "sort", "utm_source")
    combos = [c for r in (2, 3) for c in itertools.combinations(names, r)][-8:]
    urls = [
        "http://private.polite.test/account/orders?" + "&".join(f"{k}={k}{n}" for k in combo)
        for combo in combos
        for n in range(6)
    ]
    with PoliteWeb() as web:
        code, summary = _learn(tmp_path, web.proxy_url, urls)
        assert web.log("private.polite.test").under("/account/") == 0
    [document] = [json.loads(line) for line in (tmp_path / "maps.jsonl").read_text().splitlines()]
    assert len(document["undecided"]) == 8
    assert set(document["undecided"].values()) == {"disallowed"}, document["undecided"]
    assert "8 left undecided (8 disallowed)" in summary, summary
    assert "every fetch failed" not in summary
    assert code == 0, summary


def _canonicalize(maps: Path, urls: list[str], *extra: str) -> str:
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["canonicalize", "--maps", str(maps), *extra, *urls]) == 0
    return out.getvalue()


def test_a_disallowed_pattern_is_recorded_in_the_map_and_named_by_canonicalize_json(
    tmp_path: Path,
) -> None:
    disallowed = [
        f"http://private.polite.test/account/orders?id={n}&utm_source=s{n}" for n in range(8)
    ]
    allowed = [f"http://private.polite.test/p/{n}?id={n}&utm_source=s{n}" for n in range(8)]
    with PoliteWeb() as web:
        code, summary = _learn(tmp_path, web.proxy_url, disallowed + allowed)
    assert code == 0, summary
    maps = tmp_path / "maps.jsonl"
    [document] = [json.loads(line) for line in maps.read_text().splitlines()]
    assert document["undecided"] == {"/account/*?id&utm_source": "disallowed"}
    assert "/account/*?id&utm_source" not in document["patterns"]
    assert "/p/*?id&utm_source" in document["patterns"]

    urls = [disallowed[0], allowed[0]]
    refused, learned = map(json.loads, _canonicalize(maps, urls, "--json").splitlines())
    assert (refused["status"], refused["undecided"]) == ("provisional", "disallowed")
    assert (learned["status"], learned["undecided"]) == ("learned", None)

    unrecorded = tmp_path / "unrecorded.jsonl"
    del document["undecided"]
    unrecorded.write_text(json.dumps(document) + "\n", encoding="utf-8")
    [as_before] = map(json.loads, _canonicalize(unrecorded, urls[:1], "--json").splitlines())
    assert as_before["undecided"] is None
    assert {**refused, "undecided": None} == as_before, "the record changes no decision"
    plain = _canonicalize(maps, disallowed + allowed)
    assert plain == _canonicalize(unrecorded, disallowed + allowed)
    assert _canonicalize(maps, disallowed, "--no-prior").splitlines() == disallowed


def test_learn_names_shell_pages_for_what_they_are(tmp_path: Path, shell_proxy: str) -> None:
    urls = [f"http://app.test/item/{n}?id={n}&utm_source=s{n}" for n in range(8)]
    _, summary = _learn(tmp_path, shell_proxy, urls)
    expected = "app.test: 1 pattern left undecided, asked again on the next run: the pages are"
    assert expected + " client-side shells" in summary, summary
    assert "every probe failed" not in summary and "every fetch failed" not in summary


def test_learn_never_fetches_a_domain_on_the_never_probe_list(tmp_path: Path) -> None:
    listed = tmp_path / "never.txt"
    listed.write_text("polite.test\n", encoding="utf-8")
    urls = [f"http://open.polite.test/p/{n}?id={n}&utm_source=s{n}" for n in range(4)]
    with PoliteWeb() as web:
        code, summary = _learn(tmp_path, web.proxy_url, urls, "--never-probe", str(listed))
        received = sum(web.log("open.polite.test").paths.values())
    assert received == 0
    assert code == 0
    assert "the domain is on the never-probe list" in summary
    assert "not fetched, opted out: " in summary
