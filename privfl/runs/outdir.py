"""Run directories: a used ``--out`` is refused unless the user asks to resume or overwrite it.

Parties append to their logs, metrics and audit trail and resume from the checkpoints
they find, so a second run in the same folder would mix its records with the first
run's and could resume from a stale checkpoint. ``--overwrite`` removes exactly those
files (in the folder and in each party folder under it); every other output is
rewritten by the new run.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from privfl.errors import ConfigError

# What a run appends to or resumes from: left over, it would be read as the new run's.
# Kept on purpose: audit.jsonl (an audit trail is appended to, never cleared; each
# record names its session), label-draw.json (parties/label_draws.py: a restart
# must not hand the guests a second noising of the same labels), and a hidden-mode
# SecureBoost guest's reveal-ledger.jsonl with the Host's reveal-masks.json
# (secureboost/ledger.py: a restart must not have a split node decrypted twice).
STALE = ("checkpoints", "metrics.jsonl", "party.log", "summary.json")


def claim(
    out: Path, *, resume: bool = False, overwrite: bool = False, can_resume: bool = True
) -> None:
    """Make ``out`` ready for this run, or raise a ConfigError naming the flag to use.

    ``resume`` keeps what is there (the run continues); ``overwrite`` clears the stale
    files of an earlier run; without either, a folder that holds anything is refused.
    """
    if resume and overwrite:
        raise ConfigError("--resume continues the run in --out, --overwrite replaces it: pass one")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file; give a folder")
    if resume or not used(out):
        return
    if not overwrite:
        flags = "--resume to continue it or --overwrite" if can_resume else "--overwrite"
        raise ConfigError(
            f"--out {out} already holds an earlier run; pass {flags} to replace it, "
            "or choose an empty folder"
        )
    clear(out)


def used(out: Path) -> bool:
    """Whether ``out`` is a folder with anything in it."""
    return out.is_dir() and any(out.iterdir())


def clear(out: Path) -> None:
    """Remove the appended and resumable files of an earlier run from ``out`` and its folders."""
    for folder in [out, *(p for p in out.iterdir() if p.is_dir())]:
        for name in STALE:
            path = folder / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            elif path.exists() or path.is_symlink():
                path.unlink()
