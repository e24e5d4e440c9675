"""The ``miqps`` command itself: its version, and every command, the core's and those the
``miqps.commands`` entry points register, behind one parser."""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from importlib.metadata import EntryPoint, version
from pathlib import Path

import pytest

from miqps import cli
from miqps.cli import learn
from tests.miqps.cli.support import run


def test_version_is_the_installed_package_version() -> None:
    result = run("--version")
    assert result.returncode == 0
    assert result.stdout.startswith(f"miqps {version('miqps')}\ncanonicalizer path: ")


def test_worker_and_maps_options_pass_through_to_the_stream_processor() -> None:
    result = run("worker", "--agents", "canonicalize", "--help")
    assert result.returncode == 0, result.stderr
    assert "usage: miqps worker" in result.stdout and "--agents" in result.stdout
    assert run("maps", "--help").returncode == 0


class Hello:
    """A command as an entry point names it: run with the rest of the line as it is."""

    NAME = "hello"
    HELP = "say hello (a registered command)"
    OWN_PARSER = True

    def __init__(self) -> None:
        self.seen: list[list[str]] = []

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("args", nargs=argparse.REMAINDER)

    def run(self, args: argparse.Namespace) -> int:
        self.seen.append(args.args)
        return 7


HELLO = Hello()
LEARN = Hello()
LEARN.NAME = "learn"


def registering(monkeypatch: pytest.MonkeyPatch, *points: tuple[str, str]) -> None:
    """Make ``points`` (name, target) the only ``miqps.commands`` entry points installed."""

    def entry_points(*, group: str) -> list[EntryPoint]:
        assert group == cli.ENTRY_POINT_GROUP
        return [EntryPoint(name, target, group) for name, target in points]

    monkeypatch.setattr(cli, "entry_points", entry_points)


def test_commands_are_found_through_the_entry_point_group_only(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    registering(monkeypatch, ("hello", f"{__name__}:HELLO"))
    with pytest.raises(SystemExit) as exited:
        cli.main(["--help"])
    assert exited.value.code == 0
    listed = capsys.readouterr().out
    assert "{learn,canonicalize,export,report,hello}" in listed
    assert "say hello (a registered command)" in listed
    assert "worker" not in listed, "no stream command unless registered"
    assert cli.main(["hello", "--loud", "x", "-h"]) == 7
    assert HELLO.seen[-1] == ["--loud", "x", "-h"], "the rest of the line, as it is"
    with pytest.raises(SystemExit) as exited:
        cli.main(["worker"])
    assert exited.value.code == 2
    assert "invalid choice: 'worker'" in capsys.readouterr().err


def test_a_registered_command_never_replaces_one_of_the_core(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    registering(monkeypatch, ("learn", f"{__name__}:LEARN"))
    assert cli.all_commands()["learn"] is learn
    assert cli.main(["learn", "--urls", "/nonexistent/urls.txt", "--out", "maps.jsonl"]) == 2
    assert "miqps learn: cannot read /nonexistent/urls.txt" in capsys.readouterr().err


def test_a_command_that_cannot_be_imported_says_so_and_leaves_the_others_working(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    registering(monkeypatch, ("broken", "tests.miqps.cli.no_such_module"))
    assert cli.main(["broken", "--help"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("miqps broken: cannot load tests.miqps.cli.no_such_module: No module")
    assert cli.main(["canonicalize", "http://a.example/p?utm_source=x&id=1"]) == 0
    assert capsys.readouterr().out == "http://a.example/p?id=1\n"


def test_importing_the_command_line_imports_nothing_of_the_stream_processor() -> None:
    code = (
        "import sys, miqps.cli; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('streams', 'confluent_kafka', 'faust', 'mode', 'aiokafka')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"


def test_no_module_of_the_command_line_imports_the_stream_processor() -> None:
    reaching = []
    for path in sorted(Path(cli.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Call) and node.args:  # import_module("streams.cli")
                first = node.args[0]
                names = [str(first.value)] if isinstance(first, ast.Constant) else []
            else:
                continue
            reaching += [
                f"{path.name}: {name}" for name in names if name.split(".")[0] == "streams"
            ]
    assert not reaching
