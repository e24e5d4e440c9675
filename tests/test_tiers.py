"""The unit tier of ``scripts/test --quick``: what it selects needs no broker and no browser."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NEEDS_A_SERVICE = {"bootstrap", "private_broker", "cluster", "browser"}
DUMP_PLUGIN = """
    import json, os

    deselected = []

    def described(item):
        return {"id": item.nodeid, "fixtures": list(getattr(item, "fixturenames", ())),
                "markers": sorted({marker.name for marker in item.iter_markers()})}

    def pytest_deselected(items):
        deselected.extend(described(item) for item in items)

    def pytest_collection_finish(session):
        selected = [described(item) for item in session.items]
        with open(os.environ["TIER_DUMP"], "w", encoding="utf-8") as out:
            json.dump({"selected": selected, "deselected": deselected}, out)
"""


KAFKA_EXTRA = ("confluent_kafka", "faust", "aiokafka", "mode", "rocksdict")
BLOCK_KAFKA_PLUGIN = """
    import sys

    BLOCKED = {blocked!r}

    class BlockKafka:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {{name!r}} (blocked)", name=name)
            return None

    sys.meta_path.insert(0, BlockKafka())
"""


def unit_tier() -> str:
    found = re.search(r'^unit_tier="([^"]+)"$', (REPO / "scripts" / "test").read_text(), re.M)
    assert found, "scripts/test names no unit tier"
    return found.group(1)


def collected(tmp_path: Path, *selection: str) -> dict[str, list[dict[str, list[str]]]]:
    """The tests pytest selects with ``selection`` and those it deselects."""
    (tmp_path / "tier_dump.py").write_text(textwrap.dedent(DUMP_PLUGIN), encoding="utf-8")
    dump = tmp_path / "items.json"
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "tier_dump", *selection],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": path, "TIER_DUMP": str(dump)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    items: dict[str, list[dict[str, list[str]]]] = json.loads(dump.read_text("utf-8"))
    return items


def test_the_unit_tier_takes_no_broker_nor_browser_and_has_most_tests(tmp_path: Path) -> None:
    tiers = collected(tmp_path, "-m", unit_tier())
    quick, rest = tiers["selected"], tiers["deselected"]
    assert len(quick) >= 300
    reaching = [item["id"] for item in quick if NEEDS_A_SERVICE & set(item["fixtures"])]
    assert not reaching, reaching[:10]
    unmarked = [
        item["id"]
        for item in quick + rest
        if NEEDS_A_SERVICE & set(item["fixtures"])
        and not {"kafka", "cluster", "browser"} & set(item["markers"])
    ]
    assert not unmarked, unmarked[:10]


def test_the_core_tests_collect_without_the_kafka_extra(tmp_path: Path) -> None:
    plugin = BLOCK_KAFKA_PLUGIN.format(blocked=KAFKA_EXTRA)
    (tmp_path / "block_kafka.py").write_text(textwrap.dedent(plugin), encoding="utf-8")
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    probe = "import block_kafka\ntry:\n import confluent_kafka\nexcept ImportError:\n pass"
    probe += "\nelse:\n raise SystemExit('not blocked')"
    blocked = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60
    )
    assert blocked.returncode == 0, blocked.stdout + blocked.stderr
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "block_kafka",
            "tests/miqps",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert re.search(r"^\d{3,} tests collected", done.stdout, re.M), done.stdout[-500:]


def test_every_test_of_a_slow_tier_states_its_worst_case(tmp_path: Path) -> None:
    """A test that needs a broker or a browser, or takes long, states how long it may take
    (a ``pytest.mark.timeout`` of its own or of its module), rather than leaning on the
    suite's default: the hard deadline of tests/conftest.py follows it."""
    tiers = collected(tmp_path)
    unstated = [
        item["id"]
        for item in tiers["selected"] + tiers["deselected"]
        if {"kafka", "cluster", "browser", "slow"} & set(item["markers"])
        and "timeout" not in item["markers"]
    ]
    assert not unstated, f"{len(unstated)} tests state no worst case: {unstated[:10]}"
