"""Connection liveness of the ZeroMQ transport: lost peers, the grace, and Aborts that must arrive.

Two transports in one process on loopback; closing one is what a killed process
looks like to the other (its TCP connections close). Frozen processes are in
test_liveness.py, where real processes can be stopped.
"""

# ruff: noqa: F811
from __future__ import annotations

import time
from collections.abc import Callable

import pytest

# The key and transport fixtures are test_transport's; used as parameters, they shadow the import.
from test_transport import Keys, MakeTransport, keys, make, ring, stack  # noqa: F401

from privfl.errors import PeerUnavailable
from privfl.protocol.keys import KeyRing
from privfl.protocol.reliable import ReliableTransport
from privfl.protocol.transport import ZmqTransport, free_tcp_endpoints

# Bounds in wall-clock seconds: alone on the machine under xdist (tests/conftest.py).
pytestmark = pytest.mark.serial

GRACE = 0.5


def wait_until(check: Callable[[], bool], limit: float) -> float:
    """Seconds until ``check()`` holds; fails the test after ``limit``."""
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < limit, "condition not reached in time"
        time.sleep(0.02)
    return time.monotonic() - start


def connected_pair(make: MakeTransport, keys: Keys) -> tuple[ZmqTransport, ZmqTransport, str]:
    """alice (made by ``make``) and bob (the caller closes it), connected both ways."""
    a_ep, b_ep = free_tcp_endpoints(2)
    alice = make("alice", a_ep, {"bob": b_ep}, grace=GRACE)
    bob = ZmqTransport("bob", b_ep, {"alice": a_ep}, ring(keys, "bob", ["alice"]), linger_ms=0)
    wait_until(lambda: alice.connected("bob") and bob.connected("alice"), 5.0)
    return alice, bob, b_ep


def test_a_closed_peer_is_lost_after_the_grace(make: MakeTransport, keys: Keys) -> None:
    # Prepare
    alice, bob, _ = connected_pair(make, keys)
    assert alice.lost_peers() == {}

    # Act: bob's process goes away.
    bob.close()
    took = wait_until(lambda: "bob" in alice.lost_peers(), 5.0)

    # Assert: not before the grace, and soon after it.
    assert GRACE <= took < GRACE + 5.0, took  # soon after it, on a busy machine too
    assert not alice.connected("bob")


def test_a_peer_that_comes_back_within_the_grace_is_not_lost(
    make: MakeTransport, keys: Keys
) -> None:
    # Prepare: alice allows bob 5 s to come back (a reconnect on a busy machine fits).
    a_ep, b_ep = free_tcp_endpoints(2)
    alice = make("alice", a_ep, {"bob": b_ep}, grace=5.0)
    bob_ring = ring(keys, "bob", ["alice"])
    first = ZmqTransport("bob", b_ep, {"alice": a_ep}, bob_ring, linger_ms=0)
    wait_until(lambda: alice.connected("bob"), 5.0)

    # Act: bob restarts at once.
    first.close()
    wait_until(lambda: not alice.connected("bob"), 5.0)
    with ZmqTransport("bob", b_ep, {"alice": a_ep}, bob_ring, linger_ms=0):
        back = wait_until(lambda: alice.connected("bob"), 5.0)
        time.sleep(5.2)  # past the grace counted from the disconnect

        # Assert
        assert back < 5.0
        assert alice.lost_peers() == {}


def test_a_peer_that_never_started_is_not_lost(make: MakeTransport) -> None:
    # Prepare: bob's endpoint has nobody behind it.
    a_ep, b_ep = free_tcp_endpoints(2)
    alice = make("alice", a_ep, {"bob": b_ep}, grace=0.1)

    # Act
    time.sleep(0.5)

    # Assert: not started is not lost; the job's timeout handles it.
    assert alice.lost_peers() == {}
    assert not alice.connected("bob")


def test_a_send_to_a_lost_peer_fails_after_the_grace_not_the_send_timeout(
    make: MakeTransport, keys: Keys
) -> None:
    # Prepare: a 30 s send timeout.
    a_ep, b_ep = free_tcp_endpoints(2)
    alice = make("alice", a_ep, {"bob": b_ep}, grace=GRACE, send_timeout=30.0)
    bob = ZmqTransport("bob", b_ep, {"alice": a_ep}, ring(keys, "bob", ["alice"]), linger_ms=0)
    wait_until(lambda: alice.connected("bob"), 5.0)
    bob.close()
    wait_until(lambda: not alice.connected("bob"), 5.0)

    # Act
    start = time.monotonic()
    with pytest.raises(PeerUnavailable) as caught:
        alice.send("bob", [b"still there?"])
    took = time.monotonic() - start

    # Assert
    assert "lost its connection to bob" in str(caught.value)
    assert took < GRACE + 5.0, took  # far under the 30 s send timeout, even on a busy machine


def test_an_abort_to_a_peer_still_connecting_is_delivered_before_close(
    make: MakeTransport, keys: Keys
) -> None:
    # Prepare: alice fails before her connection to bob is made (bob starts late).
    a_ep, b_ep = free_tcp_endpoints(2)
    alice = ReliableTransport(make("alice", a_ep, {"bob": b_ep}))
    sent_at_once = alice.try_send("bob", [b"abort"])
    bob_zmq = ZmqTransport("bob", b_ep, {"alice": a_ep}, ring(keys, "bob", ["alice"]), linger_ms=0)
    with ReliableTransport(bob_zmq) as bob:
        # Act: alice closes; her close flushes what is unacknowledged.
        alice.close()
        got = bob.recv(timeout=2.0)

    # Assert: it could not go at once, and arrived all the same.
    assert not sent_at_once
    assert got == ("alice", [b"abort"])


def test_a_peer_that_never_connected_is_reported_until_it_does(
    make: MakeTransport, keys: Keys
) -> None:
    # Prepare: alice knows bob's endpoint; nobody listens there yet.
    a_ep, b_ep = free_tcp_endpoints(2)
    alice = make("alice", a_ep, {"bob": b_ep}, grace=GRACE)

    # Act / Assert: bob is unconnected until his inbox is up, and not lost meanwhile.
    assert alice.unconnected_peers() == {"bob": b_ep}
    assert alice.lost_peers() == {}
    bob = ZmqTransport("bob", b_ep, {"alice": a_ep}, ring(keys, "bob", ["alice"]), linger_ms=0)
    try:
        wait_until(lambda: alice.unconnected_peers() == {}, 5.0)
    finally:
        bob.close()


def test_a_peer_whose_endpoint_cannot_prove_its_key_is_unproven_at_once(
    make: MakeTransport, keys: Keys
) -> None:
    # Prepare: at bob's endpoint listens mallory's key pair (bob's secret key lost, say).
    a_ep, b_ep = free_tcp_endpoints(2)
    alice = make("alice", a_ep, {"bob": b_ep})
    public, secret = keys["mallory"]
    stolen = KeyRing(name="bob", public=public, secret=secret, peers={"alice": keys["alice"][0]})
    impostor = ZmqTransport("bob", b_ep, {"alice": a_ep}, stolen, linger_ms=0)

    # Act: alice's handshakes to bob's endpoint fail, again and again.
    try:
        took = wait_until(lambda: bool(alice.unproven_peers()), 10.0)
    finally:
        impostor.close()

    # Assert: named within seconds, not at the job's timeout; never up, never lost.
    assert took < 10.0
    assert alice.unproven_peers() == {"bob": (b_ep, False)}
    assert alice.lost_peers() == {} and not alice.connected("bob")
    with pytest.raises(PeerUnavailable, match="the process at bob's endpoint"):
        alice.send("bob", [b"hello"])


def test_a_peer_that_refuses_our_key_is_named_with_what_to_fix(
    make: MakeTransport, keys: Keys
) -> None:
    # Prepare: bob is bob, but his job lists another key for alice (carol's).
    a_ep, b_ep = free_tcp_endpoints(2)
    alice = make("alice", a_ep, {"bob": b_ep})
    public, secret = keys["bob"]
    wrong = KeyRing(name="bob", public=public, secret=secret, peers={"alice": keys["carol"][0]})
    bob = ZmqTransport("bob", b_ep, {"alice": a_ep}, wrong, linger_ms=0)

    # Act
    try:
        wait_until(lambda: bool(alice.unproven_peers()), 10.0)
    finally:
        bob.close()

    # Assert: alice is told that bob refuses her key.
    assert alice.unproven_peers() == {"bob": (b_ep, True)}
    with pytest.raises(PeerUnavailable, match=r"bob at .* refuses alice's key"):
        alice.send("bob", [b"hello"])


def test_a_peer_that_is_slow_to_start_is_not_unproven(make: MakeTransport, keys: Keys) -> None:
    # Prepare: nobody at bob's endpoint, then the real bob.
    a_ep, b_ep = free_tcp_endpoints(2)
    alice = make("alice", a_ep, {"bob": b_ep})
    time.sleep(0.5)  # alice retries a closed port: no handshake ever fails there
    assert alice.unproven_peers() == {}
    bob = ZmqTransport("bob", b_ep, {"alice": a_ep}, ring(keys, "bob", ["alice"]), linger_ms=0)

    # Act
    try:
        wait_until(lambda: alice.connected("bob"), 10.0)
    finally:
        bob.close()

    # Assert
    assert alice.unproven_peers() == {}
