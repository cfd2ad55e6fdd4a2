"""`privfl health`: waiting, training or stopped, read from the audit log a party writes."""

from __future__ import annotations

from pathlib import Path

from processes import privfl_here

from privfl.parties.audit import FILE_NAME, AuditLog
from privfl.protocol import codec
from privfl.protocol.messages import PROTOCOL, VERSION, Abort, Header, Kind
from privfl.runs.health import TAIL_BYTES, party_health


def message(sender: str, receiver: str, msg_id: int) -> tuple[Header, list[bytes]]:
    header = Header(PROTOCOL, VERSION, "s", sender, receiver, 0, msg_id, Kind.ABORT)
    return header, codec.encode(header, Abort(reason="x"))


def test_a_party_waits_then_trains_then_stops_as_its_audit_log_says(tmp_path: Path) -> None:
    # Prepare: the log a party writes (parties/audit.py), one step at a time.
    assert party_health(tmp_path).state == "waiting"  # the folder, no session yet
    audit = AuditLog(tmp_path / FILE_NAME, party="host", session="s", job="j")
    opened = party_health(tmp_path)
    audit("sent", "server", *message("host", "server", 1))
    sent_only = party_health(tmp_path)
    audit("received", "server", *message("server", "host", 1))
    audit("sent", "server", *message("host", "server", 2))  # a later send: still training
    training = party_health(tmp_path)
    audit.close("ok")
    stopped = party_health(tmp_path)

    # Assert
    assert (opened.state, opened.ok) == ("waiting", True)
    assert (sent_only.state, sent_only.ok) == ("waiting", True)
    assert (training.state, training.ok) == ("training", True)
    assert "abort from server" in training.detail
    assert (stopped.state, stopped.ok) == ("stopped", True)
    assert "(ok)" in stopped.detail


def test_a_failed_session_and_a_missing_folder_are_unhealthy(tmp_path: Path) -> None:
    AuditLog(tmp_path / "run" / FILE_NAME, party="host", session="s", job="j").close("error")

    failed = party_health(tmp_path / "run")
    missing = party_health(tmp_path / "nowhere")

    assert (failed.state, failed.ok) == ("stopped", False)
    assert (missing.state, missing.ok) == ("stopped", False)


def test_a_resumed_session_reads_as_its_own_and_only_the_tail_is_read(tmp_path: Path) -> None:
    # Prepare: a long first session, closed, then a second one opened in the same log.
    first = AuditLog(tmp_path / FILE_NAME, party="host", session="s", job="j")
    while (tmp_path / FILE_NAME).stat().st_size < 2 * TAIL_BYTES:
        first("received", "server", *message("server", "host", 1))
    first.close("ok")
    AuditLog(tmp_path / FILE_NAME, party="host", session="s2", job="j")

    # Act / Assert: the second session waits (the first one's close is history).
    assert party_health(tmp_path).state == "waiting"


def test_the_command_prints_one_line_and_exits_by_health(tmp_path: Path) -> None:
    AuditLog(tmp_path / "ok" / FILE_NAME, party="host", session="s", job="j")
    AuditLog(tmp_path / "bad" / FILE_NAME, party="host", session="s", job="j").close("error")

    waiting = privfl_here("health", "--out", str(tmp_path / "ok"))
    failed = privfl_here("health", "--out", str(tmp_path / "bad"))

    assert waiting.returncode == 0 and waiting.stdout.startswith("waiting: session opened")
    assert failed.returncode == 1 and failed.stdout.startswith("stopped: session ended (error)")
    assert len(failed.stdout.splitlines()) == 1 and not failed.stderr
