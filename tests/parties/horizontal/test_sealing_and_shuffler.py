"""Sealed reports only the aggregator opens; the Shuffler's window, padding and permutation."""

from __future__ import annotations

import secrets
from collections import Counter

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from privfl.crypto.sealing import new_report_key, open_sealed, seal, sealed_size
from privfl.parties.horizontal.shuffler import Window, pad_and_permute
from privfl.protocol.hfl_messages import ShuffleWindow

SESSION = "s" * 32


def test_only_the_aggregator_key_opens_a_report() -> None:
    private, public = new_report_key()
    token = secrets.token_bytes(32)
    report = np.arange(50, dtype=np.float32) / 7
    blob = seal(report, token, public, SESSION, 3)
    assert len(blob) == sealed_size(50)
    opened = open_sealed(blob, private, token, SESSION, 3, 50)
    assert opened is not None and np.array_equal(opened, report)
    # The Shuffler has the public key, the token-less blob and its own keys: nothing opens it.
    assert open_sealed(blob, X25519PrivateKey.generate(), token, SESSION, 3, 50) is None
    # The plaintext (token or weights) never appears in the ciphertext.
    assert token not in blob and report.tobytes()[:16] not in blob


def test_reports_bind_round_session_and_token_and_detect_tampering() -> None:
    private, public = new_report_key()
    token = secrets.token_bytes(32)
    blob = seal(np.ones(4, np.float32), token, public, SESSION, 1)
    assert open_sealed(blob, private, token, SESSION, 2, 4) is None  # replayed into another round
    assert open_sealed(blob, private, token, "x" * 32, 1, 4) is None
    assert open_sealed(blob, private, secrets.token_bytes(32), SESSION, 1, 4) is None
    tampered = blob[:-1] + bytes([blob[-1] ^ 1])
    assert open_sealed(tampered, private, token, SESSION, 1, 4) is None
    assert open_sealed(blob[:-4], private, token, SESSION, 1, 4) is None


def test_sealing_is_randomized_and_size_uniform() -> None:
    _, public = new_report_key()
    token = secrets.token_bytes(32)
    a = seal(np.zeros(8, np.float32), token, public, SESSION, 1)
    b = seal(np.full(8, 1e9, np.float32), token, public, SESSION, 1)
    assert a != b and len(a) == len(b)


def test_window_extends_per_arrival_up_to_the_hard_deadline() -> None:
    window = Window(expected=10, beta=0.5, slot=0.1)
    assert window.deadline == pytest.approx(0.5) and window.hard == pytest.approx(1.0)
    window.add(b"x")
    assert window.deadline == pytest.approx(0.6)
    for _ in range(8):
        window.add(b"x")
    assert window.deadline == pytest.approx(1.0)  # capped at n·t_i
    assert not window.closed(0.9) and window.closed(1.0)
    window.add(b"x")
    assert window.closed(0.0)  # everyone expected arrived


def test_dummies_pad_to_the_minimum_and_are_dropped_by_the_aggregator() -> None:
    private, public = new_report_key()
    token = secrets.token_bytes(32)
    real = [seal(np.full(6, i, np.float32), token, public, SESSION, 4) for i in range(3)]
    spec = ShuffleWindow(4, 8, 5, 1.0, 0.1, np.full(6, 0.5, np.float32), public)
    batch, padded = pad_and_permute(real, spec, SESSION, secrets.SystemRandom())
    assert padded == 2 and len(batch) == 5
    assert len({len(b) for b in batch}) == 1  # dummies look like reports
    opened = [open_sealed(b, private, token, SESSION, 4, 6) for b in batch]
    valid = sorted(float(r[0]) for r in opened if r is not None)
    assert valid == [0.0, 1.0, 2.0]


def test_permutation_is_uniform() -> None:
    rng = secrets.SystemRandom()
    positions: Counter[int] = Counter()
    spec = ShuffleWindow(1, 4, 0, 1.0, 0.1, np.zeros(1, np.float32), new_report_key()[1])
    for _ in range(4000):
        batch, _ = pad_and_permute([b"a", b"b", b"c", b"d"], spec, SESSION, rng)
        positions[batch.index(b"a")] += 1
    # χ² with 3 degrees of freedom; 40.13 is the 1e-8 critical value, so a uniform
    # permutation fails once in a hundred million runs, while a fixed position
    # (χ² = 12,000) or one slot 30 % likelier than the others (χ² ≈ 120) is caught every time.
    chi2 = sum((count - 1000) ** 2 / 1000 for count in positions.values())
    assert chi2 < 40.13  # scipy.stats.chi2.isf(1e-8, 3)


def test_a_host_is_dropped_after_two_missed_deadlines_in_a_row() -> None:
    from privfl.parties.horizontal.aggregator import Roster

    roster = Roster(hosts={"a": {0}, "b": {1}})
    roster.missed({"a"}, {"a", "b"})
    assert roster.alive().keys() == {"a", "b"}  # one miss: left out of that round only
    roster.missed(set(), {"a", "b"})  # a made it this time: the count restarts
    roster.missed({"a"}, {"a", "b"})
    assert "a" in roster.alive()
    roster.missed({"a"}, {"a", "b"})
    assert roster.alive().keys() == {"b"} and roster.dropped == {"a"}


def test_the_round_digest_is_the_formula_of_protocol_md() -> None:
    # docs/protocol.md §6.7, written out again from the text: an outside host must match it
    import hashlib
    import struct

    from privfl.parties.horizontal.integrity import round_digest

    token, key = bytes(range(32)), bytes(range(32, 64))
    weights = np.array([0.5, -0.25, 0.0, 1.0], dtype=np.float32)
    indices = np.array([1, 3], dtype=np.int64)
    spec = hashlib.sha256(
        b"privfl hfl round v1"
        + struct.pack(">Q", len(SESSION))
        + SESSION.encode()
        + struct.pack(">Q", 7)
        + token
        + key
        + hashlib.sha256(weights.astype("<f4").tobytes()).digest()
        + hashlib.sha256(indices.astype("<i8").tobytes()).digest()
    ).digest()
    assert round_digest(SESSION, 7, token, key, weights, indices) == spec
    # every part counts: another round, token, key, model or index set changes it
    changed = [
        round_digest(SESSION, 8, token, key, weights, indices),
        round_digest(SESSION, 7, key, key, weights, indices),
        round_digest(SESSION, 7, token, token, weights, indices),
        round_digest(SESSION, 7, token, key, weights + np.float32(1e-3), indices),
        round_digest(SESSION, 7, token, key, weights, indices[:1]),
    ]
    assert spec not in changed and len(set(changed)) == len(changed)
