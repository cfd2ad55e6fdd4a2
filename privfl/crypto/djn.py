"""DJN short-exponent obfuscation: ``h_s^a mod n²`` with a fixed-base table instead of ``r^n``.

Damgård, Jurik and Nielsen (Int. J. Inf. Security 2010; also Damgård–Jurik, PKC 2001)
encrypt as ``(1 + n)^m · h_s^a mod n²`` where ``h_s = h^n mod n²`` for one public
``h = −x² mod n`` (``x`` a random unit) and ``a`` is uniform on ``[0, 2^⌈|n|/2⌉)``.
The result is a valid Paillier ciphertext (``h_s^a = (h^a)^n`` is an n-th power), so the
standard private key decrypts it unchanged. SecretFlow's HEU ships the same scheme as
its default "ZPaillier"; see docs/performance.md.

Security assumption (stronger than plain Paillier's DCR): besides DCR, that ``h^a`` with a
*short* exponent ``a`` of about |n|/2 bits is indistinguishable from a uniform element of
the subgroup ``<h>`` — the short-exponent indistinguishability assumption DJN state
(related to the short-exponent discrete-log assumption of van Oorschot–Wiener and
Koshiba–Kurosawa, 2004). No attack better than factoring n is known for |n| ≥ 2048, but it
is an extra assumption; that is why privfl keeps standard obfuscation as the default.

Speed: ``h_s`` is fixed per key, so all powers ``h_s^(d · 2^(w·i))`` for every window
``i`` and digit ``d`` are computed once per process (about 5.6 MB for a 2048-bit key at
w = 6) and an obfuscation costs ⌈(|n|/2)/w⌉ ≈ 171 modular multiplications instead of a
2048-bit-exponent powmod (≈ 3000 squarings and multiplications).
"""

from __future__ import annotations

import functools
import math
import secrets
from typing import Any

from privfl.crypto.gmp import mpz as _mpz
from privfl.crypto.gmp import powmod as _powmod
from privfl.errors import CryptoError

WINDOW = 6
"""Table window in bits: 2^6 entries per window; 6 measured fastest (8 is 3x the memory)."""


def exponent_bits(n: int) -> int:
    """Length of the short exponent ``a``: ``⌈|n|/2⌉`` bits, as DJN and HEU use."""
    return (n.bit_length() + 1) // 2


def make_generator(n: int) -> int:
    """A fresh public ``h_s = (−x²)^n mod n²`` for a CSPRNG unit ``x`` (the key holder calls this).

    ``h = −x² mod n`` is DJN's choice of base; ``x`` is secret and discarded.
    """
    while True:
        x = secrets.randbelow(n - 2) + 2
        if math.gcd(x, n) == 1:
            break
    h = (-x * x) % n
    n_mpz = _mpz(n)
    return int(_powmod(_mpz(h), n_mpz, n_mpz * n_mpz))


def check_generator(n: int, h_s: int) -> None:
    """Raise CryptoError unless ``h_s`` can be a DJN generator for ``n`` (use on peer input)."""
    n2 = n * n
    if not isinstance(h_s, int) or not 1 < h_s < n2 or math.gcd(h_s, n) != 1:
        raise CryptoError(
            "the server's DJN generator h_s is not a unit in (1, n^2); the public key is invalid"
        )


@functools.lru_cache(maxsize=4)
def table(n: int, h_s: int) -> tuple[tuple[Any, ...], ...]:
    """``rows[i][d] = h_s^(d · 2^(WINDOW·i)) mod n²`` for every window ``i`` of the exponent."""
    n2 = _mpz(n) * _mpz(n)
    windows = -(-exponent_bits(n) // WINDOW)
    rows = []
    base = _mpz(h_s)
    for _ in range(windows):
        row = [_mpz(1), base]
        for _digit in range(2, 1 << WINDOW):
            row.append(row[-1] * base % n2)
        rows.append(tuple(row))
        base = row[-1] * base % n2  # h_s^(2^WINDOW) relative to this row's base
    return tuple(rows)


def fixed_base_pow(n: int, h_s: int, a: int) -> Any:
    """``h_s^a mod n²`` for ``0 <= a < 2^exponent_bits(n)`` from the precomputed table."""
    rows = table(n, h_s)
    n2 = _mpz(n) * _mpz(n)
    mask = (1 << WINDOW) - 1
    acc = _mpz(1)
    for row in rows:
        digit = a & mask
        if digit:
            acc = acc * row[digit] % n2
        a >>= WINDOW
    return acc


def obfuscators(n: int, h_s: int, count: int) -> list[int]:
    """``count`` fresh ``h_s^a mod n²`` with ``a`` uniform on ``[0, 2^⌈|n|/2⌉)`` (CSPRNG)."""
    bits = exponent_bits(n)
    return [int(fixed_base_pow(n, h_s, secrets.randbits(bits))) for _ in range(count)]
