"""A fully linear proof that a batch of products is what the prover claims, on shared data.

Boneh, Boyle, Corrigan-Gibbs, Gilboa, Ishai (CRYPTO 2019, "Zero-knowledge proofs on
secret-shared data via fully linear PCPs"), the construction Prio3 runs: a prover holds
``M`` pairs ``(u_j, v_j)``; two verifiers hold additive shares of them (mod ``PRIME``)
and want ``u_j·v_j`` without learning the values. The prover draws random ``f(0), g(0)``,
so ``f`` and ``g`` are the degree-``M`` polynomials through ``(0, f(0)), (j, u_j)`` and
``(0, g(0)), (j, v_j)``, and sends shares of ``h = f·g`` as its values at ``0..2M``.

Each verifier, on its shares alone (every step is linear), evaluates ``f``, ``g`` and
``h`` at a random ``r`` drawn after the proof arrived, and a random combination of the
claimed products ``h(j)``; they add their four numbers and accept iff ``h(r) = f(r)·g(r)``
and the combination equals the statement's. Soundness: a wrong ``h`` survives with
probability ≤ 2M/PRIME (Schwartz–Zippel), a wrong product with ≤ 1/PRIME. Zero knowledge:
``f(r)`` and ``g(r)`` are uniform (the random ``f(0), g(0)`` enter with a nonzero Lagrange
weight at any ``r ∉ {0..M}``), ``h(r)`` is their product and the combination is fixed.

Pure maths on Python integers (the statements here have a few hundred products; the
prover's interpolation runs as numpy object-array products).
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

PRIME = 2**255 - 19  # any prime above the statement's integers works; this one is well known


@lru_cache(maxsize=16)  # a round's verifiers evaluate every client's proof at one point
def lagrange_weights(nodes: int, r: int) -> tuple[int, ...]:
    """``L_j(r)`` for the interpolation nodes ``0..nodes−1``: ``p(r) = Σ L_j(r)·p(j)``."""
    return _lagrange(nodes, r)


def _lagrange(nodes: int, r: int) -> tuple[int, ...]:
    prefix, suffix = [1] * (nodes + 1), [1] * (nodes + 1)
    for m in range(nodes):
        prefix[m + 1] = prefix[m] * (r - m) % PRIME
    for m in range(nodes - 1, -1, -1):
        suffix[m] = suffix[m + 1] * (r - m) % PRIME
    inverse = _inverse_denominators(nodes)
    return tuple(prefix[j] * suffix[j + 1] % PRIME * inverse[j] % PRIME for j in range(nodes))


@lru_cache(maxsize=8)
def _inverse_denominators(nodes: int) -> tuple[int, ...]:
    # Π_{m≠j} (j − m) = j!·(nodes−1−j)!·(−1)^(nodes−1−j) for consecutive integer nodes
    dens = [
        (-1) ** (nodes - 1 - j) * math.factorial(j) * math.factorial(nodes - 1 - j)
        for j in range(nodes)
    ]
    return tuple(pow(d % PRIME, -1, PRIME) for d in dens)


def evaluate(values: Sequence[int], r: int) -> int:
    """The polynomial through ``(j, values[j])`` at ``r`` (linear in ``values``)."""
    weights = lagrange_weights(len(values), r)
    return sum(w * v for w, v in zip(weights, values, strict=True)) % PRIME


def extend(values: Sequence[int], nodes: int) -> list[int]:
    """The polynomial through ``(j, values[j])`` at ``0..nodes−1`` (the given ones kept)."""
    known = np.array([v % PRIME for v in values], dtype=object)
    extended = _extension(len(values), nodes).dot(known) % PRIME  # Python ints, C loop
    return [int(v) for v in known] + [int(v) for v in extended]


@lru_cache(maxsize=8)
def _extension(known: int, nodes: int) -> np.ndarray:
    rows = [_lagrange(known, x) for x in range(known, nodes)]
    return np.array(rows, dtype=object).reshape(nodes - known, known)


def prove(left: Sequence[int], right: Sequence[int]) -> list[int]:
    """The proof for the pairs ``(left[j], right[j])``: ``[f(0), g(0), h(0), …, h(2M)]``."""
    f = [secrets.randbelow(PRIME), *left]
    g = [secrets.randbelow(PRIME), *right]
    nodes = 2 * len(left) + 1
    h = [a * b % PRIME for a, b in zip(extend(f, nodes), extend(g, nodes), strict=True)]
    return [f[0], g[0], *h]


def split(values: Sequence[int]) -> tuple[list[int], list[int]]:
    """Two additive shares of ``values`` mod ``PRIME``: each alone is uniform."""
    first = [secrets.randbelow(PRIME) for _ in values]
    return first, [(v - s) % PRIME for v, s in zip(values, first, strict=True)]


def random_point(pairs: int) -> int:
    """A verifier's evaluation point: uniform outside the nodes ``0..2M``."""
    return 2 * pairs + 1 + secrets.randbelow(PRIME - 2 * pairs - 1)


def query(
    left: Sequence[int], right: Sequence[int], proof: Sequence[int], r: int
) -> tuple[int, int, int]:
    """One verifier's shares of ``f(r), g(r), h(r)`` from its shares of the pairs and proof."""
    pairs = len(left)
    if len(right) != pairs or len(proof) != 2 * pairs + 3:
        raise ValueError(f"a proof for {pairs} products has {2 * pairs + 3} elements")
    f_r = evaluate([proof[0], *left], r)
    g_r = evaluate([proof[1], *right], r)
    return f_r, g_r, evaluate(proof[2:], r)


def products(proof: Sequence[int]) -> list[int]:
    """A verifier's shares of the claimed products ``h(1..M)`` (to combine linearly)."""
    pairs = (len(proof) - 3) // 2
    return list(proof[3 : 3 + pairs])


def decide(first: tuple[int, int, int], second: tuple[int, int, int]) -> bool:
    """Both verifiers' shares of ``f(r), g(r), h(r)`` added: is ``h(r) = f(r)·g(r)``?"""
    f_r, g_r, h_r = ((a + b) % PRIME for a, b in zip(first, second, strict=True))
    return f_r * g_r % PRIME == h_r
