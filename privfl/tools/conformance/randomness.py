"""The played Server's view of every ciphertext it receives: fresh, and of the session's mode.

A Paillier ciphertext is ``c = (1 + n)^m · ρ mod n²``; holding the private key, the
played Server decrypts ``m`` and recovers the obfuscator ``ρ = c · (1 − n·m) mod n²``
(``(1 + n)^−m = 1 − n·m`` mod n²). Every ciphertext a party sends must carry a fresh
one (docs/protocol.md §6.0): ``ρ = 1`` (no obfuscation, or a homomorphic result of the
kit's own unobfuscated inputs left without re-randomisation) and a ``ρ`` seen before
are refused.

The obfuscation mode is checked with a key made for the purpose: for
``obfuscation = "djn"`` the kit's modulus ``n = p·q`` has a prime ``t`` of 64 bits
dividing ``p − 1``, and its generator ``h_s = y^n`` is built from a ``y`` of order
``t``. Then every DJN obfuscator ``h_s^a`` satisfies ``ρ^t = 1 mod n²``, while a
standard ``r^n`` does so only with probability about ``1/q`` — so a party that ignores
``h_s`` is caught. (The subgroup is small on purpose: this key is for testing only.)
What goes back to its key holder after a homomorphic step (a SecureBoost guest's
histograms) is held to the opposite: a full-length ``r^n`` in either mode, since under
the holder's own ``h_s`` the holder reads the product of the obfuscators that went in
(docs/protocol.md §6.0) — with this key, ``ρ^t = 1`` is exactly what gives it away.
The kit's own ciphertexts that a party computes on (residuals, others' scores) are
sent with ``ρ = 1``, so whatever a party derives from them is fresh only if the party
re-randomised it.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass, field

import gmpy2

from privfl.crypto.paillier import PrivateKey, PublicKey, generate_keypair

ORDER_BITS = 64


def _prime(bits: int) -> int:
    """A random prime of exactly ``bits`` bits with its two top bits set."""
    while True:
        candidate = secrets.randbits(bits) | (3 << (bits - 2)) | 1
        if gmpy2.is_prime(candidate, 40):
            return candidate


def _prime_with_factor(bits: int, t: int) -> int:
    """A prime ``p = 2·t·k + 1`` of exactly ``bits`` bits with its two top bits set."""
    low, high = (3 << (bits - 2)), (1 << bits) - 1
    k_low, k_high = -(-(low - 1) // (2 * t)), (high - 1) // (2 * t)
    while True:
        p = 2 * t * (k_low + secrets.randbelow(k_high - k_low + 1)) + 1
        if gmpy2.is_prime(p, 40):
            return p


def checkable_key(bits: int, obfuscation: str) -> tuple[PrivateKey, int]:
    """A key pair in ``obfuscation`` mode and the order ``t`` of its ``h_s`` (0 for standard)."""
    if obfuscation != "djn":
        _, private = generate_keypair(bits, "standard")
        return private, 0
    t = int(gmpy2.next_prime(secrets.randbits(ORDER_BITS) | (1 << (ORDER_BITS - 1))))
    half = bits // 2
    while True:
        p, q = _prime_with_factor(half, t), _prime(bits - half)
        n = p * q
        if p != q and n.bit_length() == bits and math.gcd(n, (p - 1) * (q - 1)) == 1:
            break
    while True:  # y ≡ g^((p−1)/t) (mod p), y ≡ 1 (mod q): an element of order t mod n
        y_p = pow(secrets.randbelow(p - 3) + 2, (p - 1) // t, p)
        if y_p != 1:
            break
    y = (y_p * q * pow(q, -1, p) + p * pow(p, -1, q)) % n
    h_s = pow(y, n, n * n)
    return PrivateKey(PublicKey(n, h_s), p, q), t


def trivial(key: PublicKey, plain: list[int]) -> list[int]:
    """``(1 + n·m) mod n²``: encryptions with ρ = 1, for inputs a party must re-randomise."""
    n2 = key.n * key.n
    return [(1 + key.n * m) % n2 for m in plain]


@dataclass
class Freshness:
    """Every obfuscator recovered so far, and what was wrong with any of them."""

    private: PrivateKey
    order: int  # t for a checkable DJN key, else 0
    seen: set[int] = field(default_factory=set)
    trivial: list[str] = field(default_factory=list)
    repeated: list[str] = field(default_factory=list)
    wrong_mode: list[str] = field(default_factory=list)
    count: int = 0
    holder_count: int = 0  # ciphertexts re-randomised for the key holder (full r^n due)
    holder_djn: list[str] = field(default_factory=list)  # of those, an h_s^a instead

    def observe(
        self, what: str, ciphertexts: tuple[int, ...] | list[int], holder: bool = False
    ) -> list[int]:
        """Decrypt ``ciphertexts`` (from ``what``) and note their obfuscators; return plaintexts.

        ``holder``: they come back to the key holder after a homomorphic step, so their
        obfuscators must be full-length ``r^n`` in either mode."""
        key = self.private.public_key
        n, n2 = key.n, key.n * key.n
        plain = self.private.decrypt(ciphertexts)
        for i, (c, m) in enumerate(zip(ciphertexts, plain, strict=True)):
            rho = c * (1 - n * m) % n2
            self.count += 1
            where = f"{what}[{i}]"
            if rho == 1:
                self.trivial.append(where)
            elif rho in self.seen:
                self.repeated.append(where)
            elif self.order and (pow(rho, self.order, n2) == 1) == holder:
                (self.holder_djn if holder else self.wrong_mode).append(where)
            self.seen.add(rho)
            self.holder_count += holder
        return plain
