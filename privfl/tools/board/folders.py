"""Which folders are runs, and which of their files the board may read.

A run is a folder that a party wrote (``party.log``, ``metrics.jsonl`` or ``audit.jsonl``
in it) or a ``run-local`` folder holding one such folder per party and its
``kit/job.toml`` or ``summary.json``. The board looks at each folder it is given and at the
folders directly inside it. A browser names a run by its id and a file by its path
inside the run; :func:`readable` resolves that path and refuses anything outside the
run (``..``, absolute paths, symbolic links leading out), keys, checkpoints and any
file that is not one of the few run outputs the page shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path, PurePosixPath

PARTY_FILES = ("party.log", "metrics.jsonl", "audit.jsonl")
JOB_FILE = Path("kit") / "job.toml"
# The only files a browser may fetch: run outputs, never data, keys, weights or ciphertexts.
SERVED = ("summary.json", "metrics.jsonl", "party.log", "audit.jsonl", "job.toml", "*.png")
NEVER = ("keys", "checkpoints", "*.key_secret", "*.key", "model.json", "*.pt")


@dataclass(frozen=True)
class Run:
    """One run folder: its id in URLs, its path, and each party's folder by name."""

    id: str
    path: Path
    parties: dict[str, Path]

    @property
    def host(self) -> Path | None:
        """The party folder holding the metrics (the Host, or the Aggregator)."""
        for folder in self.parties.values():
            if (folder / "metrics.jsonl").is_file():
                return folder
        return None

    @property
    def job_file(self) -> Path | None:
        found = self.path / JOB_FILE
        return found if found.is_file() and not found.is_symlink() else None


def is_party(folder: Path) -> bool:
    return any((folder / name).is_file() for name in PARTY_FILES)


def parties_of(folder: Path) -> dict[str, Path]:
    """A party's own folder is the run's only party; a run-local folder has one per party."""
    if is_party(folder):
        return {folder.name: folder}
    return {
        child.name: child
        for child in sorted(folder.iterdir())
        if child.is_dir() and not child.is_symlink() and is_party(child)
    }


def find_runs(roots: list[Path]) -> list[Run]:
    """The runs in ``roots`` (each root itself, or the folders directly inside it), newest
    first by name within each root; ids are unique and safe in a URL."""
    runs: list[Run] = []
    seen: set[Path] = set()
    for root in roots:
        if not root.is_dir():
            continue
        candidates = [root] if _is_run(root) else _children(root)
        for folder in candidates:
            if folder.resolve() in seen:
                continue
            seen.add(folder.resolve())
            runs.append(Run(_unique(folder.name, runs), folder, parties_of(folder)))
    return runs


def _children(root: Path) -> list[Path]:
    found = [c for c in root.iterdir() if c.is_dir() and not c.is_symlink() and _is_run(c)]
    return sorted(found, key=lambda c: c.name, reverse=True)


def _is_run(folder: Path) -> bool:
    """A party's folder, or a run-local one: its kit or its summary beside party folders
    (a folder of party folders with neither is a folder of runs)."""
    if is_party(folder) or (folder / JOB_FILE).is_file():
        return True
    return (folder / "summary.json").is_file() and bool(parties_of(folder))


def _unique(name: str, runs: list[Run]) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name).strip(".") or "run"
    taken = {r.id for r in runs}
    candidate, n = safe, 1
    while candidate in taken:
        n += 1
        candidate = f"{safe}~{n}"
    return candidate


class Refused(Exception):
    """A path the board will not read: outside the run, a key, a checkpoint, not an output."""


def readable(run: Run, relative: str) -> Path:
    """The file ``relative`` (a path from the browser) inside ``run``, or :class:`Refused`."""
    parts = PurePosixPath(relative).parts
    if not parts or relative.startswith("/") or "\\" in relative or ".." in parts:
        raise Refused(relative)
    if any(fnmatch(part, pattern) for part in parts for pattern in NEVER):
        raise Refused(relative)
    if not any(fnmatch(parts[-1], pattern) for pattern in SERVED):
        raise Refused(relative)
    base = run.path.resolve()
    candidate = run.path.joinpath(*parts)
    # every step must be a real folder or file inside the run: no link, even one that
    # points back inside (a link can be swapped for another between check and read)
    step = run.path
    for part in parts:
        step = step / part
        if step.is_symlink():
            raise Refused(relative)
    resolved = candidate.resolve()
    if not resolved.is_relative_to(base) or not resolved.is_file():
        raise Refused(relative)
    return resolved
