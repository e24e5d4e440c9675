"""What several ``miqps`` commands share: reading URL lists and maps files, reporting the bad
lines on stderr, and the ``--skip-invalid`` option."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path

from miqps.maps import DomainMap, InvalidMap, read_maps
from miqps.urls import InvalidURL, NormalizedURL, parse

MAX_INVALID_MESSAGES = 20


def add_skip_invalid(command: argparse.ArgumentParser, which: str) -> None:
    command.add_argument(
        "--skip-invalid",
        action="store_true",
        help=f"skip the map lines {which} that break a rule, with a report "
        "on stderr, instead of stopping",
    )


def read_urls(lines: Iterable[str], label: str) -> tuple[list[NormalizedURL], int, int]:
    """The valid URLs of ``lines``, and how many were blank and invalid (reported on stderr,
    each as ``label:LINE``)."""
    urls: list[NormalizedURL] = []
    blank = invalid = 0
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if not text:
            blank += 1
            continue
        try:
            urls.append(parse(text))
        except InvalidURL as error:
            invalid += 1
            if invalid <= MAX_INVALID_MESSAGES:
                print(f"{label}:{number}: skipped: {error.reason}", file=sys.stderr)
    if invalid > MAX_INVALID_MESSAGES:
        print(
            f"{label}: {invalid - MAX_INVALID_MESSAGES} more invalid lines skipped", file=sys.stderr
        )
    return urls, blank, invalid


def load_maps(
    path: Path, skip_invalid: bool, command: str, what: str
) -> tuple[dict[str, DomainMap], int] | None:
    """The valid maps of ``path`` and how many lines were skipped, or None (reported on
    stderr) if it cannot be read or, without ``skip_invalid``, has an invalid line."""
    skipped: list[InvalidMap] = []

    def skip(error: InvalidMap) -> None:
        skipped.append(error)
        if len(skipped) <= MAX_INVALID_MESSAGES:
            print(f"{command}: skipped: {error}", file=sys.stderr)

    try:
        maps = read_maps(path, skip if skip_invalid else None)
    except OSError as error:
        print(f"{command}: cannot read {what}: {path}: {error.strerror}", file=sys.stderr)
        return None
    except InvalidMap as error:
        print(
            f"{command}: cannot read {what}: {error}\n{command}: use --skip-invalid to "
            "skip such lines",
            file=sys.stderr,
        )
        return None
    if skipped:
        print(
            f"{command}: {path}: {len(skipped)} invalid map lines skipped, {len(maps)} maps read",
            file=sys.stderr,
        )
    return maps, len(skipped)


def ensure_folder(folder: Path, command: str, option: str) -> bool:
    """Make ``folder`` exist for ``option``'s output: a missing one is created, and stderr
    says so. A problem is one line on stderr, and False."""
    if folder.is_dir():
        return True
    if folder.exists() or folder.is_symlink():
        print(f"{command}: cannot write {option}: {folder} is not a folder", file=sys.stderr)
        return False
    try:
        folder.mkdir(parents=True)
    except OSError as error:
        print(
            f"{command}: cannot create the folder {folder} for {option}: {error.strerror}",
            file=sys.stderr,
        )
        return False
    print(f"{command}: created the folder {folder} for {option}", file=sys.stderr)
    return True


def prepare_output(path: Path, command: str, option: str) -> bool:
    """Check that the file ``path`` can be written for ``option`` before any work is done:
    not a folder, in a folder (created if missing, :func:`ensure_folder`) where a file can
    be created. A problem is one line on stderr, and False."""
    if path.is_dir():
        print(f"{command}: cannot write {option}: {path} is a folder", file=sys.stderr)
        return False
    if not ensure_folder(path.parent, command, option):
        return False
    probe = path.with_name(path.name + ".tmp")
    try:
        with probe.open("w", encoding="utf-8"):
            pass
        probe.unlink()
    except OSError as error:
        print(f"{command}: cannot write {option}: {path}: {error.strerror}", file=sys.stderr)
        return False
    return True
