"""Secure aggregation that refuses an out-of-bound client: two servers, shares, a proof.

The aggregator and a second server that does not collude with it (the Shuffler's role)
each receive one additive share of a client's quantized update ``x`` (integers on the
grid of :mod:`privfl.mechanisms.skellam`, ``‖x‖₂ ≤ Δ₂`` when honest). Neither share alone
says anything about ``x``. The two servers check, on their shares only, that ``‖x‖₂`` is
small, keep the clients that pass, and each adds Skellam noise to its sum of shares
before they add the two sums: the aggregator learns the noisy sum of the valid inputs.

How the check works (each step chosen so that every server computation is linear):

1. **Integer shares with a free range.** ``x + ρ`` and ``−ρ``, ``ρ`` uniform on
   ``[0, 2^80)`` (OS CSPRNG), as canonical base-2^16 limbs that each server checks on
   receipt. So ``x`` is an integer below 2^82 in magnitude whatever the client does (no
   field wrap-around), and each share is within 2^-62 per coordinate of uniform.
2. **A random projection.** After every share is in, the servers draw ``R``: ``k`` rows
   of uniform ``{−1, 0, 1}`` entries (OS CSPRNG key, AES-CTR expansion). Each projects its
   own shares, ``z = R·x`` in shares. ``E[z_i²] = ⅔‖x‖²`` and ``E[z_i⁴] ≤ 3 E[z_i²]²``.
3. **A proof that ``Σ z_i² ≤ T``**, ``T = 2k·Δ₂²``: the client, shown ``R``, sends shares of
   the bits of ``T − Σ z_i²`` and a fully linear proof (:mod:`privfl.crypto.flp`) that the
   ``k`` squares and the bits' ``c(c − 1) = 0`` are what it claims; the servers combine the
   products with random weights and check ``Σ z_i² + Σ 2^l c_l = T``.

Bounds (k = 256): an honest client (``‖x‖ ≤ Δ₂``) fails only if ``Σ z_i² > 2k‖x‖²``, at most
``(2/e)^{k/2} < 1e-17`` (``z_i`` is sub-Gaussian with proxy ``‖x‖²``); an input with
``‖x‖ ≥ 3Δ₂`` passes only if ``Σ z_i² ≤ (1 − δ)·k·E[z_i²]`` with ``δ ≥ 2/3``, at most
``exp(−δ²k/6) < 1e-8`` (one-sided Bernstein for non-negative terms), plus the proof's
``2M/p``. Between ``Δ₂`` and ``3Δ₂`` an input may pass: the check is sound up to a factor 3.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import numpy as np
from randomgen import AESCounter

from privfl.crypto import flp

LIMB_BITS = 16
LIMBS = 6  # value = Σ limb_l·2^(16l): limbs 0..4 in [0, 2^16), the top one in {−1, 0, 1}
MASK_LIMBS = 5  # ρ uniform on [0, 2^80)
PROJECTIONS = 256  # k
SLACK = 2  # T = SLACK·k·Δ₂²


@dataclass(frozen=True, slots=True)
class Share:
    """What one server holds of one client's proof: shares mod ``flp.PRIME``."""

    bits: tuple[int, ...]  # of the bits of T − Σ z_i²
    proof: tuple[int, ...]


def _generator(key: int | None = None) -> np.random.Generator:
    return np.random.Generator(AESCounter(key=secrets.randbits(128) if key is None else key))


def canonical(limbs: np.ndarray) -> np.ndarray:
    """Carry ``limbs`` (any small int64 values) into the canonical form, same integer."""
    out = np.array(limbs, dtype=np.int64)
    for low in range(LIMBS - 1):
        carry = out[:, low] >> LIMB_BITS  # floor division: negative carries too
        out[:, low] &= (1 << LIMB_BITS) - 1
        out[:, low + 1] += carry
    return out


def split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two integer shares of ``x`` (int64 values), each within 2^-62 of uniform per entry."""
    rho = np.zeros((x.size, LIMBS), dtype=np.int64)
    rho[:, :MASK_LIMBS] = _generator().integers(0, 1 << LIMB_BITS, (x.size, MASK_LIMBS))
    first = rho.copy()
    first[:, 0] += np.asarray(x, dtype=np.int64)
    return canonical(first), canonical(-rho)


def well_formed(limbs: np.ndarray, dims: int) -> bool:
    """A server's check on receipt: canonical limbs, so the share is below 2^81."""
    if limbs.shape != (dims, LIMBS) or limbs.dtype != np.int64:
        return False
    low = limbs[:, : LIMBS - 1]
    return bool((low >= 0).all() and (low < 1 << LIMB_BITS).all()) and bool(
        (np.abs(limbs[:, -1]) <= 1).all()
    )


def projection(key: int, dims: int) -> np.ndarray:
    """``R``: ``PROJECTIONS × dims`` uniform ``{−1, 0, 1}`` (as float64 for an exact GEMM)."""
    if dims >= 2**36:  # exact float64 partial sums, and Σ z_i² far below flp.PRIME
        raise ValueError("bounded aggregation takes updates of fewer than 2^36 weights")
    rows: np.ndarray = _generator(key).integers(-1, 2, (PROJECTIONS, dims)).astype(np.float64)
    return rows


def project(rows: np.ndarray, shares: list[np.ndarray]) -> list[list[int]]:
    """A server's shares of ``z = R·x`` for each client's limbs, in one exact GEMM
    (limbs below 2^16 and ``{−1, 0, 1}`` rows: every partial sum stays below 2^53)."""
    if not shares:
        return []
    stacked = np.concatenate(shares, axis=1).astype(np.float64)
    partial = np.rint(rows @ stacked).astype(np.int64).reshape(rows.shape[0], -1, LIMBS)
    weights = [1 << (LIMB_BITS * level) for level in range(LIMBS)]
    return [
        [sum(int(v) * w for v, w in zip(row, weights, strict=True)) % flp.PRIME for row in client]
        for client in partial.transpose(1, 0, 2)
    ]


def threshold(sensitivity: float) -> int:
    """``T = SLACK·k·Δ₂²`` (an integer: ``Σ z_i²`` is one)."""
    return int(SLACK * PROJECTIONS * sensitivity**2)


def prove_bound(
    x: np.ndarray, rows: np.ndarray, bound: int, strict: bool = True
) -> tuple[list[int], list[int]]:
    """The client's bits of ``T − Σ z_i²`` and its proof.

    ``strict`` refuses an input that breaks the bound (ValueError); otherwise such a
    client sends the bits of ``(T − Σ z_i²) mod 2^L`` and a proof that cannot verify.
    """
    z = [int(v) for v in np.rint(rows @ np.asarray(x, dtype=np.float64)).astype(np.int64)]
    slack = bound - sum(v * v for v in z)
    if slack < 0 and strict:
        raise ValueError("the update breaks the bound: no proof exists")
    bits = [(slack >> level) & 1 for level in range(bound.bit_length())]
    proof = flp.prove(z + bits, z + [c - 1 for c in bits])
    return bits, proof


def proof_shares(bits: list[int], proof: list[int]) -> tuple[Share, Share]:
    """The bits and the proof split for the two servers."""
    bits_a, bits_b = flp.split(bits)
    proof_a, proof_b = flp.split(proof)
    return Share(tuple(bits_a), tuple(proof_a)), Share(tuple(bits_b), tuple(proof_b))


@dataclass(frozen=True, slots=True)
class Challenge:
    """The servers' joint coins, drawn after the proofs arrived."""

    point: int
    weights: tuple[int, ...]  # one for the norm equation, one per bit


def challenge(bits: int) -> Challenge:
    pairs = PROJECTIONS + bits
    weights = tuple(secrets.randbelow(flp.PRIME) for _ in range(bits + 1))
    return Challenge(flp.random_point(pairs), weights)


def verify_share(
    z: list[int], share: Share, coins: Challenge, bound: int, leader: bool
) -> tuple[int, int, int, int]:
    """One server's four numbers: shares of ``f(r), g(r), h(r)`` and of the statement."""
    one = 1 if leader else 0  # constants enter one server's share only
    bits = list(share.bits)
    if len(bits) != bound.bit_length():  # more bits would let Σ 2^l c_l wrap past T
        raise ValueError(f"a bound proof carries {bound.bit_length()} bits")
    f_r, g_r, h_r = flp.query(z + bits, z + [c - one for c in bits], share.proof, coins.point)
    claimed = flp.products(share.proof)
    squares = sum(claimed[: len(z)])
    recombined = sum(c << level for level, c in enumerate(bits))
    statement = coins.weights[0] * (squares + recombined - one * bound)
    statement += sum(w * c for w, c in zip(coins.weights[1:], claimed[len(z) :], strict=True))
    return f_r, g_r, h_r, statement % flp.PRIME


def accept(first: tuple[int, int, int, int], second: tuple[int, int, int, int]) -> bool:
    """Both servers' numbers: the proof holds and ``Σ z_i² + Σ 2^l c_l = T`` with bits."""
    return flp.decide(first[:3], second[:3]) and (first[3] + second[3]) % flp.PRIME == 0


def total(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """The two servers' summed limbs added: the integer sum (valid below 2^63 in size)."""
    limbs = (first + second).astype(np.uint64)  # wraps mod 2^64 like int64, silently
    out = np.zeros(limbs.shape[0], dtype=np.uint64)
    for level in range(64 // LIMB_BITS):  # higher limbs are multiples of 2^64
        out += limbs[:, level] << np.uint64(LIMB_BITS * level)
    signed: np.ndarray = out.view(np.int64)
    return signed
