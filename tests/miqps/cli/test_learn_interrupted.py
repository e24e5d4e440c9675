"""``miqps learn`` stopped by a signal, then run again: real processes against the simulated
web. What is done is saved, whole, and the same command resumes without fetching it again,
ending with the maps an uninterrupted run writes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from miqps.maps import read_maps
from simweb.corpus import generate_corpus
from simweb.server import SimWeb
from simweb.sites import Site, build_sites
from tests.miqps.cli.support import MIQPS, run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

# Domains of different sizes, so that one is done well before the others.
URLS_PER_SITE = (10, 30, 60)


@pytest.fixture(scope="module")
def sites() -> list[Site]:
    return build_sites("tuning", len(URLS_PER_SITE), seed=11)


@pytest.fixture(scope="module")
def urls_file(sites: list[Site], tmp_path_factory: pytest.TempPathFactory) -> Path:
    urls: list[str] = []
    for site, count in zip(sites, URLS_PER_SITE, strict=True):
        urls += sorted({entry.url for entry in generate_corpus([site], 2 * count, seed=11)})[:count]
    path = tmp_path_factory.mktemp("interrupted") / "urls.txt"
    path.write_text("\n".join(urls) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def web(sites: list[Site]) -> Iterator[SimWeb]:
    with SimWeb(sites, seed=11, rate_limit_per_second=0, flaky_rate=0, interstitials=False) as w:
        yield w


def _command(urls: Path, out: Path, web: SimWeb) -> list[str]:
    return [
        "learn",
        "--urls",
        str(urls),
        "--out",
        str(out),
        "--proxy",
        web.proxy_url,
        "--rate",
        "20",
        "--no-progress",
        "--checkpoint-every",
        "0.2",
    ]


def _decisions(path: Path) -> dict[str, Any]:
    """What the maps of ``path`` decide, per domain: its version, what each pattern keeps and
    drops, and the patterns left undecided with their cause. (The evidence counts behind a
    decision, like the timestamps, differ between any two runs: the simulated pages' noise
    depends on the order requests arrive in.) Each line must be a whole, valid map."""
    maps = read_maps(path)
    return {
        domain: (
            domain_map.version,
            {
                pattern: (sorted(decision.kept), sorted(decision.dropped))
                for pattern, decision in domain_map.patterns.items()
            },
            dict(domain_map.undecided),
        )
        for domain, domain_map in maps.items()
    }


def _lines(path: Path) -> dict[str, str]:
    """Each domain's line of ``path``, as written."""
    return {
        json.loads(line)["domain"]: line for line in path.read_text(encoding="utf-8").splitlines()
    }


@pytest.fixture(scope="module")
def uninterrupted(
    sites: list[Site], urls_file: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("uninterrupted") / "maps.jsonl"
    with SimWeb(sites, seed=11, rate_limit_per_second=0, flaky_rate=0, interstitials=False) as w:
        result = run(*_command(urls_file, out, w))
    assert result.returncode == 0, result.stderr
    assert not Path(f"{out}.progress.json").exists(), "a finished run leaves no progress"
    return _decisions(out)


def _done(out: Path) -> list[str]:
    try:
        return list(json.loads(Path(f"{out}.progress.json").read_text())["done"])
    except (OSError, ValueError):
        return []


def _start_and_wait_for_a_domain(
    urls: Path, out: Path, web: SimWeb, errors: Path
) -> subprocess.Popen[str]:
    """Start a run, its stderr to ``errors``; return once its checkpoint holds a domain
    done, the run still going."""
    with errors.open("w") as stderr:
        process = subprocess.Popen(
            [MIQPS, *_command(urls, out, web)], stdout=subprocess.DEVNULL, stderr=stderr, text=True
        )
    _wait_for(lambda: bool(_done(out)), process, "no domain was saved in time")
    return process


def _wait_for(condition: Callable[[], bool], process: subprocess.Popen[str], what: str) -> None:
    deadline = time.monotonic() + 120
    while not condition():
        assert process.poll() is None, f"the run ended: {what}"
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _resume_and_compare(
    urls: Path, out: Path, web: SimWeb, saved: list[str], uninterrupted: dict[str, Any]
) -> None:
    """Run the same command again: the domains saved are neither fetched nor written again,
    and the maps decide what an uninterrupted run's decide."""
    before = _lines(out)
    web.reset_counters()
    result = run(*_command(urls, out, web))
    assert result.returncode == 0, result.stderr
    assert "resuming:" in result.stderr
    fetched = web.requests_by_host()
    assert saved and all(fetched.get(domain, 0) == 0 for domain in saved), (saved, fetched)
    after = _lines(out)
    assert all(after[domain] == before[domain] for domain in saved), "taken as saved"
    assert _decisions(out) == uninterrupted
    assert not Path(f"{out}.progress.json").exists()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_saves_what_is_done_and_the_same_command_resumes(
    signum: signal.Signals,
    urls_file: Path,
    web: SimWeb,
    uninterrupted: dict[str, Any],
    tmp_path: Path,
) -> None:
    out, errors = tmp_path / "maps.jsonl", tmp_path / "stderr.txt"
    process = _start_and_wait_for_a_domain(urls_file, out, web, errors)
    process.send_signal(signum)
    process.wait(timeout=30)
    assert process.returncode == 128 + signum, errors.read_text()
    *_, line = errors.read_text().strip().splitlines()
    saved = _done(out)
    assert line.startswith(f"miqps learn: interrupted ({signum.name}): saved the maps of ")
    assert f"to {out}" in line and "run the same command again to resume" in line
    assert "Traceback" not in errors.read_text()
    assert sorted(_decisions(out)) == sorted(saved), "the domains done, and none other"
    assert len(saved) < len(URLS_PER_SITE)
    _resume_and_compare(urls_file, out, web, saved, uninterrupted)


def test_a_second_signal_stops_at_once_even_while_the_save_hangs(
    urls_file: Path, web: SimWeb, uninterrupted: dict[str, Any], tmp_path: Path
) -> None:
    """The save the first signal starts hangs (its temporary file is a FIFO nobody reads, as
    a stalled disk would): the second signal stops the run at once, and the maps file is
    the last checkpoint, whole."""
    out, errors = tmp_path / "maps.jsonl", tmp_path / "stderr.txt"
    process = _start_and_wait_for_a_domain(urls_file, out, web, errors)
    stall = Path(f"{out}.tmp")
    os.mkfifo(stall)
    try:
        process.send_signal(signal.SIGINT)
        _wait_for(lambda: "stopping" in errors.read_text(), process, "first signal not seen")
        process.send_signal(signal.SIGINT)
        process.wait(timeout=10)
        assert process.returncode == 130, errors.read_text()
        said = errors.read_text()
        assert "SIGINT again: stopped at once" in said and "Traceback" not in said
    finally:
        process.kill()
        stall.unlink()
    saved = _done(out)
    assert sorted(_decisions(out)) == sorted(saved), "the last checkpoint, whole"
    _resume_and_compare(urls_file, out, web, saved, uninterrupted)


def test_a_killed_run_leaves_its_last_periodic_checkpoint_to_resume_from(
    urls_file: Path, web: SimWeb, uninterrupted: dict[str, Any], tmp_path: Path
) -> None:
    out = tmp_path / "maps.jsonl"
    process = _start_and_wait_for_a_domain(urls_file, out, web, tmp_path / "stderr.txt")
    process.kill()
    process.wait(timeout=30)
    saved = _done(out)
    assert sorted(_decisions(out)) == sorted(saved), "saved while running, without a signal"
    _resume_and_compare(urls_file, out, web, saved, uninterrupted)
