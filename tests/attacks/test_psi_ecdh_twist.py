"""The ECDH PSI's one-bit-per-id leak: curve or twist, a property that survives ``[k]``.

The old construction hashed an id straight to an X25519 u-coordinate. About half of all
u lie on Curve25519, half on its twist; which one is public (a Legendre symbol) and
``[k]u`` stays on the same side. So a party seeing ``[a]H(x)`` learned one bit of H(x)
per id and could split a list of guesses in two. The PSI now runs in ristretto255, a
prime-order group in which every valid encoding is an element: there is no second
group for a value to fall into, and the bit the old attack read is unrelated between
``H(x)`` and ``[a]H(x)``.
"""

from __future__ import annotations

import hashlib

import gmpy2
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from psi_harness import job_of, run_stage, tables

from privfl.crypto import psi_ecdh as ecdh
from privfl.errors import ProtocolError
from privfl.protocol.memory import InMemoryHub

P = 2**255 - 19
A = 486662
IDS = [f"patient-{i:04d}" for i in range(1000)]


def on_twist(u: int) -> bool:
    """Whether the Montgomery u-coordinate lies on the twist: u³ + Au² + u is no square."""
    return gmpy2.legendre((u * u * u + A * u * u + u) % P, P) == -1


def old_hash_to_u(ids: list[str]) -> list[int]:
    """The previous ``H``: SHA-512 of the id, reduced mod 2^255 − 19."""
    return [
        int.from_bytes(hashlib.sha512(b"ctx\0" + i.encode()).digest(), "little") % P for i in ids
    ]


def old_multiply(key: X25519PrivateKey, points: list[int]) -> list[int]:
    return [
        int.from_bytes(
            key.exchange(X25519PublicKey.from_public_bytes(u.to_bytes(32, "little"))), "little"
        )
        for u in points
    ]


def test_the_old_mapping_leaked_the_twist_bit_through_the_exponentiation() -> None:
    """The attack works on the construction that was replaced (so the next test can fail)."""
    hashed = old_hash_to_u(IDS)
    sent = old_multiply(X25519PrivateKey.generate(), hashed)

    bits_before = [on_twist(u) for u in hashed]
    bits_after = [on_twist(u) for u in sent]

    assert bits_after == bits_before  # every id's bit readable from what was sent
    assert 0.4 < sum(bits_before) / len(IDS) < 0.6  # and it is a real bit: splits the ids


def test_every_id_hashes_into_the_group_and_every_value_passes_the_check() -> None:
    hashed = ecdh.hash_to_group(IDS, b"ctx")
    sent = ecdh.multiply(ecdh.new_secret(), hashed)

    assert all(ecdh.is_element(v) for v in hashed)
    assert all(ecdh.is_element(v) for v in sent)
    assert len(set(sent)) == len(IDS)


def test_the_old_bit_is_unrelated_between_an_id_and_what_is_sent() -> None:
    """Reading the same Legendre bit off ristretto255 encodings: agreement is chance.

    1,000 ids: the agreement rate of an unrelated bit is 0.5 ± 0.016 (1 sd); the bound
    0.42–0.58 is five standard deviations.
    """
    hashed = ecdh.hash_to_group(IDS, b"ctx")
    sent = ecdh.multiply(ecdh.new_secret(), hashed)

    agree = sum(on_twist(h) == on_twist(s) for h, s in zip(hashed, sent, strict=True))

    assert 0.42 < agree / len(IDS) < 0.58


def test_values_outside_the_group_are_refused_not_multiplied() -> None:
    """What a deviating peer might send instead: identity, non-canonical, off-group bytes."""
    secret = ecdh.new_secret()
    valid = ecdh.hash_to_group(["x"], b"ctx")[0]
    for value in (0, valid | (1 << 255), P + 1, 2**256 - 1, old_hash_to_u(["x"])[0]):
        if ecdh.is_element(value):  # a random u is a valid encoding with tiny probability
            continue
        try:
            ecdh.multiply(secret, [value])
        except ProtocolError:
            continue
        raise AssertionError(f"{value:#x} was multiplied")


def test_the_ristretto_psi_computes_the_exact_intersection() -> None:
    job = job_of(2, "ecdh")
    sites, shared = tables(2, seed=5)

    results = run_stage(job, sites, InMemoryHub())

    assert set(results["host"].ids) == shared
    assert results["guest-1"].ids == results["guest-2"].ids == results["host"].ids
