"""A hidden-mode guest's prediction sessions, kept beside its model (``predictions.jsonl``).

In a prediction session of a hidden-instance-space model the guest decrypts one masked
request per split node its training answered (predict.requestable), each holding
whichever of its candidate sets the Host picks. The guest cannot tell which, so every
session over the same rows may give a deviating Host another set per node: 9 to 11
sessions read every guest cell of breast cancer's rows at the defaults
(docs/security.md). So the guest books
each session in ``predictions.jsonl`` (mode 0600) next to its ``model.json``: the
model's digest, a digest of the rows of its own prediction file and how many requests
it answered, and by default refuses a second session of the same model over the same
rows. The rows are digested before the private set intersection: the Host's id set
changes the intersection, never what the guest books. An operator who means to predict
the same rows again passes ``--allow-repeat-prediction``; the record books it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from privfl.data.tables import IdTable
from privfl.errors import ConfigError
from privfl.parties.files import write_text

log = logging.getLogger("privfl.guest")
FILE_NAME = "predictions.jsonl"
OPTION = "--allow-repeat-prediction"


@dataclass
class Booking:
    """This session's record in the model's ledger; ``earlier``: sessions over these rows."""

    path: Path
    records: list[dict[str, Any]]
    earlier: int

    def close(self, answered: int) -> None:
        """Book how many requests this session answered (the file rewritten whole)."""
        self.records[-1]["answered"] = answered
        self.save()

    def save(self) -> None:
        """Every record, atomically and durably (mode 0600)."""
        write_text(self.path, "\n".join(json.dumps(r) for r in self.records), durable=True)


def model_digest(path: Path) -> str:
    """SHA-256 of the saved model file."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def rows_digest(table: IdTable, by_id: bool) -> str:
    """SHA-256 of the guest's own rows as a set: its sorted ids, or (rows matched by
    position, whose ids are only row numbers) its rows' values, each hashed, sorted."""
    if by_id:
        items = sorted(table.ids)
    else:
        values = np.ascontiguousarray(table.x, dtype=np.float64)
        items = sorted(hashlib.sha256(row.tobytes()).hexdigest() for row in values)
    return hashlib.sha256(json.dumps(items).encode()).hexdigest()


def admit(model: Path, rows: str, count: int, *, allow_repeat: bool) -> Booking:
    """Book a session of ``model`` over ``rows`` before anything is decrypted, or refuse
    it if one was booked before and ``allow_repeat`` is not given."""
    path = model.parent / FILE_NAME
    records = read(path)
    digest = model_digest(model)
    earlier = sum(1 for r in records if (r.get("model"), r.get("rows")) == (digest, rows))
    if earlier and not allow_repeat:
        raise ConfigError(
            f"this guest already predicted these {count} rows with this model ({path}); each "
            f"session may give a deviating host one more candidate set per node of them: "
            f"predict other rows, or pass {OPTION} to predict them again"
        )
    record = {"model": digest, "rows": rows, "count": count, "repeat": earlier}
    record |= {"answered": None, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    booking = Booking(path, [*records, record], earlier)
    try:
        booking.save()  # durable before the first decryption; a torn line left is dropped
    except OSError as exc:
        raise ConfigError(
            f"cannot book this prediction session in {path} ({exc}): the guest keeps its "
            "sessions beside its model; make that folder writable, or copy the model's "
            "folder to one that is"
        ) from exc
    if earlier:
        log.warning(
            "%s: session %d of this model over these rows: a deviating host may hold %d "
            "candidate sets per node of them",
            OPTION,
            earlier + 1,
            earlier + 1,
        )
    return booking


def read(path: Path) -> list[dict[str, Any]]:
    """The ledger's records (none if there is no file); a torn last line is dropped."""
    if not path.exists():
        return []
    try:
        lines = path.read_text().split("\n")
        records = []
        for i, line in enumerate(lines, start=1):
            try:
                record = json.loads(line)
            except ValueError:
                if i < len(lines):
                    raise ValueError(f"line {i} is damaged") from None
                continue
            if not isinstance(record, dict):
                raise ValueError(f"line {i} is not a record")
            records.append(record)
        return records
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"{path} is unreadable ({exc}): restore it from your backup; it books this "
            "model's prediction sessions"
        ) from exc
