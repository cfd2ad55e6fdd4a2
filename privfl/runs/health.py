"""Whether a party is waiting, training or stopped, read from the audit log it writes.

Every party (vertical and horizontal) appends an ``opened`` line to ``audit.jsonl`` in
its run folder when its session starts, one line per message it sends or receives, and
a ``closed`` line with the session's outcome when it ends (parties/audit.py). The last
of those lines says where the party is: a container's health check and a Kubernetes
probe (deploy/) call :func:`party_health` through ``privfl health`` and need nothing
else from the party: no port, no signal, no extra file. Only the log's tail is read,
so a probe costs the same after a day of training as after a minute.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from privfl.parties.audit import FILE_NAME

TAIL_BYTES = 64 * 1024  # far more than one line (a line is well under 1 KiB)


@dataclass(frozen=True, slots=True)
class Health:
    """``state``: waiting, training or stopped; ``ok``: False for a failed stop or no run."""

    state: str
    detail: str
    ok: bool

    def line(self) -> str:
        return f"{self.state}: {self.detail}"


def party_health(out: Path) -> Health:
    """The health of the party whose run folder (its ``--out``) is ``out``."""
    path = out / FILE_NAME
    if not path.is_file():
        if out.is_dir():
            return Health("waiting", f"starting: no session opened yet in {out}", True)
        return Health("stopped", f"no run folder at {out}", False)
    for record in reversed(_tail_records(path)):
        found = _judge(record)
        if found is not None:
            return found
    return Health("waiting", "starting: no session opened yet", True)


def _judge(record: dict[str, Any]) -> Health | None:
    """The health that ``record`` shows when it is the last line that says anything."""
    direction, when = record.get("direction"), record.get("time", "?")
    if direction == "closed":
        outcome = str(record.get("outcome", "?"))
        return Health("stopped", f"session ended ({outcome}) at {when}", outcome == "ok")
    if direction == "received":
        peer, kind = record.get("peer", "?"), record.get("kind", "?")
        return Health("training", f"last message {kind} from {peer} at {when}", True)
    if direction == "opened":
        return Health("waiting", f"session opened at {when}, no message from a peer yet", True)
    return None  # a sent message: look further back


def _tail_records(path: Path) -> list[dict[str, Any]]:
    """The complete JSON lines among the last TAIL_BYTES of ``path``."""
    with path.open("rb") as handle:
        size = handle.seek(0, 2)
        handle.seek(max(0, size - TAIL_BYTES))
        chunk = handle.read()
    lines = chunk.splitlines()
    if size > TAIL_BYTES and lines:
        lines = lines[1:]  # the first line may be cut
    records = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line still being written
        if isinstance(record, dict):
            records.append(record)
    return records
