"""A modulus that is not a Paillier modulus (``p | q − 1``), and the best proof its holder has."""

from __future__ import annotations

import secrets

import gmpy2

from privfl.crypto import modulus_proof


def crafted_modulus(bits: int) -> tuple[int, int, int]:
    """``(n, p, q)``, ``n = p·q`` of at least ``bits`` bits with ``p | q − 1``: gcd(n, φ(n)) = p."""
    while True:
        p = int(gmpy2.next_prime(secrets.randbits(bits // 2 - 16) | (1 << (bits // 2 - 17))))
        k = secrets.randbits(32) | (1 << 31)
        q = 2 * p * k + 1
        if gmpy2.is_prime(q, 40) and (p * q).bit_length() >= bits:
            return p * q, p, q


def best_effort_roots(n: int, p: int, q: int, session: str, role: str) -> tuple[int, ...]:
    """What the holder of a crafted ``n`` can send: true n-th roots mod p, and mod q the
    inverse of ``x ↦ x^(n/p)`` on the subgroup it permutes (a point is an n-th residue
    mod q with probability 1/p only)."""
    d_p = pow(n, -1, p - 1)
    d_q = pow(n // p, -1, (q - 1) // p)
    out = []
    for rho in modulus_proof.points(n, session, role):
        sp, sq = pow(rho, d_p, p), pow(rho, d_q, q)
        out.append(sq + q * ((sp - sq) * pow(q, -1, p) % p))
    return tuple(out)
