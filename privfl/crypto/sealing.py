"""Reports sealed end to end for the aggregator: X25519 ECIES, HKDF-SHA256, ChaCha20-Poly1305.

A sealed report is ``ephemeral public key (32) ‖ nonce (12) ‖ AEAD(token ‖ payload)``,
bound to the session and round as associated data. Every sealed report of a
round has the same length, so the Shuffler learns nothing from sizes either.
The validity token is the round's random token from the aggregator; the
Shuffler's dummies carry random tokens and are dropped by the aggregator.
"""

from __future__ import annotations

import hmac
import os
import struct

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

TOKEN_BYTES = 32  # one single-use report token (issued by the aggregator, spent at the Shuffler)


INFO = b"privfl hfl report v1"
OVERHEAD = 32 + 12 + 16


def new_report_key() -> tuple[X25519PrivateKey, bytes]:
    """A fresh per-session key pair of the aggregator; returns (private, raw public bytes)."""
    private = X25519PrivateKey.generate()
    public = private.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    return private, public


def _aad(session: str, round_: int) -> bytes:
    return session.encode() + struct.pack(">Q", round_)


def _key(shared: bytes, ephemeral: bytes, recipient: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=ephemeral + recipient, info=INFO).derive(
        shared
    )


def seal(report: np.ndarray, token: bytes, recipient: bytes, session: str, round_: int) -> bytes:
    """Encrypt ``token ‖ float32 report`` for the holder of the ``recipient`` X25519 key."""
    ephemeral = X25519PrivateKey.generate()
    eph_public = ephemeral.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    shared = ephemeral.exchange(X25519PublicKey.from_public_bytes(recipient))
    nonce = os.urandom(12)
    plain = token + np.ascontiguousarray(report, dtype="<f4").tobytes()
    sealed = ChaCha20Poly1305(_key(shared, eph_public, recipient)).encrypt(
        nonce, plain, _aad(session, round_)
    )
    return eph_public + nonce + sealed


def open_sealed(
    blob: bytes, private: X25519PrivateKey, token: bytes, session: str, round_: int, dims: int
) -> np.ndarray | None:
    """The report inside ``blob`` if it decrypts with the round's token and size; else None."""
    if len(blob) != OVERHEAD + TOKEN_BYTES + 4 * dims:
        return None
    recipient = private.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    eph_public, nonce, sealed = blob[:32], blob[32:44], blob[44:]
    try:
        shared = private.exchange(X25519PublicKey.from_public_bytes(eph_public))
        plain = ChaCha20Poly1305(_key(shared, eph_public, recipient)).decrypt(
            nonce, sealed, _aad(session, round_)
        )
    except (InvalidTag, ValueError):
        return None
    if not hmac.compare_digest(plain[:TOKEN_BYTES], token):
        return None
    # NaN or ±∞ open here; the aggregator refuses and counts them with out-of-range reports
    return np.frombuffer(plain[TOKEN_BYTES:], dtype="<f4").astype(np.float32)


def sealed_size(dims: int) -> int:
    return OVERHEAD + TOKEN_BYTES + 4 * dims
