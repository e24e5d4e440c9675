"""The public Python API: ``from miqps import Canonicalizer``."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import miqps
from miqps import Canonicalizer, Decision, InvalidMap, InvalidURL
from miqps.maps import DomainMap, Layer, ParamEvidence, PatternDecision, Verification, write_maps

HOST = "api.test"


def product_map(version: int = 1, drop: str = "ref") -> DomainMap:
    """``/p/*?id&ref&sid``: id picks the product; ``drop`` (and sid) were learned neutral."""
    names = {"id", "ref", "sid"}
    dropped = {drop, "sid"}
    params = {
        name: ParamEvidence(
            "drop" if name in dropped else "keep",
            Layer.LEARNED,
            3,
            0 if name in dropped else 3,
            3 if name in dropped else 0,
            0,
        )
        for name in names
    }
    decision = PatternDecision(
        frozenset(names - dropped),
        frozenset(dropped),
        params,
        Verification(3, 0, 0),
        "2026-01-01T00:00:00Z",
        10,
    )
    return DomainMap(HOST, version, "2026-01-01T00:00:00Z", {"/p/*?id&ref&sid": decision})


@pytest.fixture
def maps_file(tmp_path: Path) -> Path:
    path = tmp_path / "maps.jsonl"
    write_maps(path, [product_map()])
    return path


def test_the_public_surface_is_marked() -> None:
    assert miqps.__all__ == [
        "Canonicalizer",
        "Decision",
        "DomainMap",
        "InvalidMap",
        "InvalidURL",
        "Status",
    ]
    for name in ("from_file", "canonicalize", "explain", "canonicalize_many"):
        assert getattr(Canonicalizer, name).__doc__, name
    assert not hasattr(miqps, "from_kafka"), "Kafka's entry point lives in streams"


def test_from_file_canonicalizes_and_explains(maps_file: Path) -> None:
    canonicalizer = Canonicalizer.from_file(maps_file)
    url = f"https://{HOST}/p/9?sid=4&id=7&ref=mail"
    assert canonicalizer.canonicalize(url) == f"https://{HOST}/p/9?id=7"
    decision = canonicalizer.explain(url)
    assert isinstance(decision, Decision)
    assert decision.url == url and decision.canonical_url == f"https://{HOST}/p/9?id=7"
    assert decision.kept == ("id",) and decision.dropped == ("ref", "sid")
    assert decision.layers == {"id": "learned", "ref": "learned", "sid": "learned"}
    assert decision.map_version == 1 and decision.status is miqps.Status.LEARNED
    # A domain without a map keeps everything but the cold-start prior's names.
    assert canonicalizer.canonicalize("https://other.test/p/9?ref=1&utm_source=x") == (
        "https://other.test/p/9?ref=1"
    )


def test_bad_input_raises_a_clear_error(maps_file: Path, tmp_path: Path) -> None:
    canonicalizer = Canonicalizer.from_file(maps_file)
    for bad in ("", "not a url", "https://a.test/\x00", "ftp://a.test/x"):
        with pytest.raises(InvalidURL) as raised:
            canonicalizer.canonicalize(bad)
        assert raised.value.reason
        with pytest.raises(InvalidURL):
            canonicalizer.explain(bad)
    broken = tmp_path / "broken.jsonl"
    broken.write_text(product_map().dumps() + "\n{oops\n", "utf-8")
    with pytest.raises(InvalidMap, match=re.escape("broken.jsonl:2")):
        Canonicalizer.from_file(broken)
    with pytest.raises(OSError):
        Canonicalizer.from_file(tmp_path / "missing.jsonl")


def test_canonicalize_many_is_lazy_ordered_and_reports_invalid_urls(maps_file: Path) -> None:
    canonicalizer = Canonicalizer.from_file(maps_file)
    canonicalizer.BATCH_SIZE = 3

    def urls() -> Iterator[str]:
        for number in itertools.count():
            yield "::bad::" if number % 4 == 2 else f"https://{HOST}/p/1?id={number}&ref=x&sid=1"

    errors: list[tuple[int, InvalidURL]] = []
    first = list(itertools.islice(canonicalizer.canonicalize_many(urls(), errors), 10))
    assert first == ["" if n % 4 == 2 else f"https://{HOST}/p/1?id={n}" for n in range(10)]
    assert [index for index, _ in errors] == [2, 6]
    assert all(error.reason for _, error in errors)


@pytest.mark.parametrize(
    ("imports", "not_loaded"),
    [
        # The Scrapy add-on is an optional extra: importing miqps loads no Scrapy either.
        ("import miqps; from miqps import Canonicalizer", ("scrapy", "twisted")),
        ("import miqps.scrapy; from miqps.scrapy import Addon", ()),
    ],
)
def test_importing_miqps_imports_no_kafka(imports: str, not_loaded: tuple[str, ...]) -> None:
    kafka = ("confluent_kafka", "aiokafka", "faust", "mode", "streams")
    code = (
        f"import sys; {imports}; "
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {kafka + not_loaded!r}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    assert result.stdout.strip() == "[]"


def test_the_core_imports_nothing_of_the_stream_processor() -> None:
    """Not even lazily: an import of ``streams`` from ``miqps`` closes an import circle."""
    import ast

    core = Path(miqps.__file__).parent
    reaching_up = []
    for source in sorted(core.rglob("*.py")):
        for node in ast.walk(ast.parse(source.read_text("utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            reaching_up += [
                f"{source.relative_to(core)}:{node.lineno} {name}"
                for name in names
                if name == "streams" or name.startswith("streams.")
            ]
    assert reaching_up == []
