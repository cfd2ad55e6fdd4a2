"""privfl audit verify on logs written in-process: what an honest session that failed shows."""

from __future__ import annotations

from pathlib import Path

import zmq

from privfl.parties.audit import FILE_NAME, AuditLog
from privfl.parties.audit_links import link_key
from privfl.protocol import codec
from privfl.protocol.messages import PROTOCOL, VERSION, Abort, Finish, Header, Kind
from privfl.tools.audit.verify import verify


def message(sender: str, receiver: str, msg_id: int, *, abort: bool = False) -> list[bytes]:
    kind = Kind.ABORT if abort else Kind.FINISH
    header = Header(PROTOCOL, VERSION, "s", sender, receiver, 0, msg_id, kind)
    body = Abort(reason="x") if abort else Finish(epochs=msg_id, reason="done")
    return codec.encode(header, body)


def logs(tmp_path: Path) -> tuple[AuditLog, AuditLog]:
    a, b = zmq.curve_keypair(), zmq.curve_keypair()
    alice = AuditLog(
        tmp_path / "alice" / FILE_NAME, party="alice", session="s", job="j",
        links={"bob": link_key(a[1], b[0], "s")},
    )  # fmt: skip
    bob = AuditLog(
        tmp_path / "bob" / FILE_NAME, party="bob", session="s", job="j",
        links={"alice": link_key(b[1], a[0], "s")},
    )  # fmt: skip
    return alice, bob


def exchange(
    alice: AuditLog, bob: AuditLog, msg_id: int, *, arrives: bool = True, abort: bool = False
) -> None:
    frames = message("alice", "bob", msg_id, abort=abort)
    alice("sent", "bob", codec.decode_header(frames[0]), frames)
    if arrives:
        bob("received", "alice", codec.decode_header(frames[0]), frames)


def test_both_ends_record_the_same_link_and_an_honest_session_passes(tmp_path: Path) -> None:
    alice, bob = logs(tmp_path)
    for msg_id in (1, 2, 3):
        exchange(alice, bob, msg_id)
    alice.close("ok")
    bob.close("ok")

    report = verify([tmp_path])

    assert report.ok, report.findings


def test_a_message_to_a_peer_that_stopped_is_flagged_with_the_likely_cause(
    tmp_path: Path,
) -> None:
    alice, bob = logs(tmp_path)
    exchange(alice, bob, 1)
    exchange(alice, bob, 2, arrives=False)
    exchange(alice, bob, 3, arrives=False, abort=True)  # best effort: not a finding
    alice.close("error")
    bob.close("error")

    (finding,) = verify([tmp_path]).findings

    assert finding.startswith(f"{tmp_path / 'alice' / FILE_NAME}:3: sent finish #2 to bob")
    assert finding.endswith("or bob stopped before it arrived (its session did not end ok)")


def test_the_logs_of_one_session_must_bind_one_job(tmp_path: Path) -> None:
    for name, job in (("alice", "j1"), ("bob", "j2")):
        AuditLog(tmp_path / name / FILE_NAME, party=name, session="s", job=job).close("ok")

    findings = verify([tmp_path / "alice", tmp_path / "bob"]).findings

    assert findings == ["session s: the logs bind different jobs (alice: j1; bob: j2)"]
