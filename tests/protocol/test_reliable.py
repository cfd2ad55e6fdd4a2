"""The reliable layer: chunking ≤ 1 MiB, ACK + resend, de-duplication, reassembly limits."""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Sequence
from typing import Any

import pytest

from privfl.protocol.memory import InMemoryHub, InMemoryTransport
from privfl.protocol.reliable import (
    ACK,
    CHUNK_BYTES,
    DATA,
    MAX_CHUNKS,
    ReliableTransport,
    link_header,
    pack_frames,
    unpack_frames,
)
from privfl.protocol.transport import ZmqTransport, free_tcp_endpoints


class Lossy:
    """Wraps an in-memory transport; ``drop(frames)`` decides which link messages vanish."""

    def __init__(self, inner: InMemoryTransport, drop: Any) -> None:
        self.name = inner.name
        self.inner = inner
        self.drop = drop
        self.dropped = 0

    def send(self, peer: str, frames: Sequence[bytes]) -> None:
        if self.drop(frames):
            self.dropped += 1
            return
        self.inner.send(peer, frames)

    def try_send(self, peer: str, frames: Sequence[bytes]) -> bool:
        self.send(peer, frames)
        return True

    def recv(self, timeout: float) -> tuple[str, list[bytes]] | None:
        return self.inner.recv(timeout)

    def close(self) -> None:
        self.inner.close()


def kind(frames: Sequence[bytes]) -> int:
    return frames[0][3]


def pair(hub: InMemoryHub, drop_a: Any = None, **kwargs: Any) -> tuple[ReliableTransport, ...]:
    a = Lossy(hub.transport("a"), drop_a or (lambda f: False))
    b = Lossy(hub.transport("b"), lambda f: False)
    kwargs.setdefault("flush_seconds", 0.0)
    return ReliableTransport(a, **kwargs), ReliableTransport(b, **kwargs)


def test_a_large_message_travels_in_chunks_of_at_most_one_mib() -> None:
    hub = InMemoryHub()
    a, b = pair(hub)
    body = os.urandom(3 * CHUNK_BYTES + 5)

    a.send("b", [b"header", body])
    got = b.recv(1.0)
    a.recv(0.05)  # takes in the ACK

    assert got == ("a", [b"header", body])
    data = [s for s in hub.sent if kind(s.frames) == DATA]
    assert len(data) == 4 and all(len(f) <= CHUNK_BYTES for s in data for f in s.frames)
    assert a.unacked() == 0


def test_lost_messages_are_resent_and_delivered_once() -> None:
    hub = InMemoryHub()
    sent_once: set[bytes] = set()

    def first_copy_lost(frames: Sequence[bytes]) -> bool:
        if kind(frames) != DATA or frames[0] in sent_once:
            return False
        sent_once.add(frames[0])
        return True

    a, b = pair(hub, first_copy_lost, retry_after=0.05)
    for i in range(5):
        a.send("b", [b"h", str(i).encode()])
    got = []
    for _ in range(5):
        a.recv(0.1)  # a resends while it waits
        message = b.recv(1.0)
        assert message is not None
        got.append(message[1][1])

    assert sorted(got) == [b"0", b"1", b"2", b"3", b"4"]
    assert b.recv(0.3) is None  # no duplicate reaches the application
    a.recv(0.2)
    assert a.unacked() == 0


def test_duplicates_and_lost_acks_deliver_exactly_once() -> None:
    hub = InMemoryHub()
    acks_lost = {"n": 0}

    def lose_first_ack(frames: Sequence[bytes]) -> bool:
        if kind(frames) == ACK and acks_lost["n"] == 0:
            acks_lost["n"] = 1
            return True
        return False

    a, b = pair(hub, retry_after=0.05)
    b._inner = Lossy(b._inner.inner, lose_first_ack)  # type: ignore[attr-defined]
    a.send("b", [b"h", b"once"])

    first = b.recv(1.0)
    a.recv(0.2)  # no ACK came: a resends
    again = b.recv(0.3)  # the resend is a duplicate: ACKed, not delivered
    a.recv(0.2)

    assert first == ("a", [b"h", b"once"]) and again is None
    assert a.unacked() == 0


class Unconnected(Lossy):
    """A link to ``a`` that is not up yet for the first ``refusals`` sends (try_send False)."""

    def __init__(self, inner: InMemoryTransport, refusals: int) -> None:
        super().__init__(inner, lambda f: False)
        self.refusals = refusals

    def try_send(self, peer: str, frames: Sequence[bytes]) -> bool:
        if self.refusals:
            self.refusals -= 1
            return False
        return super().try_send(peer, frames)


def test_an_ack_the_link_could_not_take_goes_out_once_it_can_not_at_the_resend() -> None:
    # Prepare: b's link to a is still being made when a's first message arrives.
    hub = InMemoryHub()
    a, b = pair(hub, retry_after=30.0)  # a resend would come far too late
    b._inner = Unconnected(b._inner.inner, refusals=1)  # type: ignore[attr-defined]
    a.send("b", [b"h", b"hello"])

    # Act: b reads (its ACK is refused), then reads on; a takes in what came
    first = b.recv(1.0)
    b.recv(0.05)
    a.recv(0.05)

    # Assert: the ACK owed went out on b's next read, without a's resend
    assert first == ("a", [b"h", b"hello"])
    assert a.unacked() == 0
    assert len([s for s in hub.sent if kind(s.frames) == DATA]) == 1


def test_a_restarted_sender_is_not_mistaken_for_a_duplicate() -> None:
    hub = InMemoryHub()
    a, b = pair(hub)
    a.send("b", [b"h", b"first life"])
    assert b.recv(1.0) == ("a", [b"h", b"first life"])
    a.close()

    reborn = ReliableTransport(Lossy(hub.transport("a"), lambda f: False), flush_seconds=0.0)
    reborn.send("b", [b"h", b"second life"])  # sequence number 1 again

    assert b.recv(1.0) == ("a", [b"h", b"second life"])


@pytest.mark.parametrize(
    "frames",
    [
        [b"short", b""],
        [b"XX" + bytes(26), b""],
        [link_header(DATA, 1, 1, 0, MAX_CHUNKS + 1), b"x"],
        [link_header(DATA, 1, 1, 5, 5), b"x"],
        [link_header(DATA, 1, 1, 0, 1), b"\x00\x00\x00\x09"],
        [link_header(DATA, 1, 1, 0, 1), b"\x00\x00\x00\x01\xff\xff\xff\xff"],
        [link_header(DATA, 1, 0, 0, 1), pack_frames([b"x"])],
        [b"only one frame"],
    ],
)
def test_malformed_link_frames_are_refused_and_logged(
    frames: list[bytes], caplog: pytest.LogCaptureFixture
) -> None:
    hub = InMemoryHub()
    raw = hub.transport("a")
    receiver = ReliableTransport(hub.transport("b"), flush_seconds=0.0)

    with caplog.at_level(logging.WARNING, logger="privfl.protocol.reliable"):
        raw.send("b", frames)
        got = receiver.recv(0.2)

    assert got is None
    assert "refused link frames from a" in caplog.text


def test_chunks_disagreeing_on_the_count_are_refused() -> None:
    hub = InMemoryHub()
    raw = hub.transport("a")
    receiver = ReliableTransport(hub.transport("b"), flush_seconds=0.0)

    raw.send("b", [link_header(DATA, 7, 1, 0, 2), b"x"])
    raw.send("b", [link_header(DATA, 7, 1, 1, 3), b"y"])

    assert receiver.recv(0.2) is None
    assert receiver._partial["a"] == {}


def test_frame_packing_round_trips_and_rejects_truncation() -> None:
    frames = [b"", b"a", os.urandom(1000)]
    blob = pack_frames(frames)

    assert unpack_frames(blob) == frames
    for cut in (0, 3, 5, len(blob) - 1):
        with pytest.raises(Exception, match="link payload"):
            unpack_frames(blob[:cut])
    with pytest.raises(Exception, match="trailing"):
        unpack_frames(blob + b"!")
    with pytest.raises(Exception, match="claims"):
        unpack_frames(struct.pack(">I", 10_000))


def test_zmq_inbox_drops_frames_over_the_limit() -> None:
    import zmq

    from privfl.protocol.keys import KeyRing

    a_pub, a_sec = zmq.curve_keypair()
    b_pub, b_sec = zmq.curve_keypair()
    a_ep, b_ep = free_tcp_endpoints(2)
    ring_a = KeyRing("a", a_pub, a_sec, {"b": b_pub})
    ring_b = KeyRing("b", b_pub, b_sec, {"a": a_pub})
    with (
        ZmqTransport("a", a_ep, {"b": b_ep}, ring_a, linger_ms=0) as a,
        ZmqTransport("b", b_ep, {"a": a_ep}, ring_b, linger_ms=0, max_frame=1000) as b,
    ):
        a.send("b", [b"x" * 2000])
        assert b.recv(0.7) is None
        a.send("b", [b"x" * 500])  # the connection is re-established; small frames pass
        assert b.recv(5.0) == ("a", [b"x" * 500])
