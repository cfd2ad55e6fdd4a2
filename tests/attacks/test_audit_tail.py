"""Attack (governance): cut or rewrite the tail of a party's audit log, past its anchors.

Each party's peers record the heads of its chain (``anchor``), so a rewrite of an
anchored line is caught with any one peer's log. The tail was the gap: a party's last
head went out best-effort as it stopped, and a peer that no longer read (finished, or
busy writing its results) never recorded it. The Host's operator then cuts its last
lines, writes a closed line after them, or rewrites what its last lines claim (their
times, which payload each ``hmac_sha256`` names), and ``privfl audit verify`` cannot
tell. The closing exchange (privfl/parties/audit.py) makes every party wait until its
peers recorded its last head and it theirs, so every line before the last heads is
anchored whatever the timing.

The timing that hid the heads is forced, not hoped for: the Host's close is held back
until both its peers are in theirs (threading events). Defended arm: the closing
exchange; every line up to the last heads is anchored and both tamperings are flagged.
Leaky arm: the heads as they went before, sent as each party stops and never waited
for; the peers stop reading first, the Host's tail is anchored nowhere and either
tampering leaves the verification exactly as it was for the untouched logs.
The three parties run in threads over the in-memory hub (512-bit test keys; link keys
derived per pair, as the CURVE keys would give them); tests/attacks/test_audit_chain.py
checks the same on real processes.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import threading
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import pytest
from helpers import failures, memory_job, run_in_threads

import privfl.parties.audit as audit_module
import privfl.parties.session as session_module
from privfl.parties.audit import FILE_NAME, GENESIS, AuditLog, line_hash
from privfl.protocol.memory import InMemoryHub
from privfl.tools.audit.verify import verify

PEERS = ("guest-1", "server")  # the Host's peers; the Host closes last
WAIT = 120.0  # seconds an event may take on a loaded machine before the test fails

Tamper = Callable[[list[str]], list[str]]
Record = dict[str, Any]


def pair_keys(ring: tuple[str, Collection[str]], session: str) -> dict[str, bytes]:
    """A link key per peer that both ends of a pair derive alike (the CURVE keys' role)."""
    name, peers = ring
    return {
        p: hashlib.sha256(f"{min(name, p)}|{max(name, p)}|{session}".encode()).digest()
        for p in peers
    }


def held_exchange() -> Callable[[AuditLog], list[str]]:
    """The closing exchange, with the Host's held back until both peers are in theirs."""
    settle = AuditLog.settle
    entered = {peer: threading.Event() for peer in PEERS}

    def held(self: AuditLog) -> list[str]:
        if self.party == "host":
            assert all(e.wait(WAIT) for e in entered.values())
        else:
            entered[self.party].set()
        return settle(self)

    return held


def best_effort_heads() -> Callable[[AuditLog], list[str]]:
    """The heads as they went before: sent as each party stops, never waited for. The
    peers send theirs and stop reading; the Host sends its own while their inboxes are
    still open; then everyone closes, nobody reading what came last."""
    stopped = {peer: threading.Event() for peer in PEERS}
    host_sent = threading.Event()

    def heads(self: AuditLog) -> list[str]:
        if self.party == "host":
            assert all(e.wait(WAIT) for e in stopped.values())
        for peer in sorted(self._sent):
            self._send_head(peer)
        if self.party == "host":
            host_sent.set()
        else:
            stopped[self.party].set()
            assert host_sent.wait(WAIT)
        return []

    return heads


def session(tmp: Path, settle: Callable[[AuditLog], list[str]]) -> Path:
    """One training session (one epoch) of Server, Host and guest-1 in threads."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(session_module, "keyring", lambda job, name, peers: (name, peers))
        patch.setattr(audit_module, "link_keys", pair_keys)
        patch.setattr(AuditLog, "settle", settle)
        results = run_in_threads(memory_job(epochs=1), InMemoryHub(), tmp)
    assert not failures(results), failures(results)
    return tmp


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {
        "settled": session(tmp_path_factory.mktemp("settled"), held_exchange()),
        "leaky": session(tmp_path_factory.mktemp("leaky"), best_effort_heads()),
    }


def records(log: Path) -> list[Record]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def anchored(run: Path, party: str) -> int:
    """How many of ``party``'s first lines a head its peers recorded vouches for."""
    heads = [
        int(r["anchor"]["seq"])
        for log in run.glob(f"*/{FILE_NAME}")
        for r in records(log)
        if r["direction"] == "received" and r["peer"] == party and "anchor" in r
    ]
    return max(heads, default=0)


def tail(run: Path, party: str) -> list[Record]:
    """``party``'s lines that no head its peers recorded covers (its closed line last)."""
    return records(run / party / FILE_NAME)[anchored(run, party) :]


def is_last_head(record: Record) -> bool:
    return bool(record.get("anchor", {}).get("stage") == 2)


def is_protocol(record: Record) -> bool:
    """A message of the protocol (not an audit head or a progress tick)."""
    return record["direction"] in ("sent", "received") and record["kind"] not in (
        "audit_head",
        "progress",
    )


def rechain(changed: list[Record], kept: list[str]) -> list[str]:
    """``kept`` and then ``changed``, each with its seq and prev redone."""
    out, prev = list(kept), line_hash(kept[-1]) if kept else GENESIS
    for record in changed:
        out.append(json.dumps(record | {"seq": len(out), "prev": prev}))
        prev = line_hash(out[-1])
    return out


def cut_and_reclose(lines: list[str]) -> list[str]:
    """Drop the last 3 lines and write a closed line after what is left, chained."""
    return rechain([json.loads(lines[-1])], lines[:-3])


def rewrite_last_messages(lines: list[str]) -> list[str]:
    """From the last protocol message on, rewrite what each line claims: its time and,
    for a message, which payload it names (any 64 hex digits)."""
    start = max(i for i, line in enumerate(lines) if is_protocol(json.loads(line)))
    changed = []
    for line in lines[start:]:
        record = json.loads(line) | {"time": "2026-01-01T00:00:00.000000+00:00"}
        if "hmac_sha256" in record:
            record["hmac_sha256"] = line_hash(line)
        changed.append(record)
    return rechain(changed, lines[:start])


def beyond_the_heads(findings: list[str]) -> list[str]:
    """The findings of the chain, the cross-check and the anchors: all but the ones that
    say a peer recorded no last head (those the untouched leaky logs have too)."""
    return [f for f in findings if "recorded no last head of" not in f]


def test_every_line_up_to_the_last_heads_is_anchored_in_a_peers_log(
    sessions: dict[str, Path],
) -> None:
    run = sessions["settled"]

    report = verify([run])

    assert report.ok and not report.notes, (report.findings, report.notes)
    for party in ("host", *PEERS):
        *rest, closed = tail(run, party)
        assert closed["direction"] == "closed", (party, closed)
        assert rest and all(is_last_head(r) for r in rest), (party, rest)


def test_leaky_arm_best_effort_heads_leave_the_tail_anchored_nowhere(
    sessions: dict[str, Path],
) -> None:
    run = sessions["leaky"]

    unanchored = [r for r in tail(run, "host") if is_protocol(r)]
    report = verify([run])

    # the whole training is past the anchors, and the verifier will not vouch for it
    assert len(unanchored) > 5, unanchored
    assert not beyond_the_heads(report.findings), report.findings
    assert any(f.startswith(str(run / "host" / FILE_NAME)) for f in report.findings)


@pytest.mark.parametrize(
    "tamper", [cut_and_reclose, rewrite_last_messages], ids=["cut", "rewritten"]
)
@pytest.mark.parametrize("arm", ["settled", "leaky"])
def test_a_tampered_tail_is_flagged_only_with_the_closing_exchange(
    sessions: dict[str, Path], tmp_path: Path, tamper: Tamper, arm: str
) -> None:
    # Prepare: the Host's operator tampers with the end of its log
    run = tmp_path / arm
    shutil.copytree(sessions[arm], run)
    log = run / "host" / FILE_NAME
    log.write_text("".join(line + "\n" for line in tamper(log.read_text().splitlines())))

    # Act
    untouched, tampered = verify([sessions[arm]]), verify([run])

    # Assert: with the exchange, the peers' logs contradict the tampered tail; without
    # it, neither the chain, the cross-check nor the anchors see anything
    assert not beyond_the_heads(untouched.findings), untouched.findings
    flagged = beyond_the_heads(tampered.findings)
    if arm == "settled":
        assert untouched.ok and flagged, tampered.findings
        assert all(f.startswith(str(log)) or " host, " in f for f in flagged), flagged
    else:
        assert not flagged, flagged
