"""RSA blind-signature PSI maths (no I/O): full-domain hash, blind, sign, unblind, tag.

The signer holds ``d``. The other side sends ``H(x)·r^e`` (uniform in Z_N*, so the
signer learns nothing about ``x``), gets back ``H(x)^d·r`` and divides by ``r``. A tag is
``SHA-256(H(x)^d)``: only the signer can make tags for ids of its choice, so its own
tags can be shown to the other side without letting it test guessed ids.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

import gmpy2
from cryptography.hazmat.primitives.asymmetric import rsa

from privfl.errors import ConfigError, ProtocolError

PUBLIC_EXPONENT = 65537
MIN_BITS = 1024  # the cryptography package refuses smaller RSA keys


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
    """A fresh RSA key pair for one session (never written to disk)."""
    if bits < MIN_BITS:
        raise ConfigError(f"data.psi_key_bits must be at least {MIN_BITS}")
    key = rsa.generate_private_key(public_exponent=PUBLIC_EXPONENT, key_size=bits)
    num = key.private_numbers()
    return RsaSigner(
        public=RsaPublic(n=num.public_numbers.n, e=num.public_numbers.e),
        p=num.p,
        q=num.q,
        dp=num.dmp1,
        dq=num.dmq1,
        q_inv=num.iqmp,
    )


def full_domain_hash(ids: Sequence[str], n: int, context: bytes) -> list[int]:
    """``H(id)`` in Z_N: SHAKE-256 over the session context and the id, 128 bits extra."""
    length = (n.bit_length() + 128 + 7) // 8
    return [
        int.from_bytes(hashlib.shake_256(context + b"\0" + i.encode()).digest(length), "big") % n
        for i in ids
    ]


def blind(hashes: Sequence[int], public: RsaPublic) -> tuple[list[int], list[int]]:
    """``H·r^e mod N`` with a fresh ``r`` per value; returns (blinded, r)."""
    n, e = public.n, public.e
    factors = [_unit(n) for _ in hashes]
    blinded = [int(h * gmpy2.powmod(r, e, n) % n) for h, r in zip(hashes, factors, strict=True)]
    return blinded, factors


def unblind(signed: Sequence[int], factors: Sequence[int], public: RsaPublic) -> list[int]:
    """``s·r⁻¹ mod N``, checking each signature against ``e`` is left to the tag match."""
    n = public.n
    if len(signed) != len(factors):
        raise ProtocolError(f"got {len(signed)} signatures for {len(factors)} blinded values")
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
