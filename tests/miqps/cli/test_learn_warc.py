"""``miqps learn --warc``: a crawl's archive stands for the first fetch of its pages.

Differential: the same URLs learned by probing alone, and with an archive of every page
written by warcio's writer and by ``wget --warc-file``; the requests are counted at the
simulated web's server. Bad input: each case is one line on stderr, counted in the summary,
and costs nothing else (the good archive beside it still serves, the previous maps stay).
"""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from warcio.warcwriter import WARCWriter  # type: ignore[import-untyped]

from simweb.corpus import generate_corpus
from simweb.server import SimWeb
from simweb.sites import build_sites
from testkit.warcs import (
    gzip_members,
    wget_available,
    write_response,
    write_with_warcio,
    write_with_wget,
)
from tests.miqps.cli.support import run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@dataclass
class Learned:
    out: Path
    stdout: str
    stderr: str
    requests: int


@dataclass
class Web:
    folder: Path
    urls: list[str]
    urls_file: Path
    web: SimWeb
    warcio_archive: Path
    wget_archive: Path | None
    plain: Learned = field(init=False)

    def learn(self, out: str, *extra: str, urls: bool = True) -> Learned:
        before = self.web.requests_total()
        result = run(
            "learn",
            *(("--urls", str(self.urls_file)) if urls else ()),
            "--out",
            str(self.folder / out),
            "--proxy",
            self.web.proxy_url,
            "--timeout",
            "2",
            "--rate",
            "100",
            "--no-progress",
            *extra,
        )
        assert "Traceback" not in result.stderr, result.stderr
        assert result.returncode == 0, result.stderr
        return Learned(
            self.folder / out, result.stdout, result.stderr, self.web.requests_total() - before
        )


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Web]:
    folder = tmp_path_factory.mktemp("warc")
    sites = build_sites("tuning", 2, seed=11)
    urls = sorted({entry.url for entry in generate_corpus(sites, 200, seed=11)})
    urls_file = folder / "urls.txt"
    urls_file.write_text("\n".join(urls) + "\n", encoding="utf-8")
    # no flaky 5xx and no rate limit: both runs see the same web, so any difference in
    # their decisions is the archive's
    with SimWeb(sites, seed=11, rate_limit_per_second=0, flaky_rate=0.0) as server:
        warcio_archive = folder / "crawl-warcio.warc.gz"
        write_with_warcio(warcio_archive, urls, server.proxy_url)
        wget_archive: Path | None = None
        if wget_available():
            wget_archive = folder / "crawl-wget.warc.gz"
            write_with_wget(wget_archive, urls, server.proxy_url)
        state = Web(folder, urls, urls_file, server, warcio_archive, wget_archive)
        state.plain = state.learn("plain.jsonl")
        yield state


def decisions(path: Path) -> dict[tuple[str, str], tuple[list[str], list[str]]]:
    """Per domain and pattern, the parameters kept and dropped."""
    found = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        document: dict[str, Any] = json.loads(line)
        for pattern, decision in document.get("patterns", {}).items():
            found[document["domain"], pattern] = (
                sorted(decision.get("kept", [])),
                sorted(decision.get("dropped", [])),
            )
    return found


def agreement(a: Path, b: Path) -> float:
    left, right = decisions(a), decisions(b)
    assert left.keys() == right.keys()
    return sum(left[key] == right[key] for key in left) / len(left)


def test_an_archive_of_every_page_decides_as_probing_does_with_far_fewer_fetches(web: Web) -> None:
    archived = web.learn("warcio.jsonl", "--warc", str(web.warcio_archive))
    assert agreement(web.plain.out, archived.out) >= 0.95
    # most probes are of forms without some parameters, which a crawl seldom holds, and
    # of refetches that learn noise: the archive spares the first fetch of its pages
    assert archived.requests <= 0.95 * web.plain.requests, (archived.requests, web.plain.requests)
    assert "pages compared:" in archived.stdout and "from the archives" in archived.stdout


@pytest.mark.skipif(not wget_available(), reason="wget is missing (scripts/setup installs it)")
def test_an_archive_written_by_wget_serves_as_well(web: Web) -> None:
    assert web.wget_archive is not None
    archived = web.learn("wget.jsonl", "--warc", str(web.wget_archive))
    assert agreement(web.plain.out, archived.out) >= 0.95
    assert archived.requests <= 0.95 * web.plain.requests, (archived.requests, web.plain.requests)


def test_without_urls_the_archive_pages_are_the_urls(web: Web) -> None:
    archived = web.learn("only-warc.jsonl", "--warc", str(web.warcio_archive), urls=False)
    assert decisions(archived.out).keys() == decisions(web.plain.out).keys()


def _previous(web: Web, name: str) -> Path:
    out = web.folder / name
    out.write_bytes(web.plain.out.read_bytes())
    return out


def _bad_file(web: Web, case: str) -> Path:
    folder = web.folder / case
    folder.mkdir(exist_ok=True)
    good = web.warcio_archive.read_bytes()
    if case == "truncated":
        raw = gzip.decompress(good)
        path = folder / "cut.warc"
        path.write_bytes(raw[: len(raw) // 2])
    elif case == "gzip":
        members = gzip_members(web.warcio_archive)
        broken = bytearray(members[3])
        for index in range(30, len(broken) - 20):
            broken[index] ^= 0x55
        path = folder / "broken.warc.gz"
        path.write_bytes(b"".join(members[:3]) + bytes(broken) + b"".join(members[4:]))
    elif case == "too-large":
        path = folder / "large.warc.gz"
        body = b"<html><body><p>" + b"x" * (5 * 1024 * 1024) + b"</p></body></html>"
        with path.open("wb") as handle:
            write_response(
                WARCWriter(handle, gzip=True),
                web.urls[0],
                200,
                [("Content-Type", "text/html")],
                body,
            )
    elif case == "another-web":
        path = folder / "other.warc.gz"
        with path.open("wb") as handle:
            writer = WARCWriter(handle, gzip=True)
            for n in range(3):
                page = f"<html><body><h1>Other {n}</h1><p>{'text ' * 50}</p></body></html>"
                write_response(
                    writer,
                    f"http://elsewhere.example/p?id={n}",
                    200,
                    [("Content-Type", "text/html")],
                    page.encode(),
                )
    elif case == "not-warc":
        path = folder / "notes.warc"
        path.write_bytes(io.BytesIO(b"these are notes, not an archive\n").read())
    else:
        raise AssertionError(case)
    return path


@pytest.mark.parametrize(
    ("case", "message", "counted"),
    [
        ("truncated", "is cut short or corrupt", "truncated or corrupt record: 1"),
        ("gzip", "is a gzip member that does not inflate", "gzip member that does not inflate: 1"),
        ("too-large", "body larger than", "record larger than the body cap: 1"),
        (
            "another-web",
            "none of its pages is on a domain of the URL list",
            "archive of another web: 1",
        ),
        ("not-warc", "not a WARC file", "not a WARC file: 1"),
    ],
)
def test_bad_input_is_one_line_counted_and_costs_nothing_else(
    web: Web, case: str, message: str, counted: str
) -> None:
    out = _previous(web, f"bad-{case}.jsonl")
    bad = _bad_file(web, case)
    learned = web.learn(
        out.name, "--warc", str(bad), "--warc", str(web.warcio_archive), "--audit-share", "0"
    )
    lines = [line for line in learned.stderr.splitlines() if message in line]
    assert len(lines) == 1, learned.stderr
    assert str(bad) in lines[0]
    assert counted in learned.stdout, learned.stdout
    assert decisions(out) == decisions(web.plain.out)
