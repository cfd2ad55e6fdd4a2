"""The Paillier-N modulus proof: an honest key's proof verifies, anything else fails."""

from __future__ import annotations

import secrets

import gmpy2
import pytest
from crafted_keys import best_effort_roots, crafted_modulus

from privfl.crypto import modulus_proof
from privfl.crypto.paillier import generate_keypair, private_primes
from privfl.errors import CryptoError


def _prime(bits: int) -> int:
    return int(gmpy2.next_prime(secrets.randbits(bits) | (1 << (bits - 1))))


@pytest.fixture(scope="module")
def key() -> tuple[int, int, int]:
    public, private = generate_keypair(512)
    p, q = private_primes(private)
    return public.n, p, q


def test_a_valid_proof_verifies(key: tuple[int, int, int]) -> None:
    n, p, q = key
    roots = modulus_proof.prove(n, p, q, session="s1", role="public_key/server")
    assert len(roots) == modulus_proof.ROOTS
    modulus_proof.verify(n, roots, session="s1", role="public_key/server")


def test_soundness_parameters() -> None:
    assert modulus_proof.ALPHA**modulus_proof.ROOTS > 2**128
    assert gmpy2.is_prime(modulus_proof.ALPHA)


def test_a_tampered_root_fails(key: tuple[int, int, int]) -> None:
    n, p, q = key
    roots = list(modulus_proof.prove(n, p, q, session="s1", role="r"))
    roots[3] = roots[3] * 2 % n
    with pytest.raises(CryptoError, match="does not verify"):
        modulus_proof.verify(n, roots, session="s1", role="r")


@pytest.mark.parametrize("session, role", [("s2", "r"), ("s1", "other")])
def test_a_proof_for_another_session_or_role_fails(
    key: tuple[int, int, int], session: str, role: str
) -> None:
    n, p, q = key
    roots = modulus_proof.prove(n, p, q, session="s1", role="r")
    with pytest.raises(CryptoError, match="does not verify"):
        modulus_proof.verify(n, roots, session=session, role=role)


def test_a_proof_for_another_modulus_fails(key: tuple[int, int, int]) -> None:
    n = key[0]
    public, private = generate_keypair(512)
    other = modulus_proof.prove(public.n, *private_primes(private), session="s1", role="r")
    with pytest.raises(CryptoError):
        modulus_proof.verify(n, [v % n for v in other], session="s1", role="r")


def test_the_wrong_number_of_roots_fails(key: tuple[int, int, int]) -> None:
    n, p, q = key
    roots = modulus_proof.prove(n, p, q, session="s1", role="r")
    with pytest.raises(CryptoError, match="roots, not"):
        modulus_proof.verify(n, roots[:-1], session="s1", role="r")
    with pytest.raises(CryptoError, match="roots, not"):
        modulus_proof.verify(n, (), session="s1", role="r")


def test_a_small_factor_fails_though_its_roots_are_right() -> None:
    # gcd(N, φ(N)) = 1 here, so the roots are genuine: only the small-prime check refuses.
    p, q = 65521, _prime(500)
    n = p * q
    assert gmpy2.gcd(n, (p - 1) * (q - 1)) == 1
    roots = modulus_proof.prove(n, p, q, session="s1", role="r")
    with pytest.raises(CryptoError, match="prime factor below 65537"):
        modulus_proof.verify(n, roots, session="s1", role="r")


def test_a_crafted_modulus_cannot_prove_itself() -> None:
    n, p, q = crafted_modulus(512)
    assert gmpy2.gcd(n, (p - 1) * (q - 1)) == p
    with pytest.raises(CryptoError, match="not a Paillier modulus"):
        modulus_proof.prove(n, p, q, session="s1", role="r")
    roots = best_effort_roots(n, p, q, "s1", "r")
    with pytest.raises(CryptoError, match="does not verify"):
        modulus_proof.verify(n, roots, session="s1", role="r")


def test_a_prime_modulus_fails_though_its_roots_are_right() -> None:
    # gcd(N, N − 1) = 1, so a prime N has genuine N-th roots; but anyone could decrypt.
    n = _prime(512)
    d = int(gmpy2.invert(n, n - 1))
    roots = [pow(rho, d, n) for rho in modulus_proof.points(n, "s1", "r")]
    with pytest.raises(CryptoError, match="modulus is prime"):
        modulus_proof.verify(n, roots, session="s1", role="r")
