"""Reliable delivery over any Transport: ACKs, retransmission, de-duplication, 1 MiB chunks.

ZeroMQ drops whatever sits in a connection's pipe when that connection dies,
and one huge frame can starve heartbeats on a slow link. This layer sits
between the Channel and the socket transport: every message is serialised,
cut into chunks of at most ``CHUNK_BYTES`` and sent as link frames
``[link header (28 bytes), chunk]``. The receiver reassembles (with limits on
size, chunk count and unfinished messages), hands the message up once, and
ACKs it; the sender resends unacknowledged messages with exponential backoff.
Duplicates — a resend whose ACK was lost — are ACKed again and dropped.

Link header (big-endian): magic ``b"PL"``, version (1 byte), type (1 byte:
1 = DATA, 2 = ACK), incarnation (8 bytes, random per sender process, so a
restarted sender's sequence numbers are not mistaken for duplicates), sequence
number (8 bytes, per peer, from 1), chunk index and chunk count (4 bytes each).
An ACK echoes the incarnation and sequence number of the DATA it acknowledges.
"""

from __future__ import annotations

import logging
import secrets
import struct
import time
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from privfl.errors import PeerUnavailable, ProtocolError
from privfl.protocol.transport import Closeable, Transport, ZmqTransport, should_log

log = logging.getLogger("privfl.protocol.reliable")

CHUNK_BYTES = 1024 * 1024
MAX_MESSAGE_BYTES = 80 * 1024 * 1024  # the codec's 64 MiB body plus headroom
MAX_CHUNKS = -(-MAX_MESSAGE_BYTES // CHUNK_BYTES)
MAX_PARTIAL = 8  # unfinished messages kept per peer; the oldest is dropped beyond
MAX_PARTIAL_BYTES = MAX_MESSAGE_BYTES  # and at most this many bytes of them per peer
MAX_UNACKED = 4096  # messages kept for resending per peer
UNSENT_RETRY = 0.05  # a best-effort send (an Abort) that could not go out is retried this soon
MAX_OWED = 4096  # ACKs kept per peer while its link is still being made
CLOSE_LINGER_MS = 500
MAGIC, LINK_VERSION = b"PL", 1
DATA, ACK = 1, 2
_LINK = struct.Struct(">2sBBQQII")
LINK_HEADER_BYTES = _LINK.size


class LinkTransport(Transport, Protocol):
    """A Transport that can also try a send without waiting (for resends)."""

    def try_send(self, peer: str, frames: Sequence[bytes]) -> bool:
        """Send if it can be done now; False if not (peer down, queue full)."""
        ...


@dataclass
class _Outgoing:
    chunks: list[list[bytes]]
    due: float
    backoff: float
    first_sent: float = field(default_factory=time.monotonic)


@dataclass
class _Partial:
    count: int
    chunks: dict[int, bytes] = field(default_factory=dict)
    size: int = 0


def pack_frames(frames: Sequence[bytes]) -> bytes:
    """``u32 count`` then ``u32 length + bytes`` per frame."""
    parts = [struct.pack(">I", len(frames))]
    for frame in frames:
        parts += [struct.pack(">I", len(frame)), bytes(frame)]
    return b"".join(parts)


def unpack_frames(blob: bytes) -> list[bytes]:
    """Inverse of pack_frames; ProtocolError on anything malformed."""
    if len(blob) < 4:
        raise ProtocolError("link payload too short")
    (count,) = struct.unpack_from(">I", blob)
    offset, frames = 4, []
    if count > 64:
        raise ProtocolError(f"link payload claims {count} frames")
    for _ in range(count):
        if offset + 4 > len(blob):
            raise ProtocolError("link payload truncated")
        (length,) = struct.unpack_from(">I", blob, offset)
        offset += 4
        if offset + length > len(blob):
            raise ProtocolError("link payload truncated")
        frames.append(blob[offset : offset + length])
        offset += length
    if offset != len(blob):
        raise ProtocolError("trailing bytes after the link payload")
    return frames


def link_header(kind: int, incarnation: int, seq: int, index: int = 0, count: int = 0) -> bytes:
    """One 28-byte link header."""
    return _LINK.pack(MAGIC, LINK_VERSION, kind, incarnation, seq, index, count)


class ReliableTransport(Closeable):
    """Transport with ACK, resend, de-duplication and chunking on top of a LinkTransport."""

    def __init__(
        self,
        inner: LinkTransport,
        *,
        retry_after: float = 2.0,
        max_backoff: float = 30.0,
        flush_seconds: float = 1.0,
    ) -> None:
        self.name = inner.name
        self._inner = inner
        self._incarnation = secrets.randbits(64)
        self._retry_after = retry_after
        self._max_backoff = max_backoff
        self._flush_seconds = flush_seconds
        self._next_seq: dict[str, int] = {}
        self._unacked: dict[str, OrderedDict[int, _Outgoing]] = {}
        self._partial: dict[str, OrderedDict[tuple[int, int], _Partial]] = {}
        self._delivered: dict[str, OrderedDict[int, set[int]]] = {}
        self._closed = False
        self._refused = 0
        # ACKs a link not yet up could not take (the peer's first messages came before our
        # connection to it): sent as soon as it takes them, not left to the peer's resend.
        self._owed: dict[str, deque[tuple[int, int]]] = {}

    # --- sending ---------------------------------------------------------------

    def send(self, peer: str, frames: Sequence[bytes]) -> None:
        """Chunk and send one message; it is resent until the peer ACKs it."""
        self._send(peer, frames, wait=True)

    def try_send(self, peer: str, frames: Sequence[bytes]) -> bool:
        """Like send, but never waits for a connection (for best-effort Aborts)."""
        return self._send(peer, frames, wait=False)

    def _send(self, peer: str, frames: Sequence[bytes], *, wait: bool) -> bool:
        if not frames:
            raise ValueError("a message needs at least one frame")
        blob = pack_frames(frames)
        if len(blob) > MAX_MESSAGE_BYTES:
            raise ProtocolError(f"a {len(blob)}-byte message exceeds {MAX_MESSAGE_BYTES} bytes")
        seq = self._next_seq.get(peer, 1)
        self._next_seq[peer] = seq + 1
        pieces = [blob[i : i + CHUNK_BYTES] for i in range(0, len(blob), CHUNK_BYTES)]
        chunks = [
            [link_header(DATA, self._incarnation, seq, i, len(pieces)), piece]
            for i, piece in enumerate(pieces)
        ]
        sent = True
        for chunk in chunks:
            if wait:
                self._inner.send(peer, chunk)
            else:
                sent = self._inner.try_send(peer, chunk) and sent
        # A message that could not go out at all (the connection to a peer that
        # just started is still being made) is retried at once, not after seconds.
        retry = self._retry_after if sent else UNSENT_RETRY
        pending = self._unacked.setdefault(peer, OrderedDict())
        pending[seq] = _Outgoing(chunks, time.monotonic() + retry, retry)
        if len(pending) > MAX_UNACKED:
            dropped, _ = pending.popitem(last=False)
            log.warning("%s: gave up resending message %d to %s", self.name, dropped, peer)
        return sent

    def _resend_due(self) -> float:
        """Resend what is overdue; return seconds until the next resend is due."""
        now = time.monotonic()
        soonest = self._max_backoff
        for peer, pending in self._unacked.items():
            for seq, out in pending.items():
                if out.due <= now:
                    if all(self._inner.try_send(peer, chunk) for chunk in out.chunks):
                        log.debug("%s: resent message %d to %s", self.name, seq, peer)
                    out.backoff = min(out.backoff * 2, self._max_backoff)
                    out.due = now + out.backoff
                soonest = min(soonest, out.due - now)
        return max(soonest, 0.0)

    def unacked(self) -> int:
        """How many sent messages still wait for their ACK."""
        return sum(len(p) for p in self._unacked.values())

    def unacked_to(self, peer: str) -> int:
        """How many messages sent to ``peer`` still wait for its ACK."""
        return len(self._unacked.get(peer, ()))

    def _recent_unacked(self) -> bool:
        """Whether a recent send waits for its ACK from a peer that may still send one."""
        cutoff = time.monotonic() - 2 * self._flush_seconds
        lost = self.lost_peers()
        pending = (
            out
            for peer, queue in self._unacked.items()
            if peer not in lost
            for out in queue.values()
        )
        return any(out.first_sent > cutoff for out in pending)

    def silent_peers(self, older_than: float) -> dict[str, float]:
        """Peers that left a message unacknowledged for over ``older_than`` s, and for how long.

        A peer that is alive ACKs within milliseconds of its next receive; one
        that does not for seconds is down, hung or cut off — the likely culprit
        when a wait times out, even if we were waiting for somebody else.
        """
        now = time.monotonic()
        silent = {}
        for peer, pending in self._unacked.items():
            if pending:
                age = now - min(out.first_sent for out in pending.values())
                if age > older_than:
                    silent[peer] = age
        return silent

    def lost_peers(self) -> dict[str, float]:
        """Peers whose connection is gone past the grace (if the inner transport can tell)."""
        lost = getattr(self._inner, "lost_peers", None)
        return lost() if lost is not None else {}

    def unproven_peers(self) -> dict[str, tuple[str, bool]]:
        """Peers whose endpoint fails every CURVE handshake (if the inner transport can tell)."""
        unproven = getattr(self._inner, "unproven_peers", None)
        return unproven() if unproven is not None else {}

    def unconnected_peers(self) -> dict[str, str]:
        """Peers whose connection never came up, with their endpoints (if the inner can tell)."""
        unconnected = getattr(self._inner, "unconnected_peers", None)
        return unconnected() if unconnected is not None else {}

    def connected(self, peer: str) -> bool:
        """Whether the inner transport has a connection to ``peer`` (True if it cannot tell)."""
        connected = getattr(self._inner, "connected", None)
        return connected(peer) if connected is not None else True

    @property
    def grace(self) -> float | None:
        """The inner transport's liveness grace, if it has one."""
        return getattr(self._inner, "grace", None)

    # --- receiving -------------------------------------------------------------

    def recv(self, timeout: float) -> tuple[str, list[bytes]] | None:
        """The next complete, new message, or None after ``timeout`` seconds."""
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            wait = min(self._resend_due(), deadline - time.monotonic())
            if self._owed and not self._pay_owed():
                wait = min(wait, UNSENT_RETRY)
            got = self._inner.recv(max(0.0, wait))
            if got is not None:
                message = self._on_link(*got)
                if message is not None:
                    return message
            if time.monotonic() >= deadline:
                return None

    def _on_link(self, peer: str, frames: list[bytes]) -> tuple[str, list[bytes]] | None:
        try:
            if len(frames) != 2 or len(frames[0]) != LINK_HEADER_BYTES:
                raise ProtocolError("not a link frame pair")
            magic, version, kind, inc, seq, index, count = _LINK.unpack(frames[0])
            if magic != MAGIC or version != LINK_VERSION or kind not in (DATA, ACK) or seq < 1:
                raise ProtocolError("bad link header")
            if kind == ACK:
                if inc == self._incarnation:
                    self._unacked.get(peer, OrderedDict()).pop(seq, None)
                return None
            return self._on_data(peer, inc, seq, index, count, frames[1])
        except ProtocolError as exc:
            self._refused += 1
            if should_log(self._refused):
                log.warning(
                    "%s: refused link frames from %s (%d so far): %s",
                    self.name,
                    peer,
                    self._refused,
                    exc,
                )
            return None

    def _on_data(
        self, peer: str, inc: int, seq: int, index: int, count: int, chunk: bytes
    ) -> tuple[str, list[bytes]] | None:
        seen = self._delivered.setdefault(peer, OrderedDict()).setdefault(inc, set())
        self._delivered[peer].move_to_end(inc)
        while len(self._delivered[peer]) > 4:  # forget the oldest incarnations of a peer
            self._delivered[peer].popitem(last=False)
        if seq in seen:
            self._ack(peer, inc, seq)  # our first ACK was lost
            return None
        if not 1 <= count <= MAX_CHUNKS or index >= count or len(chunk) > CHUNK_BYTES:
            raise ProtocolError(f"chunk {index} of {count} ({len(chunk)} bytes) is out of range")
        partials = self._partial.setdefault(peer, OrderedDict())
        part = partials.setdefault((inc, seq), _Partial(count))
        if part.count != count:
            del partials[(inc, seq)]
            raise ProtocolError("chunks of one message disagree on the chunk count")
        if index not in part.chunks:
            part.chunks[index] = bytes(chunk)
            part.size += len(chunk)
        while len(partials) > MAX_PARTIAL or sum(p.size for p in partials.values()) > (
            MAX_PARTIAL_BYTES
        ):
            dropped, _ = partials.popitem(last=False)
            log.warning("%s: dropped an unfinished message from %s", self.name, peer)
            if dropped == (inc, seq):
                return None
        if len(part.chunks) < count:
            return None
        del partials[(inc, seq)]
        frames = unpack_frames(b"".join(part.chunks[i] for i in range(count)))
        seen.add(seq)
        if len(seen) > 1_000_000:
            seen.clear()
        self._ack(peer, inc, seq)
        return peer, frames

    def _ack(self, peer: str, inc: int, seq: int) -> None:
        if self._owed.get(peer) or not self._inner.try_send(
            peer, [link_header(ACK, inc, seq), b""]
        ):
            log.debug("%s: could not ACK message %d of %s now", self.name, seq, peer)
            self._owed.setdefault(peer, deque(maxlen=MAX_OWED)).append((inc, seq))

    def _pay_owed(self) -> bool:
        """Send the ACKs owed while each link takes them; whether none is left."""
        for peer, owed in list(self._owed.items()):
            while owed and self._inner.try_send(peer, [link_header(ACK, *owed[0]), b""]):
                owed.popleft()
            if not owed:
                del self._owed[peer]
        return not self._owed

    def close(self) -> None:
        """Wait up to ``flush_seconds`` for outstanding ACKs, then close the inner transport.

        What is still unacknowledged then is for a peer that does not answer, so
        the sockets linger only briefly instead of their full linger time.
        """
        if self._closed:
            return
        self._closed = True
        deadline = time.monotonic() + self._flush_seconds
        try:
            # Only recent sends (a Finish, an Abort) are worth waiting for: a peer
            # that has not ACKed for longer is gone and would only delay our exit.
            # They are resent meanwhile: an Abort to a peer whose connection was
            # still being made when we failed must reach it all the same.
            while self._recent_unacked() and (left := deadline - time.monotonic()) > 0:
                self._pay_owed()
                wait = min(left, self._resend_due(), UNSENT_RETRY)
                got = self._inner.recv(wait)
                if got is not None:
                    self._on_link(*got)
        except PeerUnavailable:
            pass
        finally:
            if isinstance(self._inner, ZmqTransport):
                self._inner.close(linger_ms=CLOSE_LINGER_MS)
            else:
                self._inner.close()
