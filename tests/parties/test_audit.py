"""The audit log: every message sent and received, as JSON lines with keyed digests only."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from helpers import failures, memory_job, run_in_threads

from privfl.parties.audit import FILE_NAME, AuditLog, verify
from privfl.protocol import codec
from privfl.protocol.memory import InMemoryHub
from privfl.protocol.messages import PROTOCOL, VERSION, Abort, Header, Kind

FIELDS = {
    "time", "direction", "peer", "kind", "session", "round", "msg_id", "size", "key_id",
    "hmac_sha256",
}  # fmt: skip


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_every_message_is_audited_on_both_sides_without_its_payload(tmp_path: Path) -> None:
    job = memory_job(epochs=2, epsilon=4.0, flipback_every=1)
    hub = InMemoryHub()

    results = run_in_threads(job, hub, tmp_path)

    assert not failures(results)
    audits = {name: lines(tmp_path / name / FILE_NAME) for name in job.parties}
    for sent in hub.sent:
        header = codec.decode_header(sent.frames[0])
        size = sum(len(f) for f in sent.frames)
        out = {"direction": "sent", "peer": sent.receiver, "msg_id": header.msg_id, "size": size}
        into = {"direction": "received", "peer": sent.sender, "msg_id": header.msg_id, "size": size}
        for name, want in ((sent.sender, out), (sent.receiver, into)):
            match = [
                r
                for r in audits[name]
                if r.items() >= want.items() and verify(tmp_path / name, r, sent.frames[-1])
            ]
            assert len(match) == 1, (name, want)
            assert match[0]["kind"] == str(header.kind) and match[0]["round"] == header.round
    assert sum(len(a) for a in audits.values()) == 2 * len(hub.sent)
    for name, records in audits.items():
        assert all(set(r) == FIELDS for r in records), name
        text = (tmp_path / name / FILE_NAME).read_text()
        # No payload: the longest ciphertext on the wire would be hundreds of digits.
        assert max(len(word) for word in text.replace('"', " ").split()) < 80


def test_refused_messages_are_audited_too(tmp_path: Path) -> None:
    audit = AuditLog(tmp_path / FILE_NAME)
    header = Header(PROTOCOL, VERSION, "s", "bob", "alice", 0, 1, Kind.ABORT)
    frames = codec.encode(header, Abort(reason="x"))

    audit("refused", "bob", None, [b"\xff garbage"])
    audit("received", "bob", header, frames)

    refused, received = lines(tmp_path / FILE_NAME)
    assert refused["kind"] is None and refused["size"] == 9
    assert verify(tmp_path, refused, b"\xff garbage")
    assert not verify(tmp_path, refused, b"\xff garbagE")
    assert refused["hmac_sha256"] != hashlib.sha256(b"\xff garbage").hexdigest()
    assert received["kind"] == "abort" and received["msg_id"] == 1
