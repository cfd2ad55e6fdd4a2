"""ECDH PSI maths on X25519 (no I/O): ``[a][b]H(x) = [b][a]H(x)``.

``H`` maps an id to a Montgomery u-coordinate (SHA-512, reduced mod 2^255 − 19). The
point lies on Curve25519 or on its twist; both groups have a large prime-order
subgroup and X25519's clamped scalars clear the small cofactors, and Curve25519 is
twist-secure, so exponentiation by a secret scalar is a commutative keyed hash in
either case. The scalar multiplications are the ``cryptography`` package's X25519.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from privfl.errors import ProtocolError

P25519 = 2**255 - 19
Secret = X25519PrivateKey


def new_secret() -> X25519PrivateKey:
    """A fresh secret scalar for one session."""
    return X25519PrivateKey.generate()


def hash_to_u(ids: Sequence[str], context: bytes) -> list[int]:
    """``H(id)`` as a u-coordinate in [0, p)."""
    return [
        int.from_bytes(hashlib.sha512(context + b"\0" + i.encode()).digest(), "little") % P25519
        for i in ids
    ]


def multiply(secret: X25519PrivateKey, points: Sequence[int]) -> list[int]:
    """``[k]u`` for each u-coordinate (the shared-secret function of X25519)."""
    out = []
    for u in points:
        if not 0 <= u < P25519:
            raise ProtocolError("an ECDH PSI value is not a field element")
        try:
            shared = secret.exchange(X25519PublicKey.from_public_bytes(u.to_bytes(32, "little")))
        except ValueError as exc:  # a low-order point: never produced by hashing
            raise ProtocolError("an ECDH PSI value is a low-order point") from exc
        out.append(int.from_bytes(shared, "little"))
    return out
