"""Several encrypted values per Paillier plaintext, for values that are only decrypted.

A party that asks the Server to decrypt ``k`` ciphertexts pays ``k`` decryptions at the
Server and ``k`` fresh obfuscations to re-randomise them. When the values are small —
every masked gradient and score is a fixed-point number below ``2^BOUND_BITS`` — one
plaintext of a 2048-bit key holds 21 of them side by side::

    P = Σ_i (v_i + 2^BOUND_BITS) · 2^(SLOT_BITS·i)        (every slot is non-negative)

computed under encryption by Horner's rule (``SLOT_BITS`` squarings per value, about
0.4 ms at 2048 bits, against a 2.5 ms decryption and a 9 ms obfuscation saved). The packed
ciphertext is then masked like any other: the Server sees ``P + R mod n`` with ``R``
uniform over Z_n, so packing changes nothing about what it learns.

Slots have headroom for summing up to MAX_TERMS packed vectors (the guests' scores) and
a guard bit on top; a value outside ``|v| < 2^BOUND_BITS`` (a diverged model) is caught
by :func:`unpack`, which raises instead of returning a wrong number.
"""

from __future__ import annotations

from collections.abc import Sequence

from privfl.crypto.gmp import mpz as _mpz
from privfl.crypto.gmp import powmod as _powmod
from privfl.crypto.paillier import PublicKey
from privfl.errors import CryptoError

BOUND_BITS = 88
"""Every packed value satisfies ``|v| < 2^88``: a gradient at 2^-48 up to 2^40 ≈ 1e12."""

MAX_TERMS = 32
"""Packed vectors of up to 32 parties (one per guest) may be summed slot by slot."""

SLOT_BITS = BOUND_BITS + 1 + MAX_TERMS.bit_length()
"""A sum of MAX_TERMS offset values ``v + 2^BOUND_BITS`` fits below the slot's guard bit."""

_OFFSET = 1 << BOUND_BITS


def slots(n: int) -> int:
    """Values per plaintext for modulus ``n`` (21 at 2048 bits, 5 at 512, 2 at 256)."""
    # Every packed P stays below 2^(bits - 1) <= n, so it is never reduced mod n.
    return max(1, (n.bit_length() - 1) // SLOT_BITS)


def packed_length(count: int, n: int) -> int:
    """How many ciphertexts ``count`` values pack into."""
    per = slots(n)
    return -(-count // per)


def pack_plain(residues: Sequence[int], n: int) -> list[int]:
    """Pack signed fixed-point residues mod ``n`` into plaintexts, before encryption.

    A party that only ever needs these values summed with other parties' and decrypted
    (evaluation scores) encrypts ``slots(n)`` times fewer plaintexts this way.
    """
    per = slots(n)
    out: list[int] = []
    for start in range(0, len(residues), per):
        total = 0
        for i, r in enumerate(residues[start : start + per]):
            v = int(r) if r <= n // 2 else int(r) - n
            if not -_OFFSET < v < _OFFSET:
                raise _overflow()
            total |= (v + _OFFSET) << (SLOT_BITS * i)
        out.append(total)
    return out


def pack(key: PublicKey, c: Sequence[int]) -> list[int]:
    """Pack ciphertexts of signed fixed-point residues, ``slots(n)`` per output ciphertext.

    Not re-randomised: the result is a deterministic function of ``c``; call
    :meth:`PublicKey.rerandomize` (or mask) before it leaves the party.
    """
    per, n2 = slots(key.n), _mpz(key.nsquare)
    shift = _mpz(1) << SLOT_BITS
    out: list[int] = []
    for start in range(0, len(c), per):
        group = c[start : start + per]
        acc = _mpz(group[-1])
        for ci in reversed(group[:-1]):
            acc = _powmod(acc, shift, n2) * ci % n2
        # One plain addition puts the offset into every slot of the group at once.
        offsets = sum(_OFFSET << (SLOT_BITS * i) for i in range(len(group)))
        out.append(int(acc * (1 + key.n * offsets) % n2))
    return out


def unpack(packed: Sequence[int], count: int, n: int, terms: int = 1) -> list[int]:
    """The ``count`` residues mod ``n`` behind decrypted packed plaintexts (see :func:`pack`).

    ``terms`` is how many packed vectors were summed slot by slot (each brought an offset).
    """
    per = slots(n)
    if not 1 <= terms <= MAX_TERMS:
        raise CryptoError(f"at most {MAX_TERMS} packed vectors can be summed, got {terms}")
    offset, bound = terms * _OFFSET, terms * _OFFSET
    if len(packed) != packed_length(count, n):
        raise CryptoError(f"{len(packed)} packed values cannot hold {count} values")
    mask = (1 << SLOT_BITS) - 1
    out: list[int] = []
    for index, value in enumerate(packed):
        here = min(per, count - index * per)
        if int(value) >> (SLOT_BITS * here):
            raise _overflow()
        for i in range(here):
            v = ((int(value) >> (SLOT_BITS * i)) & mask) - offset
            if not -bound < v < bound:
                raise _overflow()
            out.append(v % n)
    return out


def _overflow() -> CryptoError:
    return CryptoError(
        f"a packed value left the range |v| < 2^{BOUND_BITS}: the model diverged or the "
        "peer's message is corrupt; lower training.learning_rate"
    )
