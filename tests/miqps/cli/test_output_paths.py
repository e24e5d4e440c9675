"""Where ``learn``, ``report`` and ``export`` write: a missing folder is created and said
so; any other problem with the path is one line on stderr and exit code 2, before any
work, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.miqps.cli.support import run

MAP = (
    '{"schema": "miqps.map/1", "domain": "shop.example", "version": 1, '
    '"updated_at": "2024-01-01T00:00:00Z", "patterns": {}}\n'
)


@pytest.fixture
def inputs(tmp_path: Path) -> tuple[Path, Path]:
    urls, maps = tmp_path / "urls.txt", tmp_path / "maps.jsonl"
    urls.write_text("http://127.0.0.1:9/p?id=1\n", encoding="utf-8")
    maps.write_text(MAP, encoding="utf-8")
    return urls, maps


def _command(name: str, inputs: tuple[Path, Path], out: Path) -> list[str]:
    urls, maps = inputs
    if name == "learn":
        return ["learn", "--urls", str(urls), "--out", str(out), "--no-progress"]
    if name == "report":
        return ["report", "--urls", str(urls), "--maps", str(maps), "--out", str(out)]
    return ["export", "--maps", str(maps), "--format", "clean-param", "--out-dir", str(out)]


COMMANDS = ("learn", "report", "export")
OPTION = {"learn": "--out", "report": "--out", "export": "--out-dir"}


@pytest.mark.parametrize("name", COMMANDS)
def test_a_path_under_a_file_is_one_line_and_exit_2(
    name: str, inputs: tuple[Path, Path], tmp_path: Path
) -> None:
    some_file = tmp_path / "some-file"
    some_file.write_text("not a folder\n", encoding="utf-8")
    for out in (some_file / "x.jsonl", some_file / "sub" / "x.jsonl"):
        result = run(*_command(name, inputs, out))
        assert result.returncode == 2, result.stderr
        [line] = result.stderr.splitlines()
        assert line.startswith(f"miqps {name}: cannot ") and OPTION[name] in line, line
        assert "some-file" in line
        assert some_file.read_text() == "not a folder\n"


@pytest.mark.parametrize("name", ("learn", "report"))
def test_an_output_file_that_is_a_folder_is_one_line_and_exit_2(
    name: str, inputs: tuple[Path, Path], tmp_path: Path
) -> None:
    folder = tmp_path / "a-folder"
    folder.mkdir()
    result = run(*_command(name, inputs, folder))
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.splitlines()
    assert line == f"miqps {name}: cannot write --out: {folder} is a folder"


@pytest.mark.parametrize("name", COMMANDS)
def test_a_missing_folder_is_created_and_said_so(
    name: str, inputs: tuple[Path, Path], tmp_path: Path
) -> None:
    folder = tmp_path / "new" / "deeper"
    out = folder if name == "export" else folder / "out.file"
    result = run(*_command(name, inputs, out))
    assert result.returncode in (0, 3), result.stderr  # learn: 127.0.0.1 is refused
    assert f"miqps {name}: created the folder {folder} for {OPTION[name]}" in result.stderr
    assert folder.is_dir()
    if name != "export":
        assert out.is_file()


def test_learn_names_an_unwritable_folder_before_probing(
    inputs: tuple[Path, Path], tmp_path: Path
) -> None:
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        probe = folder / "probe"
        try:
            probe.touch()
        except PermissionError:
            pass
        else:  # root writes anywhere: nothing to check
            probe.unlink()
            pytest.skip("this user can write to a read-only folder")
        result = run(*_command("learn", inputs, folder / "maps.jsonl"))
    finally:
        folder.chmod(0o755)
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("miqps learn: cannot write --out: ") and "ermission" in line
    assert "URLs read" not in result.stdout, "stopped before any work"
