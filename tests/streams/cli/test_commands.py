"""The stream commands as ``miqps`` finds them: through the ``miqps.commands`` entry points,
listed and imported without the Kafka packages, which they ask for only to run."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from streams.cli import dashboard, maps, worker

MIQPS = str(Path(sys.executable).with_name("miqps"))
KAFKA = ("confluent_kafka", "faust", "mode", "aiokafka", "rocksdict")
WITHOUT_KAFKA = """
import sys
for name in {kafka!r}:
    sys.modules[name] = None  # an import of it fails, as when the extra is not installed
from miqps.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exited:  # argparse's --help
    code = exited.code
loaded = [name for name in sys.modules if name.split(".")[0] in {kafka!r} and sys.modules[name]]
print("kafka modules loaded:", loaded)
sys.exit(code)
"""


def without_kafka(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_KAFKA.format(kafka=KAFKA), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_stream_commands_are_the_registered_entry_points() -> None:
    points = {point.name: point.load() for point in entry_points(group="miqps.commands")}
    assert points == {"worker": worker, "maps": maps, "dashboard": dashboard}
    for name, command in points.items():
        assert name == command.NAME and command.OWN_PARSER


def test_miqps_help_lists_every_command() -> None:
    done = subprocess.run([MIQPS, "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    listed = re.findall(r"^    (\w+) ", done.stdout, re.M)
    assert listed[:4] == ["learn", "canonicalize", "export", "report"]
    assert sorted(listed[4:]) == ["dashboard", "maps", "worker"]
    for command in (worker, maps, dashboard):
        assert " ".join(command.HELP.split()[:4]) in " ".join(done.stdout.split())


def test_without_the_kafka_packages_help_works_and_the_commands_ask_for_the_extra() -> None:
    done = without_kafka("--help")
    assert done.returncode == 0, done.stderr
    assert "kafka modules loaded: []" in done.stdout
    for command in (worker, maps, dashboard):
        assert re.search(rf"^    {command.NAME} +{command.HELP.split()[0]} ", done.stdout, re.M)
    for name in ("worker", "maps", "dashboard"):
        for args in ([name], [name, "--help"]):
            done = without_kafka(*args)
            assert done.returncode == 2, (args, done.stdout, done.stderr)
            assert done.stderr == (
                f"miqps {name}: the stream processor is not installed (import of "
                "confluent_kafka halted; None in sys.modules); install the 'streams' extra\n"
            )


@pytest.mark.parametrize("command", ["worker", "maps", "dashboard"])
def test_python_m_streams_runs_the_same_command(command: str) -> None:
    through_streams = subprocess.run(
        [sys.executable, "-m", "streams", command, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    through_miqps = subprocess.run(
        [MIQPS, command, "--help"], capture_output=True, text=True, timeout=60
    )
    assert through_streams.returncode == through_miqps.returncode == 0, through_streams.stderr
    assert through_streams.stdout == through_miqps.stdout
    assert through_streams.stdout.startswith(f"usage: miqps {command}")
