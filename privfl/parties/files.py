"""The files a party writes: JSON documents (atomically, optionally durable) and JSON lines.

Every JSON file of a run directory — summaries, models, checkpoints — goes through
:func:`write_json`; every per-line log — metrics, the audit log — through
:func:`append_jsonl`.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_json(path: Path, data: Any, *, compact: bool = False, durable: bool = False) -> None:
    """Write JSON atomically: a reader never sees half a file (mkstemp makes it 0600).

    ``compact``: one line without indentation or final newline (checkpoints);
    otherwise indented by two with a final newline. ``durable``: fsync the file and
    its folder, so the new file survives a power cut once this returns.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as handle:
            if compact:  # dumps, not dump: only the one-shot encoder is the C one
                handle.write(json.dumps(data))
            else:
                json.dump(data, handle, indent=2, allow_nan=True)
                handle.write("\n")
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


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """Append one JSON line (a metrics record per epoch or round, an audit record)."""
    line = json.dumps(record) + "\n"
    with path.open("a") as handle:
        handle.write(line)
