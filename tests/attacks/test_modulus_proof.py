"""Attack: a guest whose candidate key is not a Paillier modulus reads which candidate won.

Uniform ``r^n`` re-randomisation hides an obfuscator from the key's holder only if
``x ↦ x^n`` permutes Z_n*, that is ``gcd(n, φ(n)) = 1``. A guest (hidden instance
space) makes ``n = p·q`` with ``p | q − 1`` and gives candidate ``k`` the obfuscator
``ρ_k`` of order ``p`` (1 mod p², ``y^(k+1)`` mod q²): it decrypts as an honest one, and
``χ(x) = x^((q−1)/p) mod q`` kills every ``r^n`` (``p | n``) but not ``ρ_k``. From each
``boost_reveal`` (the Host's ``oblivious.masked_request``: the chosen candidate masked and
re-randomised, or a fresh dummy) the guest strips the plaintext it decrypted and reads
``χ``: ``χ(ρ_k)`` names candidate k, 1 a dummy.

The same holds for the Server's key (GLMs) and the SecureBoost Host's: every receiver
refuses a crafted one before it encrypts anything under it.

Defended: the key's ``proof`` (crypto/modulus_proof.py) cannot verify for such an n, and
the Host refuses the key in ``check_candidates`` with one line, before it looks at any
ciphertext under it. Leaky arm: the check skipped, as before protocol 6's proof.
"""

from __future__ import annotations

import secrets
from dataclasses import replace
from pathlib import Path

import pytest
from crafted_keys import best_effort_roots, crafted_modulus
from helpers import PartyHung, failures, memory_job, party_data, run_in_threads

from privfl.config.vertical import ModelConfig
from privfl.crypto.paillier import PrivateKey, PublicKey
from privfl.errors import ProtocolError
from privfl.learning import secureboost as sb
from privfl.parties.vertical import keyproof
from privfl.parties.vertical import server as server_mod
from privfl.parties.vertical.secureboost import host as boost_host_mod
from privfl.parties.vertical.secureboost import oblivious, reveal
from privfl.protocol.bigints import BigInts
from privfl.protocol.boost_messages import BoostCandidates
from privfl.protocol.memory import InMemoryHub

BITS = 512  # the tests' key size (allow_weak_keys)
GUEST = "guest-1"


def crafted_key() -> tuple[PrivateKey, int, int, int]:
    """The guest's key pair over a crafted n, ``p``, ``q``, and ``y`` of order p mod q²."""
    n, p, q = crafted_modulus(BITS)
    while True:
        y = pow(secrets.randbelow(q * q - 3) + 2, q * (q - 1) // p, q * q)
        if y != 1:
            break
    return PrivateKey(PublicKey.from_n(n), p, q), p, q, y


def crt(a: int, m1: int, b: int, m2: int) -> int:
    return (a * m2 * pow(m2, -1, m1) + b * m1 * pow(m1, -1, m2)) % (m1 * m2)


def guest_sends(job_session: str) -> tuple[BoostCandidates, PrivateKey, dict[int, int], int, int]:
    """The crafted guest's boost_candidates (its best proof with it), its key, its table
    ``χ(ρ_k) → k``, and ``p, q``."""
    private, p, q, y = crafted_key()
    public = private.public_key
    data = party_data(memory_job(1))[GUEST]
    rows, bins = 40, 8
    binned = sb.bin_columns(data.x_train[:rows], sb.quantile_edges(data.x_train[:rows], bins))
    plain = oblivious.pack(oblivious.candidate_sets(binned, bins), BITS)
    count = oblivious.shape(rows, BITS)[1]
    n2 = public.nsquare
    marks = [crt(1, p * p, pow(y, k + 1, q * q), q * q) for k in range(len(plain) // count)]
    values = [
        c * marks[i // count] % n2 for i, c in enumerate(public.encrypt(plain))
    ]  # each candidate's ciphertexts carry its mark beside an honest r^n
    proof = best_effort_roots(public.n, p, q, job_session, keyproof.role(reveal.KIND, GUEST))
    body = BoostCandidates(
        public.n, 0, "train", rows, len(marks), BigInts(tuple(values)), BigInts(proof)
    )
    table = {pow(m % q, (q - 1) // p, q): k for k, m in enumerate(marks)}
    return body, private, table, p, q


def guest_reads(private: PrivateKey, c: int, table: dict[int, int], p: int, q: int) -> int | None:
    """Strip the decrypted plaintext and read χ: a candidate, None (dummy) or -1 (nothing)."""
    n = private.public_key.n
    (m,) = private.decrypt([c])
    part = c * (1 - n * m) % (n * n)  # (1 + n)^−m: what is left is the obfuscator
    chi = pow(part % q, (q - 1) // p, q)
    return None if chi == 1 else table.get(chi, -1)


@pytest.mark.parametrize("defended", [True, False])
def test_a_guest_with_a_crafted_modulus_cannot_read_the_hosts_picks(
    monkeypatch: pytest.MonkeyPatch, defended: bool
) -> None:
    # Prepare: the job, the crafted guest's candidates; spy on any use of its ciphertexts.
    job = replace(memory_job(1), key_bits=BITS, model=ModelConfig(kind="secureboost", bins=8))
    body, private, table, p, q = guest_sends(job.session)
    if not defended:
        monkeypatch.setattr(keyproof, "check_key", lambda *a, **k: None)
    used = []
    check = PublicKey.check_ciphertexts
    monkeypatch.setattr(
        PublicKey, "check_ciphertexts", lambda self, c: (used.append(len(c)), check(self, c))[1]
    )
    columns = body.candidates // 7

    if defended:
        # Act / Assert: refused with one line naming the guest, before any ciphertext.
        with pytest.raises(ProtocolError) as refused:
            reveal.check_candidates(job, GUEST, body, "train", body.rows, columns)
        line = str(refused.value)
        print(f"\n{line}")
        assert "\n" not in line and line.startswith(f"{GUEST}'s Paillier key is refused")
        assert "does not verify" in line and "protocol 6" in line
        assert used == []
        return

    # Act: the Host's requests, winners and dummies; the guest's read of each.
    held = reveal.check_candidates(job, GUEST, body, "train", body.rows, columns)
    picks = [None if j % 4 == 0 else secrets.randbelow(body.candidates) for j in range(20)]
    reads = []
    for node, pick in enumerate(picks):
        request, _ = held.request(0, node, pick)
        reads.append(guest_reads(private, request.values.values[0], table, p, q))

    # Assert: leaky, every request named (the measured rate is printed).
    named = sum(r == x for r, x in zip(reads, picks, strict=True))
    print(f"\nthe crafted guest named {named} of {len(picks)} requests")
    assert named >= 0.9 * len(picks)
    assert reads == picks


KEY_HOLDERS = {  # model kind: the module that makes the key, its party, who receives it
    "logistic": (server_mod, "server", ("host", "guest-1")),
    "secureboost": (boost_host_mod, "host", ("guest-1",)),
}


@pytest.mark.parametrize("kind", list(KEY_HOLDERS))
def test_every_receiver_refuses_a_key_that_is_not_a_paillier_modulus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    # Prepare: the key holder's pair is crafted (p | q − 1); it sends its best proof.
    module, holder, receivers = KEY_HOLDERS[kind]
    job = replace(memory_job(1, epochs=1, timeout=30.0), model=ModelConfig(kind=kind, trees=1))
    n, p, q = crafted_modulus(BITS)
    crafted = PrivateKey(PublicKey.from_n(n), p, q)
    monkeypatch.setattr(module, "generate_keypair", lambda *a: (crafted.public_key, crafted))

    def best(private: PrivateKey, *, session: str, kind: str, sender: str) -> BigInts:
        return BigInts(best_effort_roots(n, p, q, session, keyproof.role(kind, sender)))

    monkeypatch.setattr(module, "prove_key", best)

    # Act
    results = run_in_threads(job, InMemoryHub(), tmp_path)

    # Assert: the key is refused with the one line, and nobody hangs; a receiver that a
    # peer's Abort stops first carries that refusal in its own error.
    errors = failures(results)
    assert not any(isinstance(e, PartyHung) for e in errors.values())
    refused = f"{holder}'s Paillier key is refused"
    assert any(
        isinstance(errors[r], ProtocolError) and str(errors[r]).startswith(refused)
        for r in receivers
    )
    for party in receivers:
        line = str(errors[party])
        assert refused in line and "does not verify" in line and "\n" not in line, line
