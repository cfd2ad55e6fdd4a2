"""Across the parties' logs of one session: every message sent was received, and back.

Two lines are the same message when they carry the same ``link`` digest, which its
sender and receiver compute from their shared link key (privfl/parties/audit_links.py)
and nobody else can forge for a payload, and agree on what else both record of it
(kind, round, id, size). A party that rewrites its own whole chain
consistently passes its own chain check; it is caught here, where its peers' logs
disagree with it, unless every party of the session rewrote theirs to agree.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from privfl.tools.audit.anchors import is_last_head
from privfl.tools.audit.chain import Line, Session

RECEIVED = ("received", "refused")  # a refused message reached the receiver's log too
SHARED = ("link", "kind", "round", "msg_id", "size")  # what both ends record of a message
# sent to peers that may be gone already: may never be received (a progress tick goes out
# without waiting, and the last one may reach a peer that has just closed its inbox) —
# except the closing exchange's last heads, which each end waits for (parties/audit.py)
BEST_EFFORT = {"abort", "audit_head", "progress"}
STOPPED = "; or {} stopped before it arrived (its session did not end ok)"


def cross_check(sessions: Iterable[Session]) -> list[str]:
    """One finding per disagreement between the logs of each session."""
    grouped: dict[str, dict[str, list[Session]]] = defaultdict(lambda: defaultdict(list))
    for session in sessions:
        grouped[session.session][session.party].append(session)
    findings: list[str] = []
    for sid in sorted(grouped):
        parties = grouped[sid]
        findings += _one_log_each(sid, parties)
        findings += _same_job(sid, parties)
        for party in sorted(parties):
            findings += _peers_present(sid, party, parties)
            for peer in sorted(set(parties) - {party}):
                findings += _unmatched(party, peer, parties)
    return findings


def _one_log_each(sid: str, parties: dict[str, list[Session]]) -> list[str]:
    files = {party: sorted({s.log for s in logs}) for party, logs in sorted(parties.items())}
    return [
        f"session {sid}: {len(names)} logs claim party {party} ({', '.join(names)})"
        for party, names in files.items()
        if len(names) > 1
    ]


def _same_job(sid: str, parties: dict[str, list[Session]]) -> list[str]:
    jobs = {s.job for logs in parties.values() for s in logs}
    if len(jobs) <= 1:
        return []
    named = sorted(f"{s.party}: {s.job[:16]}" for logs in parties.values() for s in logs)
    return [f"session {sid}: the logs bind different jobs ({'; '.join(named)})"]


def _peers_present(sid: str, party: str, parties: dict[str, list[Session]]) -> list[str]:
    """A peer this party talked to in the session, whose log of that session is missing."""
    counts: dict[str, int] = defaultdict(int)
    for session in parties[party]:
        for line in session.lines:
            counts[str(line.record.get("peer"))] += 1
    log = parties[party][0].log
    return [
        f"{log}: {party} exchanged {n} messages with {peer} in session {sid}, but no log of "
        f"{peer} for that session was given (pass its run folder; or its log was replaced)"
        for peer, n in sorted(counts.items())
        if peer not in parties
    ]


def _unmatched(sender: str, receiver: str, parties: dict[str, list[Session]]) -> list[str]:
    """Lines of ``sender``'s sends to ``receiver`` and of their receipt that find no twin."""
    sent = _by_link(parties[sender], receiver, ("sent",))
    got = _by_link(parties[receiver], sender, RECEIVED)
    findings = []
    stopped = any(s.outcome != "ok" for s in parties[receiver])
    for link, lines in sorted(sent.items()):
        for line in lines[len(got.get(link, [])) :]:
            if line.record.get("kind") not in BEST_EFFORT or is_last_head(line):
                finding = _say(parties[sender][0].log, line, f"to {receiver}", "received")
                findings.append(finding + (STOPPED.format(receiver) if stopped else ""))
    for link, lines in sorted(got.items()):
        for line in lines[len(sent.get(link, [])) :]:
            findings.append(_say(parties[receiver][0].log, line, f"from {sender}", "sent"))
    return findings


def _by_link(
    sessions: list[Session], peer: str, directions: tuple[str, ...]
) -> dict[tuple[str, ...], list[Line]]:
    out: dict[tuple[str, ...], list[Line]] = defaultdict(list)
    for session in sessions:
        for line in session.lines:
            record = line.record
            if record.get("peer") == peer and record.get("direction") in directions:
                out[tuple(str(record.get(k)) for k in SHARED)].append(line)
    return out


def _say(log: str, line: Line, where: str, other: str) -> str:
    record = line.record
    return (
        f"{log}:{line.number}: {record.get('direction')} {record.get('kind')} "
        f"#{record.get('msg_id')} {where}, which the peer's log does not record as {other} "
        "(one of the two logs was edited or cut)"
    )
