"""Attack (audit, low): reverse an audit-log digest of a low-entropy payload by dictionary.

A ``boost_split`` tells the winning guest only ``(tree, node, feature, bin)``: a few
small integers, so a few hundred thousand candidates cover every split of a run.
Whoever reads a party's ``audit.jsonl`` (a log collector, a backup, another local
user) and knows the message format encodes each candidate and hashes it: with the
plain sha256 the log used to hold, the matching digest names the split — which
column and bin of the guest's won at that node. The log now holds HMAC-SHA256 under
a per-session key from the OS CSPRNG that only the party keeps (audit-keys.jsonl,
0600), so the same dictionary matches nothing; the owner can still verify. The
``link`` digest that sender and receiver both record (for ``privfl audit verify``) is
keyed by their CURVE keys' X25519 secret: the same reader, holding the job and the
log, derives nothing that matches it, while the peer computes the same value.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path

import pytest
import zmq

from privfl.parties import audit
from privfl.parties.audit import FILE_NAME, AuditLog, verify
from privfl.parties.audit_links import link_digest, link_key
from privfl.protocol import codec
from privfl.protocol.boost_messages import BoostSplit
from privfl.protocol.messages import PROTOCOL, VERSION, Header, Kind

SECRET = BoostSplit(tree=2, node=5, feature=17, bin=23)
TREES, NODES, FEATURES, BINS = 4, 16, 30, 32  # the attacker's candidate space


def frames_of(split: BoostSplit) -> list[bytes]:
    header = Header(PROTOCOL, VERSION, "s", "host", "guest-1", split.tree, 7, Kind.BOOST_SPLIT)
    return codec.encode(header, split)


def dictionary_attack(digest: str) -> list[BoostSplit]:
    """Every candidate split whose encoded payload hashes (plain sha256) to ``digest``."""
    hits = []
    for tree in range(TREES):
        for node in range(NODES):
            for feature in range(FEATURES):
                for b in range(BINS):
                    guess = BoostSplit(tree, node, feature, b)
                    payload = frames_of(guess)[-1]
                    if hashlib.sha256(payload).hexdigest() == digest:
                        hits.append(guess)
    return hits


def sent_records(path: Path) -> list[dict[str, object]]:
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in records if r["direction"] == "sent"]


def plain_sha256(key: bytes, payload: bytes) -> str:
    """The leaky construction: an unkeyed hash, as the log held before."""
    return hashlib.sha256(payload).hexdigest()


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "leaky"])
def test_a_log_reader_cannot_reverse_a_split_digest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keyed: bool
) -> None:
    # Prepare: the Host's audit log records the split it sent.
    if not keyed:
        monkeypatch.setattr(audit, "digest", plain_sha256)
    log = AuditLog(tmp_path / FILE_NAME, party="host", session="s", job="j")
    frames = frames_of(SECRET)
    log("sent", "guest-1", codec.decode_header(frames[0]), frames)
    (record,) = sent_records(tmp_path / FILE_NAME)

    # Act: the reader has the log line only.
    hits = dictionary_attack(record["hmac_sha256"])

    # Assert
    if keyed:
        assert hits == []
        assert verify(tmp_path, record, frames[-1])  # the owner still can
        assert (tmp_path / audit.KEYS_FILE).stat().st_mode & 0o777 == 0o600
    else:
        assert hits == [SECRET]


def public_link_key(session: str) -> bytes:
    """The leaky link key: one anybody holding the job (and so the session id) can derive."""
    return hmac.new(b"", session.encode(), hashlib.sha256).digest()


def link_dictionary_attack(link: str, key: bytes) -> list[BoostSplit]:
    """Every candidate split whose whole message gives ``link`` under ``key``."""
    return [
        BoostSplit(tree, node, feature, b)
        for tree in range(TREES)
        for node in range(NODES)
        for feature in range(FEATURES)
        for b in range(BINS)
        if link_digest(key, frames_of(BoostSplit(tree, node, feature, b))) == link
    ]


@pytest.mark.parametrize("keyed", [True, False], ids=["dh-keyed", "leaky"])
def test_a_log_reader_cannot_reverse_a_link_digest(tmp_path: Path, keyed: bool) -> None:
    # Prepare: the link key is the Host's and guest's X25519 secret, or (leaky) public.
    host, guest = zmq.curve_keypair(), zmq.curve_keypair()
    key = link_key(host[1], guest[0], "s") if keyed else public_link_key("s")
    log = AuditLog(tmp_path / FILE_NAME, party="host", session="s", job="j", links={"guest-1": key})
    frames = frames_of(SECRET)
    log("sent", "guest-1", codec.decode_header(frames[0]), frames)
    (record,) = sent_records(tmp_path / FILE_NAME)

    # Act: the reader holds the log and the job, not a secret key; it tries what it can derive.
    hits = link_dictionary_attack(str(record["link"]), public_link_key("s"))

    # Assert: the guest, from its own secret and the Host's public key, gets the same link.
    if keyed:
        assert hits == []
        assert link_digest(link_key(guest[1], host[0], "s"), frames) == record["link"]
    else:
        assert hits == [SECRET]
