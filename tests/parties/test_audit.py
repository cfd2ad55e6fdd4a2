"""The audit log: every message sent and received, as JSON lines with keyed digests only."""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import zmq
from helpers import failures, memory_job, run_in_threads

from privfl.parties.audit import FILE_NAME, GENESIS, AuditLog, line_hash, verify
from privfl.parties.audit_links import link_digest, link_key
from privfl.protocol import codec
from privfl.protocol.channel import Channel
from privfl.protocol.memory import InMemoryHub
from privfl.protocol.messages import HEAD_LAST, PROTOCOL, VERSION, Abort, Header, Kind, Progress

FIELDS = {
    "time", "direction", "peer", "kind", "session", "round", "msg_id", "size", "key_id",
    "hmac_sha256", "link", "seq", "prev",
}  # fmt: skip


def lines(path: Path) -> list[dict[str, Any]]:
    """The message lines of a log (not its opened and closed lines)."""
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in records if r["direction"] not in ("opened", "closed")]


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
        # every message, audit heads too: the closing exchange waits for the last ones
        for name, want in ((sent.sender, out), (sent.receiver, into)):
            match = [
                r
                for r in audits[name]
                if r.items() >= want.items() and verify(tmp_path / name, r, sent.frames[-1])
            ]
            assert len(match) == 1, (name, want)
            assert match[0]["kind"] == str(header.kind) and match[0]["round"] == header.round
    heads = [r for a in audits.values() for r in a if r["kind"] == "audit_head"]
    assert sum(len(a) for a in audits.values()) == 2 * len(hub.sent)
    assert heads and all(set(r["anchor"]) <= {"seq", "head", "stage"} for r in heads)
    # each party ends with a done and a last head to each peer it wrote to, both recorded
    stages = Counter((r["direction"], r["anchor"].get("stage", 0)) for r in heads)
    pairs = len(job.parties) * (len(job.parties) - 1)
    assert stages[("sent", 1)] == stages[("received", 1)] == pairs
    assert stages[("sent", 2)] == stages[("received", 2)] == pairs
    for name, records in audits.items():
        assert all(set(r) - {"anchor"} == FIELDS for r in records), name
        text = (tmp_path / name / FILE_NAME).read_text()
        # No payload: the longest ciphertext on the wire would be hundreds of digits.
        assert max(len(word) for word in text.replace('"', " ").split()) < 80


def test_refused_messages_are_audited_too(tmp_path: Path) -> None:
    audit = AuditLog(tmp_path / FILE_NAME, party="alice", session="s", job="j")
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


def test_each_line_chains_to_the_one_before_across_sessions(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    header = Header(PROTOCOL, VERSION, "s", "bob", "alice", 0, 1, Kind.ABORT)
    frames = codec.encode(header, Abort(reason="x"))

    for session in ("s", "s2"):  # a resumed run appends a second session to the same file
        with AuditLog(path, party="alice", session=session, job="j", links={"bob": b"k"}) as log:
            log("received", "bob", header, frames)

    text = path.read_text().splitlines()
    records = [json.loads(line) for line in text]
    assert [r["direction"] for r in records] == ["opened", "received", "closed"] * 2
    assert [r["seq"] for r in records] == list(range(6))
    assert records[0]["prev"] == GENESIS
    for before, record in zip(text, records[1:], strict=False):
        assert record["prev"] == line_hash(before)
    assert records[3] == records[3] | {"party": "alice", "session": "s2", "job": "j"}
    assert records[5]["outcome"] == "ok"
    assert records[1]["link"] == link_digest(b"k", frames)


def test_both_ends_of_a_link_derive_the_same_key_and_no_one_else() -> None:
    alice, bob, eve = (zmq.curve_keypair() for _ in range(3))

    ours = link_key(alice[1], bob[0], "s")

    assert ours == link_key(bob[1], alice[0], "s")
    assert ours != link_key(eve[1], bob[0], "s") and ours != link_key(alice[1], bob[0], "s2")


def test_a_line_cut_by_a_crash_stays_apart_and_the_chain_goes_on(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    AuditLog(path, party="alice", session="s", job="j").close("error")
    path.write_text(path.read_text()[:-20])  # killed while writing its closed line

    AuditLog(path, party="alice", session="s", job="j").close("ok")

    text = path.read_text().splitlines()
    assert len(text) == 4 and json.loads(text[2])["seq"] == 2
    assert json.loads(text[2])["prev"] == line_hash(text[1])


def pair(tmp_path: Path, hub: InMemoryHub, name: str) -> tuple[AuditLog, Channel]:
    """``name``'s audit log and channel on ``hub``, the log attached as the channel's."""
    audit = AuditLog(tmp_path / name / FILE_NAME, party=name, session="s", job="j")
    channel = Channel(hub.transport(name), session="s", timeout=30.0, observer=audit)
    audit.attach(channel)
    return audit, channel


def test_the_closing_exchange_waits_for_the_peer_and_ends_when_it_stops(tmp_path: Path) -> None:
    # Prepare: alice and bob each write to the other (a first head each goes along)
    hub = InMemoryHub()
    (alice, to_bob), (bob, to_alice) = pair(tmp_path, hub, "alice"), pair(tmp_path, hub, "bob")
    to_bob.send("bob", Progress("training", 1, 2))
    to_alice.send("alice", Progress("training", 1, 2))
    missing: dict[str, list[str]] = {}
    alice_waits = threading.Thread(target=lambda: missing.update(alice=alice.settle()))

    # Act: alice closes first and must wait for bob; then bob closes, and later a peer
    # that stopped (its Abort) ends alice's wait without its heads
    alice_waits.start()
    alice_waits.join(0.3)
    waited = alice_waits.is_alive()
    missing["bob"] = bob.settle()
    alice_waits.join(30)
    _, to_carol = pair(tmp_path, hub, "carol")
    to_carol.send("alice", Progress("training", 1, 2))  # a head of carol's goes along
    to_carol.abort(["alice"], RuntimeError("stopped"))
    alone = alice.settle()

    # Assert
    assert waited and missing == {"alice": [], "bob": []}
    for name, peer in (("alice", "bob"), ("bob", "alice")):
        records = lines(tmp_path / name / FILE_NAME)
        got = [r["anchor"] for r in records if r["peer"] == peer and "anchor" in r]
        assert got[-1]["stage"] == HEAD_LAST, (name, got)
    assert alone == ["carol"]
