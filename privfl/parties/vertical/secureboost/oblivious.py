"""Oblivious split selection (hidden instance space): the guest never learns which split won.

Once per job a guest sends its *candidate* left sets — for each column ``c`` of its
own and bin ``b < bins − 1``, in that order (candidate ``c·(bins − 1) + b``), the rows
with bin ≤ ``b`` — as bit vectors over the training rows followed by the held-out rows,
encrypted under a Paillier key of its own. A vector of ``n`` bits takes
``count = ⌈n / (key_bits − PAD − 2)⌉`` plaintexts of ``per = ⌈n / count⌉`` bits each;
above a plaintext's bits sit ``key_bits − per − 2 ≥ PAD`` uniform bits (OS CSPRNG).

When the Host picks the guest's candidate ``i`` at a node it adds a fresh encryption
of a uniform mask ``R_j mod N_g`` to each of ``i``'s ciphertexts and asks the guest to
decrypt them (``boost_reveal``); the guest returns ``m_j + R_j mod N_g``, uniform to it,
and the Host subtracts ``R_j`` and reads the low ``per`` bits. Every guest gets such a
request for every split node (a dummy, a fresh encryption of a uniform value, where
another party won): what the guest sees does not depend on the winner.

Why the pad: the Host may send any combination ``Σ a_k·[[m_k]]`` instead. Its plaintext
is ``Σ a_k x_k + 2^per · Σ a_k r_k mod N``; for any ``a_k`` that is a unit mod ``N``,
``2^per·a_k·r_k`` runs injectively over ``2^(key_bits − per − 2)`` values, so the
decryption's entropy given the guest's data is at least that many bits, and it tells
at most ``log2 N − (key_bits − per − 2) ≤ per + 2`` bits about the guest's data: one
vector's worth per plaintext, what the Host could read before by naming any (column, bin).

Every start of a training job sends the same plaintexts and asks the same requests: the
guest keeps its key and a pad seed per job, the Host a mask seed per job (both drawn
from the OS CSPRNG once, expanded here by SHAKE-256, the masks keyed by tree, node and
pick), so a split node grown again after a restart with the same pick decrypts to the
value the guest answered before, which it can hold the Host to (ledger.py).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence

import numpy as np

from privfl.crypto.paillier import PublicKey
from privfl.errors import ProtocolError
from privfl.protocol import fresh

PAD = 128  # uniform bits above each plaintext's row bits, at least
SEED_BYTES = 32  # a pad or mask seed (OS CSPRNG)


def shape(rows: int, key_bits: int) -> tuple[int, int]:
    """``(per, count)``: row bits per plaintext and plaintexts per candidate."""
    most = key_bits - PAD - 2
    count = max(1, -(-rows // most))
    return -(-rows // count), count


def candidate(column: int, bin_: int, bins: int) -> int:
    """A candidate's index: columns in order, bins ``0 … bins − 2`` within each."""
    return column * (bins - 1) + bin_


def candidate_sets(binned: np.ndarray, bins: int) -> np.ndarray:
    """``(columns·(bins − 1), rows)`` bool: each candidate's left set over ``binned``'s rows."""
    cuts = np.arange(bins - 1)
    left: np.ndarray = binned.T[:, None, :] <= cuts[None, :, None]
    return left.reshape(-1, binned.shape[0])


def expand(seed: bytes, label: str, context: Sequence[int], bits: int) -> int:
    """``bits`` bits of SHAKE-256 over a seed, a label and integers: a seed's stream."""
    head = f"privfl oblivious {label}\0".encode() + seed
    parts = [v.to_bytes(max(1, -(-v.bit_length() // 8)), "big") for v in context]
    body = b"".join(len(p).to_bytes(4, "big") + p for p in parts)  # unambiguous: lengths
    raw = hashlib.shake_256(head + body).digest(-(-bits // 8))
    return int.from_bytes(raw, "big") >> (8 * len(raw) - bits)


def pack(left: np.ndarray, key_bits: int, seed: bytes | None = None) -> list[int]:
    """Each row of ``left`` as ``count`` padded plaintexts, candidate-major.

    The pads are OS CSPRNG bits, or with a ``seed`` (itself OS CSPRNG, kept per job)
    its stream, the same plaintexts at every start of the job.
    """
    rows = left.shape[1]
    per, count = shape(rows, key_bits)
    pad = key_bits - per - 2
    out: list[int] = []
    for i, vector in enumerate(left):
        for j in range(count):
            chunk = np.packbits(vector[j * per : (j + 1) * per], bitorder="little")
            high = secrets.randbits(pad) if seed is None else expand(seed, "pad", (i, j), pad)
            out.append(int.from_bytes(chunk.tobytes(), "little") | high << per)
    return out


def masks(
    seed: bytes | None, n: int, tree: int, node: int, pick: int | None, count: int
) -> list[int]:
    """A request's masks, uniform mod ``n``: OS CSPRNG, or with the Host's per-job ``seed``
    its stream for this key, tree, node and pick (128 bits beyond ``n``: bias below 2^-128).

    Keyed by the pick too: a node asked again with the same pick (an honest restart)
    decrypts as before; with another (new labels or data) to a value independent of the
    first, so a guest that decrypts both cannot subtract them to learn either pick.
    """
    if seed is None:
        return [secrets.randbelow(n) for _ in range(count)]
    bits = n.bit_length() + 128
    chosen = 0 if pick is None else pick + 1
    return [expand(seed, "mask", (n, tree, node, chosen, j), bits) % n for j in range(count)]


def unpack(plain: Sequence[int], rows: int, key_bits: int) -> np.ndarray:
    """One candidate's left set from its ``count`` (unmasked) plaintexts."""
    per, count = shape(rows, key_bits)
    if len(plain) != count:
        raise ProtocolError(f"{len(plain)} plaintexts for a set of {rows} rows, expected {count}")
    out = np.zeros(rows, np.bool_)
    for j, m in enumerate(plain):
        size = min(per, rows - j * per)
        raw = (m & ((1 << size) - 1)).to_bytes((size + 7) // 8, "little")
        out[j * per : j * per + size] = np.unpackbits(
            np.frombuffer(raw, np.uint8), count=size, bitorder="little"
        ).astype(np.bool_)
    return out


def masked_request(
    key: PublicKey, sets: Sequence[int] | None, count: int, mask: Sequence[int] | None = None
) -> tuple[fresh.Fresh, list[int]]:
    """``(ciphertexts, masks)``: the chosen set's ciphertexts plus uniform ``R_j`` mod N,
    re-randomised; for a dummy (``sets`` None) fresh ``[[R_j]]`` alone. The masks are
    ``mask`` (:func:`masks`) or CSPRNG draws.

    Always with full-length ``r^n`` (:func:`fresh.for_key_holder`): the guest holds this
    key's factors, and under its own DJN ``h_s`` it could tell its candidate's obfuscator
    in the reply, and so which candidate won (docs/security.md, ``boost_reveal``)."""
    key = fresh.for_key_holder(key)
    drawn = list(mask) if mask is not None else masks(None, key.n, 0, 0, None, count)
    if len(drawn) != count:
        raise ValueError(f"{len(drawn)} masks for a request of {count} ciphertexts")
    if sets is None:
        return fresh.encrypt(key, drawn), drawn
    return fresh.rerandomize(key, key.add_plain(list(sets), drawn)), drawn
