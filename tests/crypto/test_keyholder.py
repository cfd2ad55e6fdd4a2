"""Tests for the key holder's fixed-base obfuscators: generators, known answers, n-th residues."""

from __future__ import annotations

import pytest

from privfl.crypto import keyholder
from privfl.crypto.paillier import generate_keypair, private_primes

BIG = (1 << 61) - 1  # a Mersenne prime, above the sieve's bound
SAFE = 2199023255867  # 2 · 1099511627933 + 1, both prime: p − 1 has a cofactor above 2^24
SIX = 6442450999  # 6 · 1073741833 + 1, both prime


def order(a: int, p: int, factors: list[int]) -> int:
    """The multiplicative order of ``a`` mod the prime ``p``, from the primes of ``p − 1``."""
    out = p - 1
    for ell in factors:
        while out % ell == 0 and pow(a, out // ell, p) == 1:
            out //= ell
    return out


def test_small_factors_finds_every_prime_below_the_bound_and_leaves_the_rest() -> None:
    m = 2**5 * 3 * 5**2 * 16_777_213 * BIG  # 16,777,213: the largest prime below 2^24

    assert keyholder.small_factors(m) == ([2, 3, 5, 16_777_213], BIG)
    assert keyholder.small_factors(m, bound=1000) == ([2, 3, 5], 16_777_213 * BIG)


@pytest.mark.parametrize(
    ("p", "factors"),
    [(1009, [2, 3, 7]), (65537, [2]), (SAFE, [2, (SAFE - 1) // 2]), (SIX, [2, 3, (SIX - 1) // 6])],
)
def test_primitive_root_generates_the_whole_group(p: int, factors: list[int]) -> None:
    # Without the test a CSPRNG a is a quadratic residue half the time (order ≤ (p−1)/2):
    # 40 draws all of order p − 1 by chance has probability 2^-40.
    primes = keyholder.checked_primes(p)
    roots = [keyholder.primitive_root(p, primes) for _ in range(40)]

    assert primes == factors

    assert all(order(a, p, factors) == p - 1 for a in roots)


def test_obfuscators_are_the_fixed_base_powers_of_generators(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pub, priv = generate_keypair(512)
    p, q = private_primes(priv)
    n2 = pub.n**2
    # the tables (and their CSPRNG generators) first: a constant draw may be no primitive root
    (p2, rows_p), (q2, rows_q) = keyholder._table(p), keyholder._table(q)
    width = len(rows_p)
    assert len(rows_q) == width  # both primes' exponents: the same bytes, 123,456,789 each
    draw = (123_456_789).to_bytes(width, "little")
    monkeypatch.setattr(keyholder.os, "urandom", lambda size: draw * (size // width))
    [r] = keyholder.obfuscators(pub.n, p, q, 1)

    gamma_p, gamma_q = int(rows_p[0][1]), int(rows_q[0][1])
    # known answer: CRT(γ_p^x mod p², γ_q^x mod q²)
    assert r % p2 == pow(gamma_p, 123_456_789, p2) and r % q2 == pow(gamma_q, 123_456_789, q2)
    # each generator lies in T_p (order p − 1 mod p²), and generates it as far as is checked
    for prime, gamma in ((p, gamma_p), (q, gamma_q)):
        assert pow(gamma, prime - 1, prime**2) == 1
        found, _ = keyholder.small_factors(prime - 1)
        assert all(pow(gamma, (prime - 1) // ell, prime**2) != 1 for ell in found)
    # an n-th residue: an encryption of 0 whose order divides φ(n)
    assert priv.decrypt([r]) == [0] and pow(r, (p - 1) * (q - 1), n2) == 1


def test_powers_match_powmod_for_every_exponent_length() -> None:
    _, priv = generate_keypair(512)
    p, _ = private_primes(priv)
    p2, rows = keyholder._table(p)
    gamma = int(rows[0][1])

    exponents = [0, 1, 255, 256, 2**64 + 3, p - 2]

    assert keyholder.powers(p, exponents) == [pow(gamma, x, int(p2)) for x in exponents]
    assert [keyholder.power(p, x) for x in exponents] == keyholder.powers(p, exponents)
    assert keyholder.powers(p, []) == []


def test_a_batch_of_obfuscators_is_fresh_n_th_residues() -> None:
    pub, priv = generate_keypair(512)
    p, q = private_primes(priv)

    batch = keyholder.obfuscators(pub.n, p, q, 40)

    # two equal draws out of 40 from ~2^500 n-th residues: probability below 2^-480
    assert len(set(batch)) == 40
    assert priv.decrypt(batch) == [0] * 40
    assert all(pow(r, (p - 1) * (q - 1), pub.n**2) == 1 for r in batch)


@pytest.mark.parametrize("bound", [1, 2, 255, 256, 257, 2**64, 2**64 + 1, 3 * 2**61 + 7])
def test_uniform_digits_are_the_bytes_of_draws_below_the_bound(bound: int) -> None:
    digits = keyholder.uniform_digits(bound, 20_000)

    values = [int.from_bytes(row.tobytes(), "little") for row in digits]
    assert digits.shape == (20_000, -(-bound.bit_length() // 8))
    assert all(0 <= v < bound for v in values)
    # every value of a small range is drawn: one is missed with probability
    # (1 − 1/257)^20,000 < 10^-33, any of the 257 below 10^-30
    if bound <= 257:
        assert set(values) == set(range(bound))
    # above, the top half of the range is reached (each draw lands there with probability
    # 1/3 at least, so all miss it below 10^-3000): the top byte is not cut short
    else:
        assert max(values) >= bound // 2


def test_uniform_digits_reject_exactly_the_draws_at_or_above_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bound = 300  # 9 bits: draws of two bytes, the top one cut to its lowest bit
    stream = [299, 300, 511, 0, 256, 65535]  # 65,535 is cut to 511 and rejected as well
    raw = b"".join(v.to_bytes(2, "little") for v in stream)
    monkeypatch.setattr(keyholder.os, "urandom", lambda size: (raw * size)[:size])

    digits = keyholder.uniform_digits(bound, 3)

    assert [int.from_bytes(row.tobytes(), "little") for row in digits] == [299, 0, 256]
