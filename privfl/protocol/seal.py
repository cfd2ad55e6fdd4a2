"""End-to-end sealing between two parties: what a relay carries, and cannot read or alter.

CURVE protects one hop: a relay in the middle (protocol/relayed.py) would see and could
change every frame. So each frame set one party sends another through a relay is sealed
for its recipient with the two parties' own long-term CURVE keys (Curve25519, the same
keys the job's key folder holds): the X25519 shared key of libsodium's ``crypto_box``
(``Box.shared_key``), used with XChaCha20-Poly1305 (a random 24-byte nonce per message,
safe to draw at random at this nonce size). The associated data binds the job (session
id and fingerprint), the direction (sender, recipient) and the *run*: each transport draws
a fresh 16-byte session nonce from the OS CSPRNG, and every seal carries and binds both
ends' nonces. The sealed part starts with a per-direction sequence number, from 1, which
the recipient requires to grow strictly.

Why the run nonces: the job's session id is the kit's, the same in every run of it
(``--resume``, ``--overwrite``, every ``vfl predict`` session), and sequence numbers
restart with each process. Without them a frame sealed in one run opens in the next.
Each side learns the other's nonce from a sealed *announcement* (sequence number 0,
empty payload) sent when the peer comes up; a data seal names the recipient's nonce, so
it opens only in the recipient's current run, and the sender's, which the recipient pins
at first sight, so a restarted sender (numbers from 1 again) is refused too.

What that leaves the relay (docs/security.md): a flipped bit, a forged or redirected
message fails to open; a replayed or reordered one arrives with a number already passed;
one from another run names a session nonce that is not the run's.
Either is a ProtocolError that names the relay. A *dropped* message leaves a gap, which is
allowed: ZeroMQ drops what sits in a dying connection, and the reliable layer above
resends it under a new number; a relay that keeps dropping only stalls the run until the
liveness checks or the timeout end it. Wire layout: docs/protocol.md §11.
"""

from __future__ import annotations

import secrets
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

SEAL_LABEL = b"privfl-seal/2"
NONCE_BYTES = crypto_aead_xchacha20poly1305_ietf_NPUBBYTES  # 24
RUN_NONCE_BYTES = 16  # a session nonce per transport: 2^-128 to repeat one
UNKNOWN = bytes(RUN_NONCE_BYTES)  # "I do not know your nonce yet": announcements only
TAG_BYTES = 16
_SEQ = struct.Struct(">Q")
OVERHEAD = 2 * RUN_NONCE_BYTES + NONCE_BYTES + _SEQ.size + TAG_BYTES  # 80


class SealBroken(ProtocolError):
    """A sealed message did not open, or came out of sequence: somebody on the way tampered."""


def raw_key(z85_key: bytes) -> bytes:
    """The 32 raw bytes of a 40-character z85 CURVE key."""
    return bytes(z85.decode(z85_key))


def asks_for_nonce(sealed: bytes) -> bool:
    """Whether an (opened) announcement says its sender does not know our nonce yet."""
    return sealed[RUN_NONCE_BYTES : 2 * RUN_NONCE_BYTES] == UNKNOWN


def associated_data(
    context: bytes, sender: str, recipient: str, sender_nonce: bytes, recipient_nonce: bytes
) -> bytes:
    """What each seal authenticates besides its content: the job, the direction, the run."""
    head = b"\0".join([SEAL_LABEL, context, sender.encode(), recipient.encode()])
    return head + b"\0" + sender_nonce + recipient_nonce


def seal_frame(
    key: bytes,
    context: bytes,
    ends: tuple[str, str, bytes, bytes],
    seq: int,
    payload: bytes,
    nonce: bytes,
) -> bytes:
    """``sender_nonce ‖ recipient_nonce ‖ nonce ‖ AEAD(seq ‖ payload)`` (docs/protocol.md §15).

    ``ends``: sender, recipient and their session nonces. Pure: the golden vector's maker.
    """
    sender, recipient, ours, theirs = ends
    aad = associated_data(context, sender, recipient, ours, theirs)
    box = crypto_aead_xchacha20poly1305_ietf_encrypt(_SEQ.pack(seq) + payload, aad, nonce, key)
    return ours + theirs + nonce + box


class Sealer:
    """Seals for and opens from each peer, keeping one sequence number per direction.

    ``context``: the session id and job fingerprint (every party of the run agrees on them).
    ``secret``: our z85 CURVE secret key; ``peers``: name → z85 public key. ``nonce``:
    this run's session nonce; None draws a fresh one (a fixed one is the leaky arm of the
    cross-run replay test: seals that bind only the kit).
    """

    def __init__(
        self,
        name: str,
        secret: bytes,
        peers: Mapping[str, bytes],
        context: bytes,
        *,
        nonce: bytes | None = None,
    ) -> None:
        self.name = name
        self.context = context
        self.nonce = secrets.token_bytes(RUN_NONCE_BYTES) if nonce is None else nonce
        if len(self.nonce) != RUN_NONCE_BYTES or self.nonce == UNKNOWN:
            raise ValueError(f"a session nonce is {RUN_NONCE_BYTES} bytes, not all zero")
        own = PrivateKey(raw_key(secret))
        self._keys = {p: Box(own, PublicKey(raw_key(k))).shared_key() for p, k in peers.items()}
        self._theirs: dict[str, bytes] = {}  # each peer's session nonce, pinned at first sight
        self._sent: dict[str, int] = {}
        self._received: dict[str, int] = {}

    def knows(self, peer: str) -> bool:
        """Whether we have ``peer``'s session nonce, so that we can seal data for it."""
        return peer in self._theirs

    def announce(self, peer: str) -> bytes:
        """Our session nonce for ``peer`` (sequence number 0, no payload); repeatable."""
        return self._seal(peer, 0, b"", self._theirs.get(peer, UNKNOWN))

    def seal(self, peer: str, payload: bytes) -> bytes:
        """``nonces ‖ nonce ‖ AEAD(seq ‖ payload)`` for ``peer``, under the next number."""
        theirs = self._theirs.get(peer)
        if theirs is None:
            raise ProtocolError(f"{self.name} cannot seal for {peer} before its announcement")
        seq = self._sent.get(peer, 0) + 1
        self._sent[peer] = seq
        return self._seal(peer, seq, payload, theirs)

    def _seal(self, peer: str, seq: int, payload: bytes, theirs: bytes) -> bytes:
        ends = (self.name, peer, self.nonce, theirs)
        return seal_frame(
            self._key(peer), self.context, ends, seq, payload, nacl_random(NONCE_BYTES)
        )

    def open(self, peer: str, sealed: bytes) -> bytes | None:
        """The payload ``peer`` sealed for us, or None for an announcement.

        SealBroken if it fails to open, belongs to another run (of ours or of the
        peer's), or is not newer than the last one.
        """
        if len(sealed) < OVERHEAD:
            raise SealBroken(f"a sealed message from {peer} is {len(sealed)} bytes, too short")
        theirs, ours = sealed[:RUN_NONCE_BYTES], sealed[RUN_NONCE_BYTES : 2 * RUN_NONCE_BYTES]
        body = sealed[2 * RUN_NONCE_BYTES :]
        aad = associated_data(self.context, peer, self.name, theirs, ours)
        try:
            plain = crypto_aead_xchacha20poly1305_ietf_decrypt(
                body[NONCE_BYTES:], aad, body[:NONCE_BYTES], self._key(peer)
            )
        except NaclCryptoError as exc:
            raise SealBroken(f"a message from {peer} failed to open") from exc
        (seq,) = _SEQ.unpack_from(plain)
        self._check_run(peer, seq, theirs, ours)
        if seq == 0:
            return None
        last = self._received.get(peer, 0)
        if seq <= last:
            raise SealBroken(
                f"a message from {peer} came out of sequence (number {seq} after {last})"
            )
        self._received[peer] = seq
        return plain[_SEQ.size :]

    def _check_run(self, peer: str, seq: int, theirs: bytes, ours: bytes) -> None:
        if ours != self.nonce and not (seq == 0 and ours == UNKNOWN):
            raise SealBroken(
                f"a message from {peer} was sealed for another run (not this run's session nonce)"
            )
        pinned = self._theirs.setdefault(peer, theirs)
        if pinned != theirs:
            raise SealBroken(
                f"a message from {peer} came from another run of {peer} (its session nonce "
                f"changed; or {peer} was started twice)"
            )

    def _key(self, peer: str) -> bytes:
        key = self._keys.get(peer)
        if key is None:
            raise ProtocolError(f"{self.name} has no public key for {peer!r}")
        return key
