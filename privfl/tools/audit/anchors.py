"""The heads a party sent its peers, checked against its own log: no rewrite alone.

Each party sends each peer the head of its chain (``audit_head``) and the peer records
it in its own chain (``anchor``: ``seq`` lines and the sha256 of the last; see
privfl/parties/audit.py). A party that rewrites lines of its log — even every line,
with every ``seq`` and ``prev`` recomputed — no longer has the head its peers recorded,
unless it also rewrites every peer's log. A session that ended ok ends with the closing
exchange (privfl/parties/audit.py): each peer that recorded heads of a party also recorded
its last head (HEAD_LAST), which anchors every line before it; a peer's log that ended ok
without it is a finding (the sender's log was cut before its exchange, or it stopped).
What this check cannot see is said too: a log whose peers' logs were not given, or lines
after the last recorded head that no peer's log records (the closing exchange's last
heads are recorded by both ends, and the cross-check matches them).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from privfl.parties.audit import line_hash
from privfl.protocol.messages import HEAD_LAST
from privfl.tools.audit.chain import Chain, Line, Session

Key = tuple[str, str]  # (party, session)


@dataclass(frozen=True)
class Anchored:
    """What the anchors told: findings (rewrites) and notes (what they cannot tell)."""

    findings: list[str]
    notes: list[str]


def check_anchors(chains: list[Chain], texts: dict[str, str]) -> Anchored:
    """Check every recorded head against the sender's log of the same session."""
    logs = {(s.party, s.session): chain.log for chain in chains for s in chain.sessions}
    lines = {log: texts[log].split("\n") for log in {c.log for c in chains}}
    findings: list[str] = []
    covered: dict[Key, int] = defaultdict(int)  # lines a head vouches for
    for chain in chains:
        for session in chain.sessions:
            for line in session.lines:
                anchor = line.record.get("anchor")
                sender = str(line.record.get("peer"))
                log = logs.get((sender, session.session))
                if not isinstance(anchor, dict) or line.record.get("direction") != "received":
                    continue
                if log is None:
                    continue  # the cross-check already says that the sender's log is missing
                seq, head = anchor.get("seq"), str(anchor.get("head"))
                key = (sender, session.session)
                if isinstance(seq, int) and _matches(lines[log], seq, head):
                    covered[key] = max(covered[key], seq)
                    continue
                findings.append(
                    f"{log}: its first {seq} lines do not end in the head {head[:16]}… that "
                    f"{session.party} recorded from {sender} ({chain.log}:{line.number}): "
                    f"{sender}'s log was rewritten after it sent that head (or "
                    f"{session.party}'s log was)"
                )
    sessions = {(s.party, s.session): s for chain in chains for s in chain.sessions}
    findings += _no_last_head(chains, sessions, covered)
    return Anchored(findings, _notes(chains, sessions, covered))


def is_last_head(line: Line) -> bool:
    """Whether ``line`` records a HEAD_LAST head of the closing exchange (sent or received)."""
    anchor = line.record.get("anchor")
    return isinstance(anchor, dict) and anchor.get("stage") == HEAD_LAST


def _no_last_head(
    chains: list[Chain], sessions: dict[tuple[str, str], Session], covered: dict[Key, int]
) -> list[str]:
    """One finding per peer that ended ok, recorded heads of a party that ended ok, and
    not its last head: that party's last lines are anchored in no peer's log."""
    findings = []
    for chain in chains:
        for session in chain.sessions:
            if session.outcome != "ok":
                continue
            heads: dict[str, bool] = {}  # sender: whether its last head is among them
            for line in session.lines:
                if line.record.get("direction") == "received" and "anchor" in line.record:
                    sender = str(line.record.get("peer"))
                    heads[sender] = heads.get(sender, False) or is_last_head(line)
            for sender in sorted(p for p, last in heads.items() if not last):
                theirs = sessions.get((sender, session.session))
                if theirs is None or theirs.outcome != "ok":
                    continue  # a missing log is the cross-check's; a failed session, a note's
                upto = covered.get((sender, session.session), 0)
                findings.append(
                    f"{theirs.log}: {session.party} recorded no last head of {sender} "
                    f"({chain.log}), though both sessions ended ok: lines {upto + 1}–"
                    f"{theirs.closed_at} of {sender}'s session {session.session} are anchored "
                    f"in no peer's log (the log was cut before its closing exchange, or the "
                    "exchange did not complete)"
                )
    return findings


def _matches(lines: list[str], seq: int, head: str) -> bool:
    """Whether line ``seq`` (1-based) exists and hashes to ``head``."""
    return 1 <= seq <= len(lines) and line_hash(lines[seq - 1]) == head


def _notes(
    chains: list[Chain], sessions: dict[tuple[str, str], Session], covered: dict[Key, int]
) -> list[str]:
    notes = []
    for chain in chains:
        for session in chain.sessions:
            upto = covered.get((session.party, session.session), 0)
            if not upto:
                notes.append(
                    f"{chain.log}: no given log holds a head of {session.party}'s session "
                    f"{session.session}: a rewrite of its whole chain cannot be told from the "
                    "chain alone (pass a peer's run folder of that session)"
                )
                continue
            loose = [
                line.number
                for line in session.lines
                if line.number > upto
                and not (
                    is_last_head(line)
                    and (str(line.record.get("peer")), session.session) in sessions
                )
            ]
            if loose:
                notes.append(
                    f"{chain.log}: lines {_spans(loose)} of session {session.session} come "
                    f"after line {upto}, the last one a peer's log anchors: a rewrite of what "
                    "they claim is told by the chain and the link digests only"
                )
    return notes


def _spans(numbers: list[int]) -> str:
    """``3–5, 8`` for [3, 4, 5, 8]."""
    spans: list[list[int]] = []
    for n in numbers:
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in spans)
