"""The heads a party sent its peers, checked against its own log: no rewrite alone.

Each party sends each peer the head of its chain (``audit_head``) and the peer records
it in its own chain (``anchor``: ``seq`` lines and the sha256 of the last; see
privfl/parties/audit.py). A party that rewrites lines of its log — even every line,
with every ``seq`` and ``prev`` recomputed — no longer has the head its peers recorded,
unless it also rewrites every peer's log. What this check cannot see is said too: a
log whose peers' logs were not given, or the lines after the last head a peer recorded.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from privfl.parties.audit import line_hash
from privfl.tools.audit.chain import Chain


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
    covered: dict[tuple[str, str], int] = defaultdict(int)  # lines a head vouches for
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
    return Anchored(findings, _notes(chains, covered))


def _matches(lines: list[str], seq: int, head: str) -> bool:
    """Whether line ``seq`` (1-based) exists and hashes to ``head``."""
    return 1 <= seq <= len(lines) and line_hash(lines[seq - 1]) == head


def _notes(chains: list[Chain], covered: dict[tuple[str, str], int]) -> list[str]:
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
            elif upto < session.closed_at:
                notes.append(
                    f"{chain.log}: lines 1–{upto} of session {session.session} are anchored in "
                    f"a peer's log; lines {upto + 1}–{session.closed_at} are checked by the "
                    "chain and the link digests only"
                )
    return notes
