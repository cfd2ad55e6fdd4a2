"""The files a party writes: JSON documents (atomically, optionally durable) and JSON lines.

Every JSON file of a run directory — summaries, models, checkpoints — goes through
:func:`write_json`; every per-line log — metrics, the audit log — through
:func:`append_jsonl`; everything else (party.log, plots, predictions) is opened by
:func:`open_private`. A run holds labels, noise, scores and logs that name rows, so
each folder a party creates is 0700 (:func:`private_dir`) and each file 0600,
whatever the umask: modes are set explicitly, not left to it.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import IO, Any

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: Path) -> Path:
    """``path`` as a folder; every folder this creates on the way is made 0700."""
    missing = []
    folder = path
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for folder in reversed(missing):
        folder.mkdir(exist_ok=True)
        os.chmod(folder, DIR_MODE)  # explicit: mkdir's mode is filtered by the umask
    return path


def open_private(path: Path, mode: str = "w", **kwargs: Any) -> IO[Any]:
    """``open(path, mode)`` for a file of mode 0600, its folder made by :func:`private_dir`.

    ``mode``: "w", "a", "wb" or "ab"; ``kwargs`` go to :func:`open` (``newline``).
    """
    private_dir(path.parent)
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if "a" in mode else os.O_TRUNC)
    fd = os.open(path, flags, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)  # a file made earlier, or under another umask
    except BaseException:
        os.close(fd)
        raise
    # Not inside the try: an interrupt (Ctrl-C) that lands in fdopen after the file object
    # took the descriptor would have it closed twice (EBADF, or another thread's new file).
    return os.fdopen(fd, mode, **kwargs)


def write_json(path: Path, data: Any, *, compact: bool = False, durable: bool = False) -> None:
    """Write JSON atomically: a reader never sees half a file (mkstemp makes it 0600).

    ``compact``: one line without indentation or final newline (checkpoints);
    otherwise indented by two with a final newline. ``durable``: as :func:`write_text`.
    """
    # dumps, not dump: only the one-shot encoder is the C one
    text = json.dumps(data) if compact else json.dumps(data, indent=2, allow_nan=True) + "\n"
    write_text(path, text, durable=durable)


def write_text(path: Path, text: str, *, durable: bool = False) -> None:
    """Write ``text`` atomically, mode 0600 (mkstemp). ``durable``: fsync the file and its
    folder, so the new file survives a power cut once this returns."""
    private_dir(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


def save_figure(figure: Any, path: Path, dpi: int) -> None:
    """A matplotlib figure as a PNG of mode 0600 (``savefig`` itself would follow the umask)."""
    with open_private(path, "wb") as handle:
        figure.savefig(handle, format="png", dpi=dpi)


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """Append one JSON line (a metrics record per epoch or round, an audit record)."""
    line = json.dumps(record) + "\n"
    with open_private(path, "a") as handle:
        handle.write(line)
