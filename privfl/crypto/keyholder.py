"""The key holder's obfuscators: fixed-base powers of private generators, by CRT.

A Paillier obfuscator ``r^n mod n²`` is a uniform n-th residue. By the Chinese remainder
theorem the n-th residues are ``T_p × T_q``, ``T_p`` the subgroup of order ``p − 1`` of
``Z*_{p²}``; it is cyclic, and ``a ↦ a^p mod p²`` maps ``Z*_p`` one-to-one onto it
(paillier.obfuscators_crt). So for a generator ``γ_p`` of ``T_p`` and ``x`` uniform on
``[0, p − 1)`` from the CSPRNG, ``γ_p^x mod p²`` is uniform on ``T_p``: with ``γ_q`` likewise,
``CRT(γ_p^x, γ_q^y)`` has the distribution of ``r^n``, full-length exponents, not DJN's
short-exponent assumption. Only the key holder can draw it (``γ_p`` and the exponent range
need ``p``); the generators never leave its process.

Why: ``γ_p`` is fixed, so every ``γ_p^(d·256^i)`` is computed once per process (one row of
256 powers per byte of the exponent: about 2.4 MB per prime at 1024 bits, 9.5 MB at
2048) and a power costs one multiplication mod ``p²`` per byte of ``x``: 64 at 1024 bits,
against about 600 for the ``a^p mod p²`` that paillier.obfuscators_crt computed before:
0.17 ms against 0.48 ms per obfuscator at 1024 bits in the bench (docs/performance.md).

The generator: ``γ_p = a^p mod p²`` generates ``T_p`` iff ``a`` is a primitive root mod
``p``, i.e. ``a^((p−1)/ℓ) ≢ 1`` for every prime ``ℓ | p − 1``. ``p − 1`` cannot be factored
in general, so :func:`checked_primes` names every prime ``ℓ < 2^24`` that divides it and the
cofactor left when that is prime; an ``a`` that passes fails to be a primitive root only if
it is an ``ℓ``-th power for a prime ``ℓ > 2^24`` of a composite cofactor, which for a CSPRNG
``a`` has probability ``Σ 1/ℓ < (|p|/24) · 2^-24``: below ``1.3·10^-6`` per prime at 1024-bit
keys, ``2.6·10^-6`` at 2048. In that event the obfuscators are uniform on a subgroup of
the n-th residues whose index is a product of primes above ``2^24``, a subgroup no one
without ``p`` can test membership of (its order is unknown to them).
"""

from __future__ import annotations

import functools
import os
import secrets
from collections.abc import Sequence
from typing import Any

import numpy as np

from privfl.crypto.gmp import mpz, powmod
from privfl.errors import CryptoError

SIEVE_BOUND = 1 << 24
"""Primes below this that divide ``p − 1`` are tested (see the module docstring)."""


def _small_primes(bound: int = SIEVE_BOUND) -> np.ndarray:
    """Every prime below ``bound`` (an Eratosthenes sieve over the odd numbers)."""
    sieve = np.ones(bound // 2, dtype=np.bool_)  # sieve[i]: is 2i + 1 prime
    sieve[0] = False
    for i in range(1, (int(bound**0.5) + 1) // 2):
        if sieve[i]:
            start = (2 * i + 1) ** 2 // 2
            sieve[start :: 2 * i + 1] = False
    return np.concatenate(([2], 2 * np.flatnonzero(sieve) + 1)).astype(np.int64)


def small_factors(m: int, bound: int = SIEVE_BOUND) -> tuple[list[int], int]:
    """The distinct primes below ``bound`` dividing ``m``, and ``m`` with them divided out.

    The residues of ``m`` modulo every prime at once: Horner over ``m``'s 16-bit limbs in
    int64 (``residue · 2^16 + limb < 2^40`` for primes below ``2^24``).
    """
    if bound > SIEVE_BOUND:
        raise ValueError(f"bound must be at most {SIEVE_BOUND}")
    primes = _small_primes(bound)
    residue = np.zeros(len(primes), np.int64)
    limbs = m.to_bytes(-(-m.bit_length() // 16) * 2, "big")
    for at in range(0, len(limbs), 2):
        residue = ((residue << 16) | int.from_bytes(limbs[at : at + 2], "big")) % primes
    found = [int(ell) for ell in primes[residue == 0]]
    for ell in found:
        while m % ell == 0:
            m //= ell
    return found, m


def checked_primes(p: int) -> list[int]:
    """The primes of ``p − 1`` that :func:`primitive_root` tests: those below
    :data:`SIEVE_BOUND`, and the cofactor left when it is prime (then the test is exact)."""
    found, cofactor = small_factors(p - 1)
    if cofactor > 1 and (cofactor < SIEVE_BOUND**2 or _is_prime(cofactor)):
        found.append(cofactor)  # a cofactor below 2^48 with no factor below 2^24 is prime
    return found


def primitive_root(p: int, primes: list[int]) -> int:
    """A CSPRNG ``a`` with ``a^((p−1)/ℓ) ≢ 1 (mod p)`` for each ``ℓ`` of ``primes``
    (:func:`checked_primes`; see the module docstring for the primes it cannot check)."""
    exponents = [mpz((p - 1) // ell) for ell in primes]
    p_mpz = mpz(p)
    while True:
        a = mpz(secrets.randbelow(p - 2) + 2)
        if all(powmod(a, e, p_mpz) != 1 for e in exponents):
            return int(a)


def _is_prime(m: int) -> bool:
    from gmpy2 import is_prime

    return bool(is_prime(m, 50))


@functools.lru_cache(maxsize=8)
def _table(p: int) -> tuple[Any, tuple[tuple[Any, ...], ...]]:
    """``p²`` and ``rows[i][d] = γ_p^(d · 256^i) mod p²`` for a fresh private generator ``γ_p``."""
    p2 = mpz(p) * mpz(p)
    base = powmod(
        mpz(primitive_root(p, checked_primes(p))), mpz(p), p2
    )  # γ_p = a^p mod p², a generator of T_p
    rows = []
    for _ in range(-(-(p - 1).bit_length() // 8)):
        row = [mpz(1), base]
        for _digit in range(2, 256):
            row.append(row[-1] * base % p2)
        rows.append(tuple(row))
        base = row[-1] * base % p2
    return p2, tuple(rows)


def power(p: int, x: int) -> Any:
    """``γ_p^x mod p²`` for ``0 <= x < p``, one multiplication per byte of ``x``."""
    [out] = powers(p, [x])
    return out


def powers(p: int, xs: Sequence[int]) -> list[Any]:
    """``γ_p^x mod p²`` for each ``0 <= x < p`` of ``xs``: :func:`power`, a batch at a time."""
    width = len(_table(p)[1])
    raw = b"".join(x.to_bytes(width, "little") for x in xs)
    return digit_powers(p, np.frombuffer(raw, np.uint8).reshape(len(xs), width))


def digit_powers(p: int, digits: np.ndarray) -> list[Any]:
    """``γ_p^x mod p²`` for each row of ``digits``: an exponent's little-endian bytes.

    Why a batch: the products go row by row of the table over every exponent at once, one
    list comprehension per byte position, instead of a Python loop per exponent: the same
    multiplications (one per byte) in fewer Python steps (docs/performance.md, "Hidden
    instance space"). A zero byte multiplies by ``rows[i][0] = 1``: one product in 256
    more than needed, and no test per product.
    """
    p2, rows = _table(p)
    if not len(digits):
        return []
    columns = digits.T.tolist()
    acc = [rows[0][d] for d in columns[0]]
    for row, column in zip(rows[1:], columns[1:], strict=True):
        acc = [a * row[d] % p2 for a, d in zip(acc, column, strict=True)]
    return acc


def uniform_digits(bound: int, count: int) -> np.ndarray:
    """``count`` exponents uniform on ``[0, bound)`` from the OS CSPRNG, as ``(count, width)``
    little-endian bytes, ``width`` those of ``bound`` (the table's rows when ``bound = p − 1``).

    ``secrets.randbelow``'s rule, a batch at a time: ``bound.bit_length()`` uniform bits,
    drawn again while ``≥ bound`` (rejection keeps the draw uniform); one ``os.urandom``
    per round instead of a call per exponent, and the bytes go to the table unconverted.
    """
    if bound < 1:
        raise ValueError("the bound must be positive")
    bits = bound.bit_length()
    width = -(-bits // 8)
    top = (1 << (bits - 8 * (width - 1))) - 1  # the top byte's bits below the bound's length
    limit = np.frombuffer(bound.to_bytes(width, "big"), np.uint8)
    kept: list[np.ndarray] = []
    need = count
    while need > 0:
        draw = need + need // 2 + 8  # half or more are kept (bound ≥ 2^(bits − 1)); else again
        raw = np.frombuffer(os.urandom(draw * width), np.uint8).reshape(draw, width).copy()
        raw[:, -1] &= top
        kept.append(raw[_below(raw, limit)][:need])
        need -= len(kept[-1])
    return np.concatenate(kept) if kept else np.zeros((0, width), np.uint8)


def _below(raw: np.ndarray, limit: np.ndarray) -> np.ndarray:
    """Which rows of little-endian ``raw`` are below the big-endian ``limit`` of their width:
    compared at the most significant byte where they differ."""
    big = raw[:, ::-1]
    differ = big != limit
    first = differ.argmax(axis=1)
    smaller: np.ndarray = differ.any(axis=1) & (big[np.arange(len(big)), first] < limit[first])
    return smaller


def obfuscators(n: int, p: int, q: int, count: int) -> list[int]:
    """``count`` uniform n-th residues mod ``n²`` (see the module docstring), by CRT."""
    p2, q2 = mpz(p) * p, mpz(q) * q
    if p2 * q2 != mpz(n) * n:
        raise CryptoError("p * q does not match the public modulus; the key pair is corrupt")
    q2_inv = powmod(q2, -1, p2)
    a = digit_powers(p, uniform_digits(p - 1, count))
    b = digit_powers(q, uniform_digits(q - 1, count))
    return [int(v + q2 * ((u - v) * q2_inv % p2)) for u, v in zip(a, b, strict=True)]
