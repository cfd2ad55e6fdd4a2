"""Attack (audit, low): reverse an audit-log digest of a low-entropy payload by dictionary.

A ``boost_split`` tells the winning guest only ``(tree, node, feature, bin)``: a few
small integers, so a few hundred thousand candidates cover every split of a run.
Whoever reads a party's ``audit.jsonl`` (a log collector, a backup, another local
user) and knows the message format encodes each candidate and hashes it: with the
plain sha256 the log used to hold, the matching digest names the split — which
column and bin of the guest's won at that node. The log now holds HMAC-SHA256 under
a per-session key from the OS CSPRNG that only the party keeps (audit-keys.jsonl,
0600), so the same dictionary matches nothing; the owner can still verify.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from privfl.parties import audit
from privfl.parties.audit import FILE_NAME, AuditLog, verify
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
    log = AuditLog(tmp_path / FILE_NAME)
    frames = frames_of(SECRET)
    log("sent", "guest-1", codec.decode_header(frames[0]), frames)
    (record,) = [json.loads(line) for line in (tmp_path / FILE_NAME).read_text().splitlines()]

    # Act: the reader has the log line only.
    hits = dictionary_attack(record["hmac_sha256"])

    # Assert
    if keyed:
        assert hits == []
        assert verify(tmp_path, record, frames[-1])  # the owner still can
        assert (tmp_path / audit.KEYS_FILE).stat().st_mode & 0o777 == 0o600
    else:
        assert hits == [SECRET]
