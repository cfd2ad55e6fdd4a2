"""One party's audit log read back: its hash chain checked line by line, cut into sessions.

Every finding is one line naming the log and the line number, and says what the
break means (an edited line breaks the ``prev`` of the next; a deleted or moved line
shifts ``seq``; a cut log ends without its session's ``closed`` line).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from privfl.parties.audit import GENESIS, line_hash

MESSAGE_DIRECTIONS = ("sent", "received", "refused")


@dataclass
class Line:
    """One message line of a session: where it is and what it says."""

    number: int  # 1-based line number in its log
    record: dict[str, Any]


@dataclass
class Session:
    """The lines of one party's log between an ``opened`` line and the next."""

    log: str
    party: str
    session: str
    job: str
    opened_at: int
    closed: bool = False
    closed_at: int = 0  # the closed line's number
    outcome: str | None = None  # the closed line's: ok or error
    lines: list[Line] = field(default_factory=list)


@dataclass
class Chain:
    """A log's sessions and what its chain check found."""

    log: str
    sessions: list[Session] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)


def read_chain(log: str, text: str) -> Chain:
    """Check ``text`` (the whole of the log named ``log``) and cut it into sessions."""
    chain = Chain(log)
    raw = text.split("\n")
    if raw and raw[-1] == "":
        raw.pop()  # the newline that ends the last complete line
    elif raw:
        chain.findings.append(f"{log}:{len(raw)}: the last line is cut short (log truncated)")
    if not raw:
        chain.findings.append(f"{log}: the log is empty (no opened line)")
    offset, prev = 0, GENESIS
    for index, line in enumerate(raw):
        record = _parse(chain, index + 1, line)
        if record is not None:
            offset = _check_link(chain, index, record, prev, offset)
            _place(chain, index + 1, record)
        prev = line_hash(line)
    for session in chain.sessions:
        if not session.closed:
            chain.findings.append(
                f"{log}:{session.opened_at}: session {session.session} of {session.party} has "
                "no closed line (the log was cut, or the party was killed)"
            )
    return chain


def _parse(chain: Chain, number: int, line: str) -> dict[str, Any] | None:
    try:
        record = json.loads(line)
    except ValueError:
        record = None
    if not isinstance(record, dict) or "seq" not in record or "prev" not in record:
        chain.findings.append(f"{chain.log}:{number}: not a chained audit record (edited or cut)")
        return None
    return record


def _check_link(chain: Chain, index: int, record: dict[str, Any], prev: str, offset: int) -> int:
    """Check ``seq`` and ``prev``; return the seq offset seen, so one gap is reported once."""
    number = index + 1
    if record["prev"] != prev:
        what = (
            "does not start a chain (the log's beginning is missing)"
            if index == 0
            else f"does not chain to line {index} (that line was edited, or lines were "
            "deleted or moved here)"
        )
        chain.findings.append(f"{chain.log}:{number}: {what}")
    seq = record["seq"]
    new_offset = seq - index if isinstance(seq, int) else offset
    if new_offset != offset or not isinstance(seq, int):
        chain.findings.append(
            f"{chain.log}:{number}: seq is {seq}, expected {index} (lines were deleted, "
            "inserted or moved)"
        )
    return new_offset


def _place(chain: Chain, number: int, record: dict[str, Any]) -> None:
    """Start a session at an opened line; file message and closed lines under the current one."""
    direction = record.get("direction")
    if direction == "opened":
        chain.sessions.append(
            Session(
                chain.log,
                str(record.get("party")),
                str(record.get("session")),
                str(record.get("job")),
                number,
            )
        )
        return
    if not chain.sessions:
        chain.findings.append(f"{chain.log}:{number}: a record before any opened line")
        return
    current = chain.sessions[-1]
    if direction == "closed":
        current.closed, current.outcome = True, str(record.get("outcome"))
        current.closed_at = number
    elif direction in MESSAGE_DIRECTIONS:
        current.lines.append(Line(number, record))
        if record.get("link") is None:
            chain.findings.append(f"{chain.log}:{number}: no link digest (cannot be cross-checked)")
        if direction != "refused" and record.get("session") != current.session:
            chain.findings.append(
                f"{chain.log}:{number}: records session {record.get('session')} inside session "
                f"{current.session} (lines were moved between sessions)"
            )
    else:
        chain.findings.append(f"{chain.log}:{number}: unknown direction {direction!r}")
