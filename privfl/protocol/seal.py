"""End-to-end sealing between two parties: what a relay carries, and cannot read or alter.

CURVE protects one hop: a relay in the middle (protocol/relayed.py) would see and could
change every frame. So each frame set one party sends another through a relay is sealed
for its recipient with the two parties' own long-term CURVE keys (Curve25519, the same
keys the job's key folder holds): the X25519 shared key of libsodium's ``crypto_box``
(``Box.shared_key``), used with XChaCha20-Poly1305 (a random 24-byte nonce per message,
safe to draw at random at this nonce size). The associated data binds the job (session
id and fingerprint) and the direction (sender, recipient); the sealed part starts with a
per-direction sequence number, from 1, which the recipient requires to grow strictly.

What that leaves the relay (docs/security.md): a flipped bit, a forged or redirected
message fails to open; a replayed or reordered one arrives with a number already passed.
Either is a ProtocolError that names the relay. A *dropped* message leaves a gap, which is
allowed: ZeroMQ drops what sits in a dying connection, and the reliable layer above
resends it under a new number; a relay that keeps dropping only stalls the run until the
liveness checks or the timeout end it. Wire layout: docs/protocol.md §11.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

from nacl.bindings import (
    crypto_aead_xchacha20poly1305_ietf_decrypt,
    crypto_aead_xchacha20poly1305_ietf_encrypt,
    crypto_aead_xchacha20poly1305_ietf_NPUBBYTES,
)
from nacl.exceptions import CryptoError as NaclCryptoError
from nacl.public import Box, PrivateKey, PublicKey
from nacl.utils import random as nacl_random
from zmq.utils import z85

from privfl.errors import ProtocolError

SEAL_LABEL = b"privfl-seal/1"
NONCE_BYTES = crypto_aead_xchacha20poly1305_ietf_NPUBBYTES  # 24
TAG_BYTES = 16
_SEQ = struct.Struct(">Q")
OVERHEAD = NONCE_BYTES + _SEQ.size + TAG_BYTES


class SealBroken(ProtocolError):
    """A sealed message did not open, or came out of sequence: somebody on the way tampered."""


def raw_key(z85_key: bytes) -> bytes:
    """The 32 raw bytes of a 40-character z85 CURVE key."""
    return bytes(z85.decode(z85_key))


def associated_data(context: bytes, sender: str, recipient: str) -> bytes:
    """What each seal authenticates besides its content: the job and the direction."""
    return b"\0".join([SEAL_LABEL, context, sender.encode(), recipient.encode()])


class Sealer:
    """Seals for and opens from each peer, keeping one sequence number per direction.

    ``context``: the session id and job fingerprint (every party of the run agrees on them).
    ``secret``: our z85 CURVE secret key; ``peers``: name → z85 public key.
    """

    def __init__(
        self, name: str, secret: bytes, peers: Mapping[str, bytes], context: bytes
    ) -> None:
        self.name = name
        self.context = context
        own = PrivateKey(raw_key(secret))
        self._keys = {p: Box(own, PublicKey(raw_key(k))).shared_key() for p, k in peers.items()}
        self._sent: dict[str, int] = {}
        self._received: dict[str, int] = {}

    def seal(self, peer: str, payload: bytes) -> bytes:
        """``nonce ‖ AEAD(seq ‖ payload)`` for ``peer``, under the next sequence number."""
        seq = self._sent.get(peer, 0) + 1
        self._sent[peer] = seq
        nonce = nacl_random(NONCE_BYTES)
        aad = associated_data(self.context, self.name, peer)
        box = crypto_aead_xchacha20poly1305_ietf_encrypt(
            _SEQ.pack(seq) + payload, aad, nonce, self._key(peer)
        )
        return nonce + box

    def open(self, peer: str, sealed: bytes) -> bytes:
        """The payload ``peer`` sealed for us; SealBroken if it fails to open or is not newer."""
        if len(sealed) < OVERHEAD:
            raise SealBroken(f"a sealed message from {peer} is {len(sealed)} bytes, too short")
        aad = associated_data(self.context, peer, self.name)
        try:
            plain = crypto_aead_xchacha20poly1305_ietf_decrypt(
                sealed[NONCE_BYTES:], aad, sealed[:NONCE_BYTES], self._key(peer)
            )
        except NaclCryptoError as exc:
            raise SealBroken(f"a message from {peer} failed to open") from exc
        (seq,) = _SEQ.unpack_from(plain)
        last = self._received.get(peer, 0)
        if seq <= last:
            raise SealBroken(
                f"a message from {peer} came out of sequence (number {seq} after {last})"
            )
        self._received[peer] = seq
        return plain[_SEQ.size :]

    def _key(self, peer: str) -> bytes:
        key = self._keys.get(peer)
        if key is None:
            raise ProtocolError(f"{self.name} has no public key for {peer!r}")
        return key
