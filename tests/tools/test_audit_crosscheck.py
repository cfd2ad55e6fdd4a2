"""The cross-check of two logs of one session: which unreceived sends are findings."""

from __future__ import annotations

import pytest

from privfl.tools.audit.chain import Line, Session
from privfl.tools.audit.crosscheck import cross_check


def logs(kind: str, *, received: bool, stage: int = 0) -> list[Session]:
    """The host's log sent one ``kind`` to the server; the server's log received it or not.
    ``stage``: the audit head's (its ``anchor`` on both lines)."""
    record: dict[str, object] = {"link": "ab", "kind": kind, "round": 3, "msg_id": 7, "size": 40}
    if stage:
        record["anchor"] = {"seq": 5, "head": "cd" * 32, "stage": stage}
    sent = Line(2, record | {"direction": "sent", "peer": "server"})
    host = Session("host.jsonl", "host", "s1", "job", 1, True, 9, "ok", [sent])
    got = [Line(4, record | {"direction": "received", "peer": "host"})] if received else []
    server = Session("server.jsonl", "server", "s1", "job", 1, True, 9, "ok", got)
    return [host, server]


@pytest.mark.parametrize("kind", ["progress", "abort", "audit_head"])
def test_a_best_effort_send_may_go_unreceived(kind: str) -> None:
    assert cross_check(logs(kind, received=False)) == []


def test_a_closing_exchanges_done_head_may_go_unreceived() -> None:
    assert cross_check(logs("audit_head", received=False, stage=1)) == []


def test_an_unreceived_last_head_of_the_closing_exchange_is_a_finding() -> None:
    # its receiver waits for it before closing: missing, one of the logs was cut
    (finding,) = cross_check(logs("audit_head", received=False, stage=2))
    assert finding.startswith("host.jsonl:2: sent audit_head #7 to server, which the peer's log")


def test_an_unreceived_message_of_the_protocol_is_a_finding() -> None:
    (finding,) = cross_check(logs("residual", received=False))
    assert finding.startswith("host.jsonl:2: sent residual #7 to server, which the peer's log")


@pytest.mark.parametrize("kind", ["progress", "residual"])
def test_a_receipt_with_no_send_is_a_finding_of_any_kind(kind: str) -> None:
    host, server = logs(kind, received=True)
    host.lines.clear()
    (finding,) = cross_check([host, server])
    assert finding.startswith(f"server.jsonl:4: received {kind} #7 from host")
