"""The audit log: one JSON line per message a party sends, receives or refuses — never the payload.

Each line: ``time`` (UTC, ISO 8601), ``direction`` (sent / received / refused),
``peer``, ``kind``, ``session``, ``round``, ``msg_id``, ``size`` (bytes of all
frames), ``key_id`` and ``hmac_sha256``: HMAC-SHA256 of the body frame (the payload)
under this party's audit key for this session. A refused message may have no
readable header: its kind, round and id are null.

Why keyed: many payloads are low-entropy (a ``boost_split`` is four small
integers), so a plain sha256 of one is reversed by hashing every candidate. Each
session of a party draws a fresh 256-bit key from the OS CSPRNG and appends it,
with its ``key_id``, to ``audit-keys.jsonl`` next to the log (mode 0600, like every
run file): a reader of the log alone learns nothing about a payload, while the
party can still show which payload a line records (:func:`verify`), and two sites
can compare a message by disclosing that one session's key.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import threading
from datetime import UTC, datetime
from pathlib import Path

from privfl.parties.files import append_jsonl, private_dir
from privfl.protocol.messages import Header

FILE_NAME = "audit.jsonl"
KEYS_FILE = "audit-keys.jsonl"
KEY_BYTES = 32


def digest(key: bytes, payload: bytes) -> str:
    """The payload's HMAC-SHA256 under the session's audit key (hex)."""
    return hmac.new(key, payload, hashlib.sha256).hexdigest()


class AuditLog:
    """Appends audit records to a file; usable as a Channel observer (thread-safe)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        private_dir(path.parent)
        self._lock = threading.Lock()
        self._key = secrets.token_bytes(KEY_BYTES)  # this session's; never reused
        self.key_id = secrets.token_hex(8)
        created = datetime.now(UTC).isoformat(timespec="seconds")
        append_jsonl(
            path.parent / KEYS_FILE,
            {"key_id": self.key_id, "key": self._key.hex(), "created": created},
        )

    def __call__(
        self, direction: str, peer: str, header: Header | None, frames: list[bytes]
    ) -> None:
        """Record one message; ``frames[-1]`` is the payload that gets digested."""
        record = {
            "time": datetime.now(UTC).isoformat(timespec="microseconds"),
            "direction": direction,
            "peer": peer,
            "kind": str(header.kind) if header else None,
            "session": header.session if header else None,
            "round": header.round if header else None,
            "msg_id": header.msg_id if header else None,
            "size": sum(len(f) for f in frames),
            "key_id": self.key_id,
            "hmac_sha256": digest(self._key, frames[-1] if frames else b""),
        }
        with self._lock:
            append_jsonl(self.path, record)


def verify(folder: Path, record: dict[str, object], payload: bytes) -> bool:
    """Whether ``record`` (a line of ``folder``'s audit log) records ``payload``.

    Needs the party's own ``audit-keys.jsonl``: only the log's owner can check.
    """
    keys = {}
    for line in (folder / KEYS_FILE).read_text().splitlines():
        entry = json.loads(line)
        keys[entry["key_id"]] = bytes.fromhex(entry["key"])
    key = keys.get(str(record.get("key_id")))
    return key is not None and hmac.compare_digest(
        digest(key, payload), str(record.get("hmac_sha256"))
    )
