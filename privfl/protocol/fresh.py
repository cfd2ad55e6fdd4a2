"""Fresh ciphertext vectors: the only ciphertexts a party may put on the wire (docs/protocol.md).

A ciphertext leaves a party freshly encrypted, or re-randomised by that party after
its last homomorphic operation. ``c · (1 + n·m)`` is not fresh: whoever knows ``c``
reads ``m`` (issue 11: every training label leaked that way through the residual).

The rule is structural:

- :class:`Fresh` is minted only by :func:`encrypt`, :func:`rerandomize` and
  :func:`mask` here (masking first, re-randomising last). It is immutable, and every
  homomorphic operation of :class:`~privfl.crypto.paillier.PublicKey` on it returns a
  plain list, so a Fresh vector's last operation is always its fresh randomness.
- :func:`require` runs on every send of a party's channel: each big-integer field of
  a message must be Fresh, unless it is named in :data:`NOT_CIPHERTEXTS` (plaintexts
  and PSI values). A message decoded from the wire holds plain ``BigInts``, so
  nothing received can be forwarded as it came.
- A Fresh vector goes on the wire once: two receivers get two independent
  re-randomisations, never the same ciphertexts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from privfl.crypto.gmp import mpz
from privfl.crypto.paillier import PublicKey
from privfl.errors import CryptoError
from privfl.protocol.boost_messages import BoostCandidates, BoostProof, BoostRevealed
from privfl.protocol.messages import BigInts, Decrypted, PsiAnswer, PsiQuery, PublicKeyMessage

_MINT = object()
"""Only this module holds the token that makes a Fresh vector."""

NOT_CIPHERTEXTS: frozenset[tuple[type, str]] = frozenset(
    {
        (Decrypted, "values"),  # the Server's plaintext residues
        (PsiQuery, "values"),  # RSA-blinded hashes or EC points, not Paillier ciphertexts
        (PsiAnswer, "values"),
        (PsiAnswer, "tags"),
        # the Host check's proof values: n-th residues, challenge shares, roots mod n
        (BoostProof, "commits"),
        (BoostProof, "split"),
        (BoostProof, "responses"),
        (BoostProof, "roots"),
        (BoostRevealed, "values"),  # a guest's decryptions, masked by the Host
        # a key's modulus proof: n-th roots of hash-derived points (crypto/modulus_proof.py)
        (PublicKeyMessage, "proof"),
        (BoostCandidates, "proof"),
    }
)
"""Big-integer message fields that are not Paillier ciphertexts; every other one must be Fresh."""


class StaleCiphertext(CryptoError):
    """This party was about to send a ciphertext it had not freshly randomised (a privfl bug)."""


class Fresh(BigInts):
    """Ciphertexts this party encrypted, or re-randomised after its last operation on them."""

    __slots__ = ("_sent",)
    _sent: bool

    def __init__(self, values: tuple[int, ...], *, mint: object = None) -> None:
        if mint is not _MINT:
            raise StaleCiphertext(
                "Fresh ciphertexts come only from privfl.protocol.fresh.encrypt, rerandomize "
                "or mask; re-randomise the vector before sending it"
            )
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "_sent", False)
        BigInts.__post_init__(self)

    @property
    def sent(self) -> bool:
        """Whether this vector went on the wire already (it may go only once)."""
        return self._sent

    def __reduce__(self) -> tuple[type[BigInts], tuple[tuple[int, ...]]]:
        """A copy is no longer fresh: it pickles as plain BigInts."""
        return BigInts, (self.values,)


def _mint(values: Sequence[int]) -> Fresh:
    return Fresh(tuple(map(int, values)), mint=_MINT)


def encrypt(key: PublicKey, plain: Sequence[int], noise: Sequence[int] | None = None) -> Fresh:
    """Encrypt residues with fresh obfuscators (``noise`` precomputed, e.g. by a NoisePool)."""
    if noise is None:
        noise = key.fresh_noise(len(plain))
    _check_noise(key, noise)
    return _mint(key.encrypt_with_noise(plain, noise))


def rerandomize(key: PublicKey, c: Sequence[int], noise: Sequence[int] | None = None) -> Fresh:
    """Multiply every ciphertext by a fresh obfuscator: same plaintexts, unlinkable values.

    Refuses an obfuscator ``≡ 1 (mod n)`` (1 itself, or ``1 + n·m``): it adds no
    randomness, and the result would be as readable as the input.
    """
    if noise is not None:
        _check_noise(key, noise)
    return _mint(key.rerandomize(c, noise))


def _check_noise(key: PublicKey, noise: Sequence[int]) -> None:
    n = mpz(key.n)  # gmpy2's remainder: a third of the time of Python's on 2048-bit values
    if any((mpz(r) - 1) % n == 0 for r in noise):
        raise StaleCiphertext(
            "an obfuscator is 1 mod n and hides nothing; take obfuscators from "
            "PublicKey.fresh_noise or a NoisePool"
        )


def mask(
    key: PublicKey, c: Sequence[int], noise: Sequence[int] | None = None
) -> tuple[Fresh, list[int]]:
    """Add uniform masks (CSPRNG), then re-randomise: ``(fresh masked ciphertexts, masks)``.

    Re-randomising last matters: ``c · (1 + n·R)`` alone would hand ``R`` to anyone
    who knows ``c``, and with it the masked value.
    """
    masked, masks = key.mask(c)
    return rerandomize(key, masked, noise), masks


def for_key_holder(key: PublicKey) -> PublicKey:
    """The key to re-randomise with when the result goes to the key's own holder: its ``n``
    with full-length ``r^n`` obfuscation, even in a DJN job (docs/security.md, SecureBoost).

    The holder knows the factors, so it can take the n-th root of any obfuscator: a
    ciphertext it receives shows it the product of every obfuscator that went into it.
    A fresh ``r^n`` with ``r`` uniform over Z_n* makes that product uniform; DJN's
    ``h_s^a`` lies in ``<h>``, which the holder chose, and leaves it the product modulo
    ``<h>`` — with an ``h`` of small order, which no peer can test, all of it.
    """
    return PublicKey(key.n) if key.h_s else key


def require(body: object) -> None:
    """Refuse to send ``body`` unless each of its ciphertext fields is Fresh and unsent.

    Marks them sent, so the same Fresh vector never goes to a second receiver.
    """
    if not dataclasses.is_dataclass(body):
        return
    vectors: list[Fresh] = []
    for f in dataclasses.fields(body):
        value = getattr(body, f.name)
        if not isinstance(value, BigInts) or (type(body), f.name) in NOT_CIPHERTEXTS:
            continue
        what = f"{type(body).__name__}.{f.name}"
        if not isinstance(value, Fresh):
            raise StaleCiphertext(
                f"{what} is not freshly encrypted or re-randomised by this party; "
                "pass it through privfl.protocol.fresh before sending (a privfl bug: report it)"
            )
        if value.sent:
            raise StaleCiphertext(
                f"{what} was sent once already; re-randomise it again for another receiver"
            )
        vectors.append(value)
    for value in vectors:
        object.__setattr__(value, "_sent", True)
