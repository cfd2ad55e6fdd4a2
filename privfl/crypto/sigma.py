"""Σ-protocols on Paillier ciphertexts: OR-proofs of n-th residuosity, made non-interactive.

A Paillier ciphertext ``X`` encrypts 0 exactly when it is an n-th residue mod ``n²``
(``X = r^n``). Every statement here is "one of ``X_0, X_1`` is an n-th residue" (CDS
OR-composition of the Guillou–Quisquater-style protocol ``a = u^n``, ``z = u·x^e``):

- ``E`` encrypts a bit: ``(E, E·(1+n)^-1)``;
- a masked ciphertext ``M`` is ``[[0]]`` or a re-randomisation of ``C``: ``(M, M·C^-1)``.

The prover holds the private key, so it needs no record of its obfuscators: it takes
the n-th root of the true branch with the primes (:func:`nth_root`). The challenge is
Fiat–Shamir: SHA-256 over a caller's context, the statements and every commitment, cut
into one ``CHALLENGE_BITS`` challenge per proof. Soundness does not rest on the prover
not knowing the factorisation: from two answers to one commitment,
``(z/z')^n = X^(e−e')`` with ``gcd(e−e', n) = 1`` gives an n-th root of ``X`` (any
prover, any key); a false statement passes with probability ``2^-128`` per hash query.

The verifier checks every proof at once with random small weights ``β`` from its own
CSPRNG: ``(Π z^β)^n = Π a^β·X^(eβ) mod n²``. Seen in ``Z_{n²}^* / (n-th residues) ≅
Z_n``, a batch that holds while some proof fails means ``Σ β_j c_j ≡ 0 (mod p)`` for a
non-zero ``c_j``: probability ``≤ 2^-(BATCH_BITS − 1)`` (odd ``β < 2^BATCH_BITS < p``).
"""

from __future__ import annotations

import hashlib
import math
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from privfl.crypto.gmp import mpz, powmod
from privfl.crypto.paillier import PrivateKey, PublicKey, _multi_exp, private_primes

CHALLENGE_BITS = 128
BATCH_BITS = 64
_CHALLENGE_MOD = 1 << CHALLENGE_BITS


@dataclass(frozen=True, slots=True)
class OrProofs:
    """Many 2-branch OR-proofs: per proof ``a_0, a_1`` (commitments), ``e_0``, ``z_0, z_1``.

    ``e_1 = e − e_0 mod 2^128`` with ``e`` the proof's Fiat–Shamir challenge.
    """

    commits: list[int]  # 2 per proof
    split: list[int]  # e_0 per proof
    responses: list[int]  # 2 per proof


class _Roots:
    """n-th roots of n-th residues for the key holder (CRT, exponent ``n⁻¹ mod (p−1)``)."""

    def __init__(self, key: PrivateKey) -> None:
        p, q = private_primes(key)
        self.n = key.public_key.n
        self.p, self.q = mpz(p), mpz(q)
        self.dp = powmod(self.n, -1, p - 1)
        self.dq = powmod(self.n, -1, q - 1)
        self.q_inv = powmod(q, -1, p)
        self.p2, self.q2 = self.p * self.p, self.q * self.q
        self.ep = powmod(self.n, 1, self.p2 - self.p)  # n mod φ(p²)
        self.eq = powmod(self.n, 1, self.q2 - self.q)
        self.q2_inv = powmod(self.q2, -1, self.p2)

    def root(self, x: Any) -> Any:
        rp = powmod(x % self.p, self.dp, self.p)
        rq = powmod(x % self.q, self.dq, self.q)
        return rq + self.q * ((rp - rq) * self.q_inv % self.p)

    def nth_power(self, u: Any) -> Any:
        """``u^n mod n²`` by CRT over ``p²`` and ``q²`` (about a third of a plain powmod)."""
        a = powmod(u, self.ep, self.p2)
        b = powmod(u, self.eq, self.q2)
        return b + self.q2 * ((a - b) * self.q2_inv % self.p2)


def nth_root(key: PrivateKey, x: int) -> int:
    """The n-th root ``r`` of an n-th residue ``x = r^n mod n²`` (key holder only)."""
    return int(_Roots(key).root(mpz(x)))


def challenges(context: bytes, parts: Iterable[Sequence[int]], count: int) -> list[int]:
    """``count`` Fiat–Shamir challenges of CHALLENGE_BITS from a hash of everything sent."""
    digest = hashlib.sha256(context)
    for part in parts:
        digest.update(len(part).to_bytes(8, "big"))
        for v in part:
            raw = int(v).to_bytes((int(v).bit_length() + 7) // 8 or 1, "big")
            digest.update(len(raw).to_bytes(4, "big") + raw)
    seed = digest.digest()
    out: list[int] = []
    block = 0
    while len(out) < count:
        stream = hashlib.shake_256(seed + block.to_bytes(8, "big")).digest(16 * 4096)
        out += [int.from_bytes(stream[i : i + 16], "big") for i in range(0, len(stream), 16)]
        block += 1
    return out[:count]


def _unit(n: Any) -> Any:
    """A CSPRNG unit of ``Z_n`` (a non-unit would factor ``n``: probability ~2^-1000)."""
    while True:
        u = mpz(secrets.randbelow(int(n) - 1) + 1)
        if math.gcd(int(u), int(n)) == 1:
            return u


def prove_or(
    key: PrivateKey,
    pairs: Sequence[tuple[int, int]],
    truth: Sequence[int],
    context: bytes,
    public_parts: Sequence[Sequence[int]] = (),
) -> OrProofs:
    """Prove, for each ``(X_0, X_1)``, that ``X_truth`` is an n-th residue (CSPRNG draws)."""
    roots = _Roots(key)
    n, n2 = mpz(key.public_key.n), mpz(key.public_key.nsquare)
    commits: list[int] = []
    state: list[tuple[Any, int, Any, Any]] = []  # real u, simulated e, z, root
    for (x0, x1), b in zip(pairs, truth, strict=True):
        xs = (mpz(x0), mpz(x1))
        u, e_sim, z_sim = _unit(n), secrets.randbits(CHALLENGE_BITS), _unit(n)
        a_real = roots.nth_power(u)
        # the simulated branch: a = z^n · X^-e, so that z^n = a · X^e holds
        a_sim = roots.nth_power(z_sim) * powmod(xs[1 - b], -e_sim, n2) % n2
        pair = (a_real, a_sim) if b == 0 else (a_sim, a_real)
        commits += [int(pair[0]), int(pair[1])]
        state.append((u, e_sim, z_sim, roots.root(xs[b])))
    flat = [v for pair in pairs for v in pair]
    es = challenges(context, [*public_parts, flat, commits], len(pairs))
    split: list[int] = []
    responses: list[int] = []
    for (u, e_sim, z_sim, root), b, e in zip(state, truth, es, strict=True):
        e_real = (e - e_sim) % _CHALLENGE_MOD
        z_real = u * powmod(root, e_real, n) % n
        split.append(e_real if b == 0 else e_sim)
        responses += [int(z_real), int(z_sim)] if b == 0 else [int(z_sim), int(z_real)]
    return OrProofs(commits, split, responses)


def verify_or(
    key: PublicKey,
    pairs: Sequence[tuple[int, int]],
    proofs: OrProofs,
    context: bytes,
    public_parts: Sequence[Sequence[int]] = (),
) -> bool:
    """Whether every OR-proof holds (one batched check; the weights from this CSPRNG)."""
    m = len(pairs)
    if not (len(proofs.commits) == len(proofs.responses) == 2 * m and len(proofs.split) == m):
        return False
    n, n2 = mpz(key.n), mpz(key.nsquare)
    if any(not 0 < a < key.nsquare for a in proofs.commits) or any(
        not 0 < z < key.n for z in proofs.responses
    ):
        return False
    if any(not 0 <= e < _CHALLENGE_MOD for e in proofs.split):
        return False
    flat = [v for pair in pairs for v in pair]
    es = challenges(context, [*public_parts, flat, proofs.commits], m)
    bases: list[Any] = []
    exps: list[int] = []
    zs: list[Any] = []
    weights: list[int] = []
    for j, ((x0, x1), e) in enumerate(zip(pairs, es, strict=True)):
        e0 = proofs.split[j]
        for x, ek, k in ((x0, e0, 0), (x1, (e - e0) % _CHALLENGE_MOD, 1)):
            beta = secrets.randbits(BATCH_BITS) | 1
            bases += [mpz(proofs.commits[2 * j + k]), mpz(x)]
            exps += [beta, ek * beta]
            zs.append(mpz(proofs.responses[2 * j + k]))
            weights.append(beta)
    left = powmod(_multi_exp(zs, weights, n), n, n2)
    return bool(left == _multi_exp(bases, exps, n2))


def open_zero(key: PrivateKey, x: int) -> int:
    """The root that shows ``x`` encrypts 0 (the opening :func:`check_zero` verifies)."""
    return nth_root(key, x)


def check_zero(key: PublicKey, x: int, root: int) -> bool:
    """Whether ``root^n = x mod n²``: ``x`` encrypts 0."""
    return 0 < root < key.n and int(powmod(mpz(root), key.n, key.nsquare)) == int(x) % key.nsquare
