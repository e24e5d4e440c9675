"""A learning run's checkpoints: what ``miqps learn`` keeps when it is stopped, and how the
same command resumes.

A domain is the unit of progress: its patterns are decided together (the learner pools
their evidence) and audited against its newest map. A checkpoint writes the maps file
whole, with the final map of every domain done so far and every other map as it was, and
beside it ``OUT.progress.json``, naming the run (a digest of its URLs and of the options that
change decisions) and the domains done. Both are written to a temporary file and renamed,
so whatever stops the process, each file on disk is whole: the previous checkpoint or the
new one.

Rerunning the same command finds both: the domains done are taken as they are, neither
fetched nor audited again, and the others are learned from the maps they had, as the
interrupted run would have. So the maps a resumed run ends with decide what an
uninterrupted run's decide. A finished run removes the progress file; a progress file of
another run (other URLs or options) is not resumed.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from miqps.maps import DomainMap, write_maps

PROGRESS_FORMAT = 1


def progress_path(out: Path) -> Path:
    """Where the progress of a run writing ``out`` is kept."""
    return out.with_name(out.name + ".progress.json")


def run_digest(urls: Iterable[str], options: Mapping[str, object]) -> str:
    """What makes two runs the same command: the URLs, in order, and the options that change
    decisions (not the pace, the proxy or the time allowed)."""
    digest = hashlib.sha256(json.dumps(dict(options), sort_keys=True).encode())
    for url in urls:
        digest.update(url.encode("utf-8", "surrogatepass") + b"\n")
    return digest.hexdigest()


class UnreadableProgress(ValueError):
    """A progress file that cannot be used (not JSON, another format)."""


@dataclass(frozen=True, slots=True)
class Progress:
    run: str
    done: frozenset[str]


def read_progress(out: Path) -> Progress | None:
    """The progress kept beside ``out``, None if there is none; raises
    :class:`UnreadableProgress` or :class:`OSError`."""
    path = progress_path(out)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        document = json.loads(text)
        if document.get("format") != PROGRESS_FORMAT:
            raise UnreadableProgress(f"{path}: an unknown format")
        run, done = document["run"], document["done"]
        if not isinstance(run, str) or not all(isinstance(d, str) for d in done):
            raise UnreadableProgress(f"{path}: not a progress file")
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        if isinstance(error, UnreadableProgress):
            raise
        raise UnreadableProgress(f"{path}: not a progress file") from None
    return Progress(run, frozenset(done))


def _write_whole(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    tmp.replace(path)


@dataclass(slots=True)
class Checkpoint:
    """The maps of a run as it goes: ``maps`` starts as the previous version and takes each
    domain's final map as it is done."""

    out: Path
    run: str
    maps: dict[str, DomainMap]
    done: set[str] = field(default_factory=set)
    resumed: frozenset[str] = frozenset()
    saved_done: int = 0
    """How many domains were done at the last save, or when the run started."""

    def finish(self, domain: str, final: DomainMap) -> None:
        self.maps[domain] = final
        self.done.add(domain)

    @property
    def unsaved(self) -> bool:
        return len(self.done) != self.saved_done

    def save(self) -> None:
        """Write the maps and the progress, each whole."""
        write_maps(self.out, self.maps.values())
        document = {"format": PROGRESS_FORMAT, "run": self.run, "done": sorted(self.done)}
        _write_whole(progress_path(self.out), json.dumps(document) + "\n")
        self.saved_done = len(self.done)

    def complete(self) -> None:
        """Write the final maps; the run needs no resuming any more."""
        write_maps(self.out, self.maps.values())
        progress_path(self.out).unlink(missing_ok=True)
