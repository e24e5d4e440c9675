"""WARC files of a crawl of the simulated web, for the tests and benchmarks of
``miqps learn --warc``: written by warcio's writer from our own fetches, or by
``wget --warc-file``, a real crawler, through the simulated web's proxy."""

from __future__ import annotations

import io
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

import httpx
from warcio.statusandheaders import StatusAndHeaders  # type: ignore[import-untyped]
from warcio.warcwriter import WARCWriter  # type: ignore[import-untyped]


def wget_available() -> bool:
    return shutil.which("wget") is not None


def write_with_warcio(path: Path, urls: Iterable[str], proxy: str, *, gzipped: bool = True) -> int:
    """Fetch each of ``urls`` once through ``proxy`` (redirects not followed, as a crawler
    records them) and write a response record of each to ``path``; the records written."""
    written = 0
    with (
        path.open("wb") as handle,
        httpx.Client(proxy=proxy, timeout=10, trust_env=False) as client,
    ):
        writer = WARCWriter(handle, gzip=gzipped)
        for url in urls:
            try:
                response = client.get(url, headers={"Accept-Encoding": "identity"})
            except httpx.HTTPError:
                continue
            written += write_response(
                writer, url, response.status_code, response.headers.items(), response.content
            )
    return written


def write_response(
    writer: WARCWriter,
    url: str,
    status: int,
    headers: Iterable[tuple[str, str]],
    body: bytes,
) -> int:
    """One response record; the transfer framing dropped, since the body is whole."""
    kept = [
        (name, value)
        for name, value in headers
        if name.lower() not in ("transfer-encoding", "content-length", "content-encoding")
    ]
    kept.append(("Content-Length", str(len(body))))
    http = StatusAndHeaders(f"{status} {_reason(status)}", kept, protocol="HTTP/1.1")
    record = writer.create_warc_record(url, "response", payload=io.BytesIO(body), http_headers=http)
    writer.write_record(record)
    return 1


def _reason(status: int) -> str:
    try:
        return httpx.codes.get_reason_phrase(status) or "OK"
    except ValueError:
        return "OK"


def write_with_wget(
    path: Path, urls: Sequence[str], proxy: str
) -> subprocess.CompletedProcess[str]:
    """``wget --warc-file`` fetching ``urls`` through ``proxy``, each once, robots.txt not
    fetched; writes ``path`` (which must end in ``.warc.gz``)."""
    if not path.name.endswith(".warc.gz"):
        raise ValueError("wget names its archive FILE.warc.gz")
    listing = path.with_name(path.name + ".urls")
    listing.write_text("\n".join(urls) + "\n", encoding="utf-8")
    return subprocess.run(
        [
            "wget",
            "--quiet",
            "--tries=1",
            "--max-redirect=0",
            "-e",
            "robots=off",
            "-e",
            "use_proxy=yes",
            "-e",
            f"http_proxy={proxy}",
            f"--warc-file={path.with_name(path.name.removesuffix('.warc.gz'))}",
            "--no-warc-keep-log",
            "--output-document=/dev/null",
            f"--input-file={listing}",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def gzip_members(path: Path) -> list[bytes]:
    """The gzip members of a ``.warc.gz``, one per record, as written."""
    data = path.read_bytes()
    members: list[bytes] = []
    start = 0
    while start < len(data):
        decompressor_end = _member_end(data, start)
        members.append(data[start:decompressor_end])
        start = decompressor_end
    return members


def _member_end(data: bytes, start: int) -> int:
    import zlib

    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    inflater.decompress(data[start:])
    return len(data) - len(inflater.unused_data)
