"""RSA blind-signature PSI maths (no I/O): key checks, full-domain hash, blind, sign, unblind, tag.

The signer holds ``d``. The other side sends ``H(x)·r^e`` and gets back ``H(x)^d·r``,
then divides by ``r``. A tag is ``SHA-256(H(x)^d)``: only the signer can make tags for
ids of its choice, so its tags can be shown without letting the other side test
guessed ids offline.

The blinded values hide ``H(x)`` only if ``x ↦ x^e`` is a permutation of Z_N*: a
signer that picks ``p ≡ q ≡ 1 (mod e)`` can otherwise read a fingerprint of every
``H(x)`` through the blinding. So the public exponent is a **prime larger than N**:
then ``gcd(e, φ(N)) = 1`` for any N whatsoever (``φ(N) < N < e`` and e is prime), the
blinding factor ``r^e`` is uniform in Z_N* and so is ``H(x)·r^e``. The blinder checks
exactly that (:func:`check_public`), plus N's size, no small factors and
``gcd(H(x), N) = 1``. The price is the blinder's exponentiation by a ``bits(N)+1``-bit
e (about 2.5 ms per id at 2048 bits) instead of by 65537.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

import gmpy2
from cryptography.hazmat.primitives.asymmetric import rsa

from privfl.errors import ConfigError, ProtocolError

MIN_BITS = 1024  # the cryptography package refuses smaller RSA keys
EXPONENT_SLACK_BITS = 64  # the blinder accepts bits(N) < bits(e) <= bits(N) + this
SMALL_PRIMES = gmpy2.primorial(2**16)  # N must have no prime factor below 65,536
PRIME_TEST_ROUNDS = 32  # on top of GMP's Baillie-PSW test


@dataclass(frozen=True, slots=True)
class RsaPublic:
    """``(N, e)``: what the signer announces."""

    n: int
    e: int


@dataclass(frozen=True, slots=True)
class RsaSigner:
    """The RSA private key as CRT parts (signing is four times faster than with ``d``)."""

    public: RsaPublic
    p: int
    q: int
    dp: int
    dq: int
    q_inv: int

    def __repr__(self) -> str:
        return f"RsaSigner(n has {self.public.n.bit_length()} bits, secret parts hidden)"

    def sign(self, values: Sequence[int]) -> list[int]:
        """``v^d mod N`` for each value (via the CRT)."""
        out = []
        for v in values:
            if not 0 < v < self.public.n:
                raise ProtocolError("a blinded value lies outside Z_N")
            mp = gmpy2.powmod(v, self.dp, self.p)
            mq = gmpy2.powmod(v, self.dq, self.q)
            h = (self.q_inv * (mp - mq)) % self.p
            out.append(int(mq + h * self.q))
        return out


def generate(bits: int) -> RsaSigner:
    """A fresh key pair for one session (never written to disk), e a random prime > N.

    p and q come from the ``cryptography`` package; the exponent is then a random prime
    of exactly ``bits + 1`` bits, so ``e > 2^bits > N``, and ``d = e⁻¹`` mod p−1, q−1.
    """
    if bits < MIN_BITS:
        raise ConfigError(f"data.psi_key_bits must be at least {MIN_BITS}")
    num = rsa.generate_private_key(public_exponent=65537, key_size=bits).private_numbers()
    p, q, n = num.p, num.q, num.public_numbers.n
    e = int(gmpy2.next_prime(secrets.randbits(bits) | (1 << bits)))
    while e.bit_length() != bits + 1:  # next_prime ran past 2^(bits+1): draw again
        e = int(gmpy2.next_prime(secrets.randbits(bits) | (1 << bits)))
    return RsaSigner(
        public=RsaPublic(n=n, e=e),
        p=p,
        q=q,
        dp=int(gmpy2.invert(e, p - 1)),
        dq=int(gmpy2.invert(e, q - 1)),
        q_inv=int(gmpy2.invert(q, p)),
    )


def check_public(public: RsaPublic, bits: int) -> None:
    """Refuse a key whose map ``x ↦ x^e`` might not permute Z_N*, or of the wrong size."""
    n, e = public.n, public.e
    if n.bit_length() != bits or n % 2 == 0:
        raise ProtocolError(f"the PSI RSA modulus has {n.bit_length()} bits, the job {bits}")
    if gmpy2.gcd(n, SMALL_PRIMES) != 1:
        raise ProtocolError("the PSI RSA modulus has a small prime factor: not an RSA modulus")
    if not n < e < 1 << (bits + EXPONENT_SLACK_BITS):
        raise ProtocolError(
            f"the PSI RSA exponent must be a prime larger than N of at most "
            f"{bits + EXPONENT_SLACK_BITS} bits (got {e.bit_length()} bits)"
        )
    if not gmpy2.is_prime(e, PRIME_TEST_ROUNDS):
        raise ProtocolError("the PSI RSA exponent is not prime: x ↦ x^e may not be a permutation")


def full_domain_hash(ids: Sequence[str], n: int, context: bytes) -> list[int]:
    """``H(id)`` in Z_N: SHAKE-256 over the session context and the id, 128 bits extra."""
    length = (n.bit_length() + 128 + 7) // 8
    return [
        int.from_bytes(hashlib.shake_256(context + b"\0" + i.encode()).digest(length), "big") % n
        for i in ids
    ]


def blind(hashes: Sequence[int], public: RsaPublic) -> tuple[list[int], list[int]]:
    """``H·r^e mod N`` with a fresh unit ``r`` per value; returns (blinded, r).

    Call :func:`check_public` first: only then is each blinded value uniform in Z_N*.
    """
    n, e = public.n, public.e
    for h in hashes:
        if gmpy2.gcd(h, n) != 1:  # never for two large primes; a hit factors N
            raise ProtocolError("an id hash shares a factor with the PSI RSA modulus")
    factors = [_unit(n) for _ in hashes]
    blinded = [int(h * gmpy2.powmod(r, e, n) % n) for h, r in zip(hashes, factors, strict=True)]
    return blinded, factors


def unblind(signed: Sequence[int], factors: Sequence[int], public: RsaPublic) -> list[int]:
    """``s·r⁻¹ mod N``; a signature that does not verify simply matches no tag."""
    n = public.n
    if len(signed) != len(factors):
        raise ProtocolError(f"got {len(signed)} signatures for {len(factors)} blinded values")
    if any(not 0 < s < n for s in signed):
        raise ProtocolError("a PSI signature lies outside Z_N")
    return [int(s * gmpy2.invert(r, n) % n) for s, r in zip(signed, factors, strict=True)]


def tags(signatures: Sequence[int], n: int) -> list[int]:
    """``SHA-256(σ)`` as integers: what the two sides compare."""
    width = (n.bit_length() + 7) // 8
    return [
        int.from_bytes(hashlib.sha256(b"privfl-psi-tag" + s.to_bytes(width, "big")).digest(), "big")
        for s in signatures
    ]


def _unit(n: int) -> int:
    while True:
        r = secrets.randbelow(n - 2) + 2
        if gmpy2.gcd(r, n) == 1:
            return r
