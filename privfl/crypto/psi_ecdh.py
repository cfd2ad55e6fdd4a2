"""ECDH PSI maths over ristretto255 (no I/O): ``[a][b]H(x) = [b][a]H(x)``.

ristretto255 (RFC 9496) is a group of prime order ℓ ≈ 2^252 built on Curve25519:
every valid encoding is a group element and there is no cofactor, no twist and no
invalid-curve point to send. ``H`` is the RFC's hash-to-group, libsodium's
``crypto_core_ristretto255_from_hash`` applied to SHA-512(context ‖ 0 ‖ id): two
Elligator maps added, so ``H`` behaves as a random oracle into the group. Exponentiation
by a secret scalar is then a keyed pseudorandom function (DDH), and nothing about an
id survives it — unlike a hash straight to an X25519 u-coordinate, whose curve-or-twist
bit does. All group operations are libsodium's, through the ``rbcl`` bindings.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import rbcl

from privfl.errors import ProtocolError

POINT_BYTES = 32  # a canonical ristretto255 encoding, sent as a little-endian integer


@dataclass(frozen=True, slots=True)
class Secret:
    """A scalar in [1, ℓ) for one session; never sent, never written."""

    scalar: bytes

    def __repr__(self) -> str:
        return "Secret(hidden)"


def new_secret() -> Secret:
    """A fresh uniform non-zero scalar from libsodium's CSPRNG."""
    return Secret(rbcl.crypto_core_ristretto255_scalar_random())


def hash_to_group(ids: Sequence[str], context: bytes) -> list[int]:
    """``H(id)``: the encoding of a uniform-looking group element, as an integer."""
    return [
        int.from_bytes(
            rbcl.crypto_core_ristretto255_from_hash(
                hashlib.sha512(context + b"\0" + i.encode()).digest()
            ),
            "little",
        )
        for i in ids
    ]


def is_element(value: int) -> bool:
    """Whether ``value`` is the canonical encoding of a group element other than identity."""
    if not 0 < value < 1 << (8 * POINT_BYTES):
        return False
    return bool(rbcl.crypto_core_ristretto255_is_valid_point(value.to_bytes(POINT_BYTES, "little")))


def multiply(secret: Secret, points: Sequence[int]) -> list[int]:
    """``[k]P`` for each encoded element; a value that is not one is a ProtocolError."""
    out = []
    for value in points:
        if not is_element(value):
            raise ProtocolError("an ECDH PSI value is not a ristretto255 group element")
        try:
            product = rbcl.crypto_scalarmult_ristretto255(
                secret.scalar, value.to_bytes(POINT_BYTES, "little")
            )
        except (RuntimeError, ValueError) as exc:  # the identity: never from a valid input
            raise ProtocolError("an ECDH PSI product is the identity element") from exc
        out.append(int.from_bytes(product, "little"))
    return out
