"""The Host check (``[model] host_check = true``): proofs that a guest's inputs are honest rows.

A guest sums the Host's ciphertexts without seeing them; a Host that encrypts
``2^j`` instead of ``(g + 2^F, h, 1)`` reads every guest cell from the bin sums, and
in hidden mode a Host that masks all but one row makes a one-row node
(tests/attacks/test_secureboost_host_check.py). With the check the Host sends a
``boost_proof`` after ``boost_gradients`` (level 0) and after each ``boost_masked``:

- **Rows** (level 0): per row, fresh encryptions ``E_k`` of the bits of ``a = g + 2^F``
  (``Bounds.g_bits``) and of ``h`` (``Bounds.h_bits``), an OR-proof that each encrypts
  0 or 1, and the n-th root of ``C · ((1+n) · Π E_k^(w_k))⁻¹``: the row's plaintext is
  exactly ``1 + Σ bit_k · w_k`` with ``w_k`` the bit's place in common.Layout, so the
  count field is 1, ``0 <= a < 2^g_bits`` and ``0 <= h < 2^h_bits``, bit for bit.
- **Masked** (level ≥ 1): per direct node and row a fresh indicator ``I = [[b]]`` and an
  OR-proof that ``(M, I)`` is ``([[0]], [[0]])`` or ``(C re-encrypted, [[1]])`` with the
  parent's indicator ``J = [[1]]`` (the row is in the parent), folded into one residue
  each by hashed ``γ, γ'``; and per node the count ``Σ b`` opened with the root of
  ``Π I · (1+n)^-count``. A derived node's indicators are its parent's ÷ its
  sibling's, the root's ``[[1]]``: every node is a subset of its parent, so a level's
  nodes split their parents as in the shared mode. The guest learns the count of each
  direct node (and so of its sibling), which it holds to the row floor. Under the
  check every lane of ``boost_masked`` holds one node (hidden.lane_width), so its
  masked ciphertexts are, lane by lane, exactly the per-node ones proven here.

Every proof is Fiat–Shamir (privfl.crypto.sigma): no round trip, no choice of the
guest's that the Host could wait for. The guest learns nothing else: each bit and
indicator is a fresh encryption, each OR-proof is zero-knowledge, each opened root is of
an encryption of 0 whose obfuscator the fresh bits make uniform. docs/security.md
says what remains (an in-range encoding of ``g_bits + h_bits`` rows per tree).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from privfl.crypto import sigma
from privfl.crypto.gmp import mpz, powmod
from privfl.crypto.paillier import (
    PrivateKey,
    PublicKey,
    _multi_exp,
    obfuscators_crt,
    private_primes,
)
from privfl.errors import ProtocolError
from privfl.learning.secureboost import FRAC_BITS
from privfl.parties.vertical.secureboost.common import Layout
from privfl.protocol import fresh
from privfl.protocol.bigints import BigInts
from privfl.protocol.boost_messages import BoostProof


@dataclass(frozen=True, slots=True)
class Bounds:
    """The legal ``|g| <= g_max`` and ``0 <= h <= h_max`` at the job's fixed-point scale."""

    g_max: int = 1 << FRAC_BITS  # |g| <= 1
    h_max: int = 1 << (FRAC_BITS - 2)  # h <= 1/4

    @property
    def g_bits(self) -> int:
        return (2 * self.g_max).bit_length()

    @property
    def h_bits(self) -> int:
        return self.h_max.bit_length()

    def weights(self, layout: Layout) -> list[int]:
        """Each proven bit's place in a row plaintext: ``a``'s bits, then ``h``'s."""
        top = layout.h_bits + layout.count_bits
        return [1 << (k + top) for k in range(self.g_bits)] + [
            1 << (k + layout.count_bits) for k in range(self.h_bits)
        ]


def context(tree: int, level: int, n: int) -> bytes:
    return f"privfl boost_proof|{tree}|{level}|{n}".encode()


def _bits(plain: Sequence[int], layout: Layout, bounds: Bounds) -> list[int]:
    cb, hb = layout.count_bits, layout.h_bits
    out: list[int] = []
    for p in plain:
        a, h = p >> (hb + cb), (p >> cb) & ((1 << hb) - 1)
        if a >> bounds.g_bits or h >> bounds.h_bits or p & ((1 << cb) - 1) != 1:
            raise ProtocolError("a row plaintext is outside the Host check's bounds")
        out += [a >> k & 1 for k in range(bounds.g_bits)] + [
            h >> k & 1 for k in range(bounds.h_bits)
        ]
    return out


def _noise(key: PrivateKey, count: int) -> list[int]:
    """The key holder's obfuscators by CRT (about 0.6× the public key's cost)."""
    return obfuscators_crt(key.public_key.n, *private_primes(key), count)


def _bit_pairs(key: PublicKey, cts: Sequence[int]) -> list[tuple[int, int]]:
    n2, minus_one = key.nsquare, (1 - key.n) % key.nsquare  # (1+n)^-1
    return [(int(e), int(e) * minus_one % n2) for e in cts]


def _composed(key: PublicKey, bits: Sequence[int], weights: Sequence[int], row: int) -> Any:
    k = len(weights)
    part = _multi_exp([mpz(e) for e in bits[row * k : (row + 1) * k]], weights, mpz(key.nsquare))
    return part * (1 + key.n) % key.nsquare


def prove_rows(
    key: PrivateKey,
    tree: int,
    cts: Sequence[int],
    plain: Sequence[int],
    layout: Layout,
    bounds: Bounds,
    noise: Sequence[int] | None = None,
) -> BoostProof:
    """The Host's level-0 proof for the tree's row ciphertexts ``cts`` of ``plain``."""
    public = key.public_key
    bits = _bits(plain, layout, bounds)
    encrypted = fresh.encrypt(public, bits, noise or _noise(key, len(bits)))
    weights = bounds.weights(layout)
    n2 = public.nsquare
    roots = []
    for i, c in enumerate(cts):
        rest = mpz(c) * powmod(_composed(public, encrypted.values, weights, i), -1, n2) % n2
        roots.append(sigma.open_zero(key, int(rest)))
    ctx = context(tree, 0, public.n)
    proofs = sigma.prove_or(key, _bit_pairs(public, encrypted.values), bits, ctx, [cts])
    return _message(tree, 0, encrypted, proofs, roots, np.zeros(0, np.int64))


def verify_rows(
    key: PublicKey, proof: BoostProof, cts: Sequence[int], layout: Layout, bounds: Bounds
) -> None:
    """Refuse a level-0 proof that does not show every row plaintext legal."""
    weights = bounds.weights(layout)
    bits = proof.values.values
    if proof.level != 0 or len(bits) != len(cts) * len(weights) or len(proof.roots) != len(cts):
        _refuse(f"its proof of tree {proof.tree}'s rows has the wrong size")
    key.check_ciphertexts(bits)
    ctx = context(proof.tree, 0, key.n)
    if not sigma.verify_or(key, _bit_pairs(key, bits), _proofs(proof), ctx, [cts]):
        _refuse(f"a row of tree {proof.tree} is not encrypted bit by bit as proven")
    # Π C_i^β_i = (Π root_i^β_i)^n · (1+n)^Σβ · Π E_ik^(w_k β_i): each C_i is its bits' sum
    n, n2 = mpz(key.n), mpz(key.nsquare)
    betas = [secrets.randbits(sigma.BATCH_BITS) | 1 for _ in cts]
    if any(not 0 < r < key.n for r in proof.roots.values):
        _refuse(f"an opening of tree {proof.tree}'s rows is out of range")
    left = _multi_exp([mpz(c) for c in cts], betas, n2)
    roots = powmod(_multi_exp([mpz(r) for r in proof.roots.values], betas, n), n, n2)
    exps = [w * b for b in betas for w in weights]
    right = roots * _multi_exp([mpz(e) for e in bits], exps, n2) % n2
    right = right * (1 + sum(betas) * n) % n2
    if left != right:
        _refuse(f"a row of tree {proof.tree} is not the sum of its proven bits")


def _gammas(proof_ctx: bytes, parts: Sequence[Sequence[int]]) -> tuple[int, int]:
    first, second = sigma.challenges(proof_ctx + b"|gamma", parts, 2)
    return first, second


def root_flags(key: PublicKey, rows: int) -> list[int]:
    """The root's indicators: every row in, ``[[1]]`` with obfuscator 1."""
    return [1 + key.n] * rows


def next_flags(
    key: PublicKey,
    flags: dict[int, list[int]],
    nodes: Sequence[int],
    direct: Sequence[int],
    values: Sequence[int],
) -> None:
    """Record a level's indicators: a direct node's as sent, a derived one's parent ÷ sibling."""
    n2 = key.nsquare
    rows = len(values) // len(direct) if direct else 0
    for j, node in enumerate(direct):
        flags[node] = [int(v) for v in values[j * rows : (j + 1) * rows]]
    for node in nodes:
        if node not in flags:
            parent, other = flags[(node - 1) // 2], flags[node + 1 if node % 2 else node - 1]
            flags[node] = [
                int(mpz(p) * powmod(mpz(o), -1, n2) % n2)
                for p, o in zip(parent, other, strict=True)
            ]


def parent_flags(flags: dict[int, list[int]], direct: Sequence[int]) -> list[int]:
    """Each masked ciphertext's parent indicator (node-major, as ``boost_masked``)."""
    return [f for node in direct for f in flags[(node - 1) // 2]]


def _masked_pairs(
    key: PublicKey,
    cts: Sequence[int],
    masked: Sequence[int],
    flags: Sequence[int],
    parents: Sequence[int],
    gammas: tuple[int, int],
) -> list[tuple[int, int]]:
    """``(M·I^γ, M·C⁻¹·(I·u⁻¹)^γ·(J·u⁻¹)^γ')`` per masked ciphertext, ``u = 1 + n``.

    The first is an n-th residue when the row is out (``M``, ``I`` encrypt 0); the
    second when it is in: ``M`` encrypts the row, ``I`` and the parent's ``J`` encrypt 1,
    so a direct node's rows are a subset of its parent's.
    """
    n2 = mpz(key.nsquare)
    inverse = [powmod(mpz(c), -1, n2) for c in cts]
    g1, g2 = gammas
    shift = (1 - (g1 + g2) * key.n) % key.nsquare  # u^-(γ+γ')
    rows = len(cts)
    out = []
    for j, (m, i, parent) in enumerate(zip(masked, flags, parents, strict=True)):
        s0 = mpz(m) * powmod(mpz(i), g1, n2) % n2
        s1 = s0 * inverse[j % rows] % n2 * powmod(mpz(parent), g2, n2) % n2 * shift % n2
        out.append((int(s0), int(s1)))
    return out


def prove_masked(
    key: PrivateKey,
    tree: int,
    level: int,
    cts: Sequence[int],
    masked: Sequence[int],
    inside: Sequence[int],
    parents: Sequence[int],
    noise: Sequence[int] | None = None,
) -> BoostProof:
    """The Host's proof of one ``boost_masked``: ``inside`` holds each masked row's 0/1.

    ``parents``: each masked ciphertext's parent indicator (:func:`parent_flags`).
    """
    public = key.public_key
    rows = len(cts)
    flags = fresh.encrypt(public, inside, noise or _noise(key, len(inside)))
    ctx = context(tree, level, public.n)
    parts = [cts, masked, flags.values, parents]
    pairs = _masked_pairs(public, cts, masked, flags.values, parents, _gammas(ctx, parts))
    proofs = sigma.prove_or(key, pairs, list(inside), ctx, parts)
    counts, roots = [], []
    for start in range(0, len(masked), rows):
        count = sum(inside[start : start + rows])
        counts.append(count)
        roots.append(sigma.open_zero(key, _node_flags(public, flags.values, start, rows, count)))
    return _message(tree, level, flags, proofs, roots, np.array(counts, np.int64))


def _node_flags(key: PublicKey, flags: Sequence[int], start: int, rows: int, count: int) -> int:
    n2 = mpz(key.nsquare)
    acc = mpz(1)
    for f in flags[start : start + rows]:
        acc = acc * f % n2
    return int(acc * ((1 - count * key.n) % key.nsquare) % n2)


def verify_masked(
    key: PublicKey,
    proof: BoostProof,
    tree: int,
    level: int,
    cts: Sequence[int],
    masked: Sequence[int],
    parents: Sequence[int],
) -> list[int]:
    """The direct nodes' row counts a ``boost_masked`` proof opens; refuses a false one."""
    rows = len(cts)
    flags = proof.values.values
    nodes = len(masked) // rows if rows else 0
    if (proof.tree, proof.level) != (tree, level) or len(flags) != len(masked):
        _refuse(f"its proof of tree {tree} level {level} names other nodes")
    if len(proof.counts) != nodes or len(proof.roots) != nodes:
        _refuse(f"its proof of tree {tree} level {level} has the wrong size")
    key.check_ciphertexts(flags)
    ctx = context(tree, level, key.n)
    parts = [cts, masked, flags, parents]
    pairs = _masked_pairs(key, cts, masked, flags, parents, _gammas(ctx, parts))
    if not sigma.verify_or(key, pairs, _proofs(proof), ctx, parts):
        _refuse(
            f"a masked row of tree {tree} level {level} is neither [[0]] nor its row "
            f"within the parent node"
        )
    counts = [int(c) for c in proof.counts.tolist()]
    for j, (count, root) in enumerate(zip(counts, proof.roots.values, strict=True)):
        opened = _node_flags(key, flags, j * rows, rows, count)
        if not sigma.check_zero(key, opened, int(root)):
            _refuse(f"the row count it opened of tree {tree} level {level} is false")
    return counts


def _proofs(proof: BoostProof) -> sigma.OrProofs:
    return sigma.OrProofs(
        list(proof.commits.values), list(proof.split.values), list(proof.responses.values)
    )


def _message(
    tree: int,
    level: int,
    values: fresh.Fresh,
    proofs: sigma.OrProofs,
    roots: list[int],
    counts: np.ndarray,
) -> BoostProof:
    return BoostProof(
        tree=tree,
        level=level,
        values=values,
        commits=BigInts(tuple(proofs.commits)),
        split=BigInts(tuple(proofs.split)),
        responses=BigInts(tuple(proofs.responses)),
        roots=BigInts(tuple(roots)),
        counts=counts,
    )


def _refuse(what: str) -> None:
    raise ProtocolError(
        f"the host deviated from the protocol: {what} (host check); the session stops"
    )
