"""A non-interactive proof that a modulus N is a Paillier modulus: gcd(N, φ(N)) = 1.

Goldberg, Reyzin, Sagga and Baldimtsi, "Efficient noninteractive certification of RSA
moduli and beyond" (ASIACRYPT 2019), the Paillier-N protocol. The prover, who knows the
primes, gives the N-th roots ``σ_i = ρ_i^(N⁻¹ mod φ(N)) mod N`` of ``ROOTS`` points
``ρ_i`` that a hash derives from N, the session and the key's role; the verifier checks
``σ_i^N ≡ ρ_i (mod N)`` and that N has no prime factor below ``ALPHA``.

Why this is sound: if a prime ``r`` divides both N and φ(N), then ``x ↦ x^N`` on Z_N* has
a kernel of order at least ``r`` and its image, the N-th residues, is at most a
``1/r`` share of Z_N*. Having checked that every prime factor of N is at least
``ALPHA``, a hash point is an N-th residue with probability at most ``1/ALPHA``, and all
``ROOTS`` of them with at most ``ALPHA^-ROOTS < 2^-128`` (65537^-8). Why the key's
users need it: uniform ``r^N`` re-randomisation hides an obfuscator only when ``x ↦ x^N``
permutes Z_N* (docs/security.md, "A modulus that is not a Paillier modulus").
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Sequence

from privfl.crypto.gmp import mpz, powmod
from privfl.errors import CryptoError

ALPHA = 65537
"""N may have no prime factor below this (a prime: 2^16 + 1)."""
ROOTS = 8
"""Points proven: ALPHA^-ROOTS < 2^-128, the soundness error."""
PRIME_TEST_ROUNDS = 25
"""Miller-Rabin rounds that refuse a prime N (an honest composite N is taken for a prime
with chance ≤ 4^-25)."""
_DOMAIN = b"privfl/paillier-n/v1"


@functools.cache
def _small_primes_product() -> int:
    """The product of every prime below ALPHA (about 94,000 bits), for one gcd with N."""
    sieve = bytearray([1]) * ALPHA
    sieve[0:2] = b"\x00\x00"
    for i in range(2, math.isqrt(ALPHA) + 1):
        if sieve[i]:
            sieve[i * i :: i] = bytes(len(range(i * i, ALPHA, i)))
    return math.prod(i for i in range(ALPHA) if sieve[i])


def _field(data: bytes) -> bytes:
    return len(data).to_bytes(8, "big") + data


def points(n: int, session: str, role: str) -> list[int]:
    """The ``ROOTS`` points of Z_N the proof is about, from SHAKE-256 bound to N, session, role.

    Each takes 128 bits beyond N's length and is reduced mod N (statistically uniform).
    """
    width = (n.bit_length() + 7) // 8
    prefix = _field(_DOMAIN) + _field(n.to_bytes(width, "big"))
    prefix += _field(session.encode()) + _field(role.encode())
    out = []
    for i in range(ROOTS):
        digest = hashlib.shake_256(prefix + i.to_bytes(4, "big")).digest(width + 16)
        out.append(int.from_bytes(digest, "big") % n)
    return out


def prove(n: int, p: int, q: int, *, session: str, role: str) -> tuple[int, ...]:
    """The N-th roots of :func:`points`, computed modulo ``p`` and ``q`` apart (CRT)."""
    if p * q != n or p == q:
        raise CryptoError("the primes do not make the modulus; the key pair is corrupt")
    try:
        # x ↦ x^N permutes Z_prime* when gcd(N, prime − 1) = 1; its inverse is this power.
        parts = [(prime, pow(n, -1, prime - 1)) for prime in (p, q)]
    except ValueError as exc:
        raise CryptoError("gcd(N, φ(N)) ≠ 1: not a Paillier modulus, nothing to prove") from exc
    q_inv = pow(q, -1, p)
    roots = []
    for rho in points(n, session, role):
        sp = int(powmod(mpz(rho % p), parts[0][1], p))
        sq = int(powmod(mpz(rho % q), parts[1][1], q))
        roots.append(sq + q * ((sp - sq) * q_inv % p))
    return tuple(roots)


def verify(n: int, roots: Sequence[int], *, session: str, role: str) -> None:
    """Raise CryptoError unless ``roots`` prove gcd(N, φ(N)) = 1 for this session and role."""
    if n < ALPHA or n % 2 == 0:
        raise CryptoError("the modulus is even or too small to be a Paillier modulus")
    if math.gcd(n, _small_primes_product()) != 1:
        raise CryptoError(f"the modulus has a prime factor below {ALPHA}")
    from gmpy2 import is_prime

    if is_prime(n, PRIME_TEST_ROUNDS):  # gcd(N, N − 1) = 1, but anyone decrypts
        raise CryptoError("the modulus is prime: anyone could decrypt under it")
    if len(roots) != ROOTS:
        raise CryptoError(f"the modulus proof has {len(roots)} roots, not {ROOTS}")
    big = mpz(n)
    for rho, sigma in zip(points(n, session, role), roots, strict=True):
        if math.gcd(rho, n) != 1 or not 0 < sigma < n:
            raise CryptoError("the modulus proof has a root outside Z_N*")
        if int(powmod(mpz(sigma), big, big)) != rho:
            raise CryptoError("the modulus proof does not verify: an N-th root is wrong")
