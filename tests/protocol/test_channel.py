"""Tests for the Channel over the in-memory hub: delivery, buffering, refusals, aborts, timeouts."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from privfl.errors import ConfigError, PeerAborted, PeerUnavailable, ProtocolError
from privfl.protocol import codec
from privfl.protocol.channel import Channel
from privfl.protocol.memory import InMemoryHub, InMemoryTransport
from privfl.protocol.messages import (
    PROTOCOL,
    VERSION,
    Abort,
    Batch,
    Finish,
    Header,
    Hello,
    Kind,
    Message,
    kind_of,
)

SESSION = "job-1"
QUICK = 1.0  # seconds; messages are already queued, so anything that waits this long failed


class Net:
    """A hub with alice, bob and carol; bob is the channel under test."""

    def __init__(self) -> None:
        self.hub = InMemoryHub()
        self.transports: dict[str, InMemoryTransport] = {
            name: self.hub.transport(name) for name in ("alice", "bob", "carol")
        }
        self.channels = {
            name: Channel(t, session=SESSION, timeout=QUICK) for name, t in self.transports.items()
        }

    def raw(self, sender: str, receiver: str, frames: list[bytes]) -> None:
        """Put frames on the wire from `sender`'s transport, bypassing its channel."""
        self.transports[sender].send(receiver, frames)

    def close(self) -> None:
        for t in self.transports.values():
            t.close()


@pytest.fixture
def net() -> Iterator[Net]:
    network = Net()
    yield network
    network.close()


def _hello(rows: int = 10) -> Hello:
    return Hello(role="guest", job_fingerprint="f00d", rows=rows, features=3)


def _frames(body: Message, **overrides: Any) -> list[bytes]:
    """Frames alice -> bob with a crafted envelope; ids from 1000 stay clear of the channel's."""
    fields: dict[str, Any] = {
        "protocol": PROTOCOL,
        "version": VERSION,
        "session": SESSION,
        "sender": "alice",
        "receiver": "bob",
        "round": 0,
        "msg_id": 1000,
        "kind": kind_of(body),
    }
    return codec.encode(Header(**{**fields, **overrides}), body)


def _refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "privfl.channel" and r.levelno == logging.WARNING
    ]


# ---------------------------------------------------------------- delivery


def test_sent_message_arrives_typed_with_its_sender(net: Net) -> None:
    # Prepare
    alice, bob = net.channels["alice"], net.channels["bob"]
    indices = np.array([4, 0, 2], dtype=np.int64)

    # Act
    alice.send("bob", Batch(epoch=3, batch=1, n_batches=2, indices=indices), round_=3)
    env = bob.expect({Kind.BATCH}, {"alice"}, timeout=QUICK)

    # Assert
    assert env.sender == "alice"
    assert isinstance(env.body, Batch)
    assert (env.body.epoch, env.body.batch, env.body.n_batches) == (3, 1, 2)
    assert np.array_equal(env.body.indices, indices)
    header = env.header
    assert (header.session, header.sender, header.receiver) == (SESSION, "alice", "bob")
    assert (header.round, header.kind, header.msg_id) == (3, Kind.BATCH, 1)


def test_message_ids_count_up_per_channel(net: Net) -> None:
    # Act
    for _ in range(3):
        net.channels["alice"].send("bob", _hello())
    ids = [net.channels["bob"].expect({Kind.HELLO}, {"alice"}).header.msg_id for _ in range(3)]

    # Assert
    assert ids == [1, 2, 3]


def test_expect_buffers_other_messages_and_returns_them_in_order(net: Net) -> None:
    # Prepare: alice races ahead with three messages before carol's hello.
    alice, carol, bob = net.channels["alice"], net.channels["carol"], net.channels["bob"]
    alice.send("bob", Finish(epochs=1, reason="first"))
    alice.send("bob", _hello(rows=1))
    alice.send("bob", Finish(epochs=2, reason="second"))
    carol.send("bob", _hello(rows=2))

    # Act
    from_carol = bob.expect({Kind.HELLO}, {"carol"}, timeout=QUICK)
    first = bob.expect({Kind.FINISH}, {"alice"}, timeout=QUICK)
    second = bob.expect({Kind.FINISH}, {"alice"}, timeout=QUICK)
    hello = bob.expect({Kind.HELLO, Kind.ABORT}, {"alice", "carol"}, timeout=QUICK)

    # Assert
    assert from_carol.sender == "carol" and from_carol.body == _hello(rows=2)
    assert [first.body, second.body] == [Finish(1, "first"), Finish(2, "second")]
    assert hello.sender == "alice" and hello.body == _hello(rows=1)
    with pytest.raises(PeerUnavailable):  # everything buffered was handed out exactly once
        bob.expect({Kind.HELLO, Kind.FINISH}, {"alice", "carol"}, timeout=0.05)


def test_gather_collects_one_message_per_sender_in_any_order(net: Net) -> None:
    # Prepare: carol first, and an unrelated Finish from alice in between.
    net.channels["carol"].send("bob", _hello(rows=2))
    net.channels["alice"].send("bob", Finish(epochs=0, reason="early"))
    net.channels["alice"].send("bob", _hello(rows=1))
    net.channels["carol"].send("bob", _hello(rows=3))  # a second one stays buffered

    # Act
    got = net.channels["bob"].gather(Kind.HELLO, ["alice", "carol"])

    # Assert
    assert got == {"alice": _hello(rows=1), "carol": _hello(rows=2)}
    bob = net.channels["bob"]
    assert bob.expect({Kind.FINISH}, {"alice"}, timeout=QUICK).body == Finish(0, "early")
    assert bob.expect({Kind.HELLO}, {"carol"}, timeout=QUICK).body == _hello(rows=3)


# ---------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("frames", "reason"),
    [
        (_frames(_hello(), session="job-2"), "session"),
        (_frames(_hello(), receiver="carol"), "envelope says"),
        (_frames(_hello(), sender="carol"), "envelope says"),
        (_frames(Batch(epoch=2, batch=0, n_batches=1, indices=None), round=0), "round"),
        (_frames(_hello(), protocol="fate", session="job-2"), "we speak"),
        (_frames(_hello(), version=VERSION + 1, sender="carol"), "we speak"),
        ([b"garbage", b"more garbage"], "malformed"),
        ([b"one frame"], "2 frames"),
        ([*_frames(_hello()), b"extra"], "2 frames"),
        ([_frames(_hello())[0], b"\x81\xa4role\xa5guest"], "exactly the fields"),
    ],
    ids=[
        "session",
        "receiver",
        "sender",
        "round-vs-epoch",
        "protocol-other-session",
        "version-other-sender",
        "garbage",
        "one-frame",
        "three-frames",
        "bad-body",
    ],
)
def test_bad_messages_are_dropped_with_a_warning(
    net: Net, caplog: pytest.LogCaptureFixture, frames: list[bytes], reason: str
) -> None:
    # Prepare: a bad message, then a valid one.
    caplog.set_level(logging.WARNING, logger="privfl.channel")
    net.raw("alice", "bob", frames)
    net.channels["alice"].send("bob", _hello(rows=7))

    # Act
    env = net.channels["bob"].expect({Kind.HELLO, Kind.BATCH}, {"alice", "carol"}, timeout=QUICK)

    # Assert: the valid one is delivered, the bad one logged once and not buffered.
    assert env.body == _hello(rows=7)
    refusals = _refusals(caplog)
    assert len(refusals) == 1 and reason in refusals[0], refusals
    assert "alice" in refusals[0]
    with pytest.raises(PeerUnavailable):
        net.channels["bob"].expect({Kind.HELLO, Kind.BATCH}, {"alice", "carol"}, timeout=0.05)


@pytest.mark.parametrize(
    ("protocol", "version"), [(PROTOCOL, VERSION - 1), (PROTOCOL, VERSION + 1), ("fate", VERSION)]
)
def test_a_peer_of_another_version_ends_the_session_naming_both(
    net: Net, protocol: str, version: int
) -> None:
    """Its own session and sender: a peer running another release, not a stray frame."""
    net.raw("alice", "bob", _frames(_hello(), protocol=protocol, version=version))

    with pytest.raises(ProtocolError, match="same protocol version") as caught:
        net.channels["bob"].expect({Kind.HELLO}, {"alice"}, timeout=QUICK)

    assert f"alice speaks protocol {protocol!r} v{version}" in str(caught.value)
    assert f"this party speaks {PROTOCOL} v{VERSION}" in str(caught.value)


def test_matching_round_and_epoch_is_accepted(net: Net) -> None:
    # Prepare: the positive control for the round-vs-epoch refusal.
    net.raw("alice", "bob", _frames(Batch(epoch=2, batch=0, n_batches=1, indices=None), round=2))

    # Act
    env = net.channels["bob"].expect({Kind.BATCH}, {"alice"}, timeout=QUICK)

    # Assert
    assert env.header.round == 2 and env.body == Batch(2, 0, 1, None)


def test_duplicate_message_id_is_dropped(net: Net, caplog: pytest.LogCaptureFixture) -> None:
    # Prepare: the same id twice (a replay), then a fresh id.
    caplog.set_level(logging.WARNING, logger="privfl.channel")
    frames = _frames(Finish(epochs=1, reason="once"), msg_id=1000)
    net.raw("alice", "bob", frames)
    net.raw("alice", "bob", frames)
    net.raw("alice", "bob", _frames(Finish(epochs=2, reason="next"), msg_id=1001))
    bob = net.channels["bob"]

    # Act
    first = bob.expect({Kind.FINISH}, {"alice"}, timeout=QUICK)
    second = bob.expect({Kind.FINISH}, {"alice"}, timeout=QUICK)

    # Assert
    assert [first.body, second.body] == [Finish(1, "once"), Finish(2, "next")]
    refusals = _refusals(caplog)
    assert len(refusals) == 1 and "duplicate message id 1000" in refusals[0]


def test_same_id_from_different_senders_is_not_a_duplicate(net: Net) -> None:
    # Prepare: ids are per sender; alice and carol both start at 1.
    net.channels["alice"].send("bob", _hello(rows=1))
    net.channels["carol"].send("bob", _hello(rows=2))

    # Act
    got = net.channels["bob"].gather(Kind.HELLO, ["alice", "carol"])

    # Assert
    assert got == {"alice": _hello(rows=1), "carol": _hello(rows=2)}


# ---------------------------------------------------------------- aborts and timeouts


def test_abort_raises_peer_aborted_with_the_reason(net: Net) -> None:
    # Prepare
    net.channels["carol"].send("bob", Abort(reason="disk full"))

    # Act / assert: even while waiting for somebody else.
    with pytest.raises(PeerAborted, match="carol stopped: disk full"):
        net.channels["bob"].expect({Kind.HELLO}, {"alice"}, timeout=QUICK)


def test_abort_helper_sends_privfl_reasons_but_not_foreign_details(net: Net) -> None:
    # Prepare
    alice, bob = net.channels["alice"], net.channels["bob"]

    # Act
    alice.abort(["bob"], ConfigError("bad key file"))
    alice.abort(["bob", "nobody"], RuntimeError("/home/alice/secret.csv"))  # nobody: ignored

    # Assert: our own errors are explained; foreign ones reduced to their type.
    with pytest.raises(PeerAborted, match="alice: bad key file"):
        bob.expect({Kind.HELLO}, {"alice"}, timeout=QUICK)
    with pytest.raises(PeerAborted) as second:
        bob.expect({Kind.HELLO}, {"alice"}, timeout=QUICK)
    assert str(second.value).endswith("alice: RuntimeError")
    assert "secret" not in str(second.value)


@pytest.mark.parametrize("explicit", [True, False])
@pytest.mark.serial  # a wall-clock bound
def test_silence_raises_peer_unavailable_naming_the_peer(net: Net, explicit: bool) -> None:
    # Prepare: a 0.2 s wait, given per call or as the channel's default.
    bob = Channel(net.transports["bob"], session=SESSION, timeout=0.2 if not explicit else 60.0)
    net.channels["carol"].send("bob", _hello())  # somebody else talking does not help

    # Act
    start = time.monotonic()
    with pytest.raises(PeerUnavailable) as caught:
        bob.expect({Kind.HELLO}, {"alice"}, timeout=0.2 if explicit else None)
    elapsed = time.monotonic() - start

    # Assert: waited the timeout (queue.get may wake a little early or late; allow
    # 50 ms early and 5 s late for a loaded test machine).
    message = str(caught.value)
    assert "alice" in message and "hello" in message and "0.2 s" in message
    assert "carol" not in message
    assert 0.15 <= elapsed < 5.0, elapsed


@pytest.mark.serial  # a wall-clock bound
def test_first_contact_with_a_stopped_peer_ends_on_the_abort_waiting_in_the_inbox(
    net: Net,
) -> None:
    # Prepare: carol stops, tells bob so, and leaves the hub before bob first writes to her.
    bob = Channel(net.transports["bob"], session=SESSION, timeout=60.0)
    net.channels["carol"].abort(["bob"], ConfigError("carol runs another job"))
    net.transports["carol"].close()

    # Act
    start = time.monotonic()
    with pytest.raises(PeerAborted, match="carol runs another job"):
        bob.send("carol", _hello())
    elapsed = time.monotonic() - start

    # Assert: the Abort, not the 60 s wait for carol to come online, ended it.
    assert elapsed < 30.0, elapsed  # half the 60 s wait: a busy machine is not a hang


class _LosingTransport:
    """An in-memory transport whose link to one peer is reported lost after a moment."""

    def __init__(self, inner: InMemoryTransport, peer: str, after: float) -> None:
        self.name = inner.name
        self.grace = 0.25
        self._inner, self._peer, self._at = inner, peer, time.monotonic() + after

    def send(self, peer: str, frames: list[bytes]) -> None:
        self._inner.send(peer, frames)

    def recv(self, timeout: float) -> tuple[str, list[bytes]] | None:
        return self._inner.recv(timeout)

    def lost_peers(self) -> dict[str, float]:
        now = time.monotonic()
        return {self._peer: now - self._at} if now >= self._at else {}

    def close(self) -> None:
        self._inner.close()


@pytest.mark.serial  # a wall-clock bound
def test_a_lost_peer_ends_a_long_wait_naming_it(net: Net) -> None:
    # Prepare: bob waits up to 60 s for alice; the transport loses carol after 0.3 s.
    transport = _LosingTransport(net.transports["bob"], "carol", after=0.3)
    bob = Channel(transport, session=SESSION, timeout=60.0)

    # Act
    start = time.monotonic()
    with pytest.raises(PeerUnavailable) as caught:
        bob.expect({Kind.HELLO}, {"alice"})
    elapsed = time.monotonic() - start

    # Assert: named within the channel's liveness poll, not after the timeout.
    assert "lost its connection to carol" in str(caught.value)
    assert "0.25 s grace" in str(caught.value)
    assert 0.3 <= elapsed < 30.0, elapsed  # well inside the 60 s timeout


def test_an_abort_already_queued_wins_over_a_lost_peer(net: Net) -> None:
    # Prepare: carol aborted, then her connection was lost.
    net.channels["carol"].abort(["bob"], ConfigError("disk full"))
    transport = _LosingTransport(net.transports["bob"], "carol", after=0.0)
    bob = Channel(transport, session=SESSION, timeout=60.0)

    # Act / assert: the user sees why carol stopped.
    with pytest.raises(PeerAborted, match="disk full"):
        bob.expect({Kind.HELLO}, {"alice"})
