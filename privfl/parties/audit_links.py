"""The link digest: one value per message that its sender and its receiver both record.

Each party's payload digest (``hmac_sha256``) is keyed by a key only that party
holds, so two logs cannot be compared by it. The link digest is keyed by a key
both ends of a link can compute and nobody else can: the X25519 Diffie–Hellman of
our CURVE secret key and the peer's CURVE public key (the keys the job's key folder
already holds), bound to the session by HMAC. ``privfl audit verify`` matches every
``sent`` line of one log with a ``received`` (or ``refused``) line of the peer's by it,
without any key; a reader of the logs still cannot test guesses about a payload.
"""

from __future__ import annotations

import hashlib
import hmac

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from zmq.utils import z85

from privfl.protocol.keys import KeyRing

LABEL = b"privfl audit link v1\x00"


def link_key(secret_z85: bytes, peer_public_z85: bytes, session: str) -> bytes:
    """The key of our link to one peer in ``session`` (the peer computes the same)."""
    ours = X25519PrivateKey.from_private_bytes(z85.decode(secret_z85))
    shared = ours.exchange(X25519PublicKey.from_public_bytes(z85.decode(peer_public_z85)))
    return hmac.new(shared, LABEL + session.encode(), hashlib.sha256).digest()


def link_keys(ring: KeyRing, session: str) -> dict[str, bytes]:
    """Our link key to every peer in ``ring``, for ``session``."""
    return {peer: link_key(ring.secret, public, session) for peer, public in ring.peers.items()}


def link_digest(key: bytes, frames: list[bytes]) -> str:
    """HMAC-SHA256 (hex) of every frame of one message, each prefixed by its length."""
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for frame in frames:
        mac.update(len(frame).to_bytes(8, "big"))
        mac.update(frame)
    return mac.hexdigest()
