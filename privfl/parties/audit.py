"""The audit log: one JSON line per message a party sends, receives or refuses — never the payload.

Each line: ``time`` (UTC, ISO 8601), ``direction`` (sent / received / refused),
``peer``, ``kind``, ``session``, ``round``, ``msg_id``, ``size`` (bytes of all
frames) and ``sha256`` (hex digest of the body frame, the payload). With the
digests two sites can prove which message they exchanged without revealing it.
A refused message may have no readable header: its kind, round and id are null.
"""

from __future__ import annotations

import hashlib
import threading
from datetime import UTC, datetime
from pathlib import Path

from privfl.parties.files import append_jsonl
from privfl.protocol.messages import Header

FILE_NAME = "audit.jsonl"


class AuditLog:
    """Appends audit records to a file; usable as a Channel observer (thread-safe)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def __call__(
        self, direction: str, peer: str, header: Header | None, frames: list[bytes]
    ) -> None:
        """Record one message; ``frames[-1]`` is the payload that gets hashed."""
        record = {
            "time": datetime.now(UTC).isoformat(timespec="microseconds"),
            "direction": direction,
            "peer": peer,
            "kind": str(header.kind) if header else None,
            "session": header.session if header else None,
            "round": header.round if header else None,
            "msg_id": header.msg_id if header else None,
            "size": sum(len(f) for f in frames),
            "sha256": hashlib.sha256(frames[-1] if frames else b"").hexdigest(),
        }
        with self._lock:
            append_jsonl(self.path, record)
