"""The relayed transport: delivery through the relay, presence, liveness, the reliable layer."""

from __future__ import annotations

import time

import pytest
from relay_harness import Keys, connect_all, make_keys, relayed, running_relay, wait_for

from privfl.errors import PeerUnavailable
from privfl.parties.links import subring
from privfl.protocol.keys import KeyRing
from privfl.protocol.relayed import RelayedTransport
from privfl.protocol.reliable import ReliableTransport
from privfl.protocol.routed import RoutedTransport
from privfl.protocol.transport import ZmqTransport, free_tcp_endpoints

NAMES = ["alice", "bob", "carol"]


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    return make_keys(tmp_path_factory.mktemp("keys"), [*NAMES, "mallory"])


def recv_from(
    t: RelayedTransport | ReliableTransport, seconds: float = 30.0
) -> tuple[str, list[bytes]]:
    got = t.recv(seconds)
    assert got is not None, f"{t.name} received nothing within {seconds} s"
    return got


def test_messages_cross_the_relay_both_ways(keys: Keys) -> None:
    with running_relay(keys, NAMES) as relay:
        a = relayed(keys, "alice", ["bob"], relay)
        b = relayed(keys, "bob", ["alice"], relay)
        try:
            connect_all([a, b])
            a.send("bob", [b"header", b"x" * 100_000])
            assert recv_from(b) == ("alice", [b"header", b"x" * 100_000])
            b.send("alice", [b"reply"])
            assert recv_from(a) == ("bob", [b"reply"])
        finally:
            a.close()
            b.close()


def test_a_party_outside_the_job_is_refused_by_the_relay(keys: Keys) -> None:
    """mallory's key is not allow-listed: its handshake fails and nothing of it reaches bob."""
    with running_relay(keys, ["alice", "bob"]) as relay:
        a = relayed(keys, "alice", ["bob"], relay)
        b = relayed(keys, "bob", ["alice", "mallory"], relay)
        m = relayed(keys, "mallory", ["bob"], relay)
        try:
            connect_all([a, b])
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:
                assert not m.try_send("bob", [b"hi"])  # never an authenticated connection
                time.sleep(0.1)
            a.send("bob", [b"after"])
            assert recv_from(b) == ("alice", [b"after"])
            assert "mallory" in b.unconnected_peers()
        finally:
            for t in (a, b, m):
                t.close()


def test_reliable_layer_runs_over_the_relay(keys: Keys) -> None:
    """Chunked messages (over 1 MiB) and ACKs pass through sealed, as on the direct mesh."""
    with running_relay(keys, NAMES) as relay:
        a = ReliableTransport(relayed(keys, "alice", ["bob"], relay))
        b = ReliableTransport(relayed(keys, "bob", ["alice"], relay))
        try:
            wait_for(lambda: all([a.connected("bob"), b.connected("alice")]))
            big = bytes(range(256)) * (3 * 4096 + 7)  # three chunks and a bit
            a.send("bob", [b"h", big])
            assert recv_from(b) == ("alice", [b"h", big])
            wait_for(lambda: (b.recv(0.05), a.recv(0.05)) and a.unacked() == 0)
        finally:
            a.close()
            b.close()


@pytest.mark.serial  # a wall-clock bound
def test_a_peer_that_leaves_the_relay_is_named_lost_within_the_grace(keys: Keys) -> None:
    with running_relay(keys, NAMES) as relay:
        a = relayed(keys, "alice", ["bob"], relay, grace=1.0)
        b = relayed(keys, "bob", ["alice"], relay)
        try:
            connect_all([a, b])
            b.close()
            began = time.monotonic()
            wait_for(lambda: (a.recv(0.1), "bob" in a.lost_peers())[1], seconds=15)
            assert time.monotonic() - began < 15
        finally:
            a.close()
            b.close()


def test_a_dead_relay_is_named_by_every_party(keys: Keys) -> None:
    relay_cm = running_relay(keys, NAMES)
    relay = relay_cm.__enter__()
    parties = [relayed(keys, n, [m for m in NAMES if m != n], relay, grace=1.0) for n in NAMES]
    try:
        connect_all(parties)
        relay_cm.__exit__(None, None, None)
        for t in parties:
            wait_for(lambda t=t: "relay" in t.lost_peers(), seconds=15)
            with pytest.raises(PeerUnavailable, match="relay"):
                t.send(parties[0].name if t is not parties[0] else parties[1].name, [b"x"])
    finally:
        for t in parties:
            t.close()


def test_a_mixed_party_reaches_direct_peers_directly_and_relayed_ones_through_the_relay(
    keys: Keys,
) -> None:
    """alice listens (direct) and talks to carol directly, to bob (relayed) via the relay."""
    inbox_a, inbox_c = free_tcp_endpoints(2)
    ring = {n: KeyRing(n, *keys[n], peers={p: keys[p][0] for p in NAMES if p != n}) for n in NAMES}
    with running_relay(keys, NAMES) as relay:
        direct_a = ZmqTransport(
            "alice", inbox_a, {"carol": inbox_c}, subring(ring["alice"], {"carol"}), linger_ms=0
        )
        a = RoutedTransport(direct_a, relayed(keys, "alice", ["bob"], relay), via={"bob"})
        b = relayed(keys, "bob", ["alice"], relay)
        c = ZmqTransport(
            "carol", inbox_c, {"alice": inbox_a}, subring(ring["carol"], {"alice"}), linger_ms=0
        )
        try:
            wait_for(lambda: all([a.connected("bob"), a.connected("carol"), b.connected("alice")]))
            a.send("bob", [b"to bob"])
            a.send("carol", [b"to carol"])
            assert recv_from(b) == ("alice", [b"to bob"])
            assert recv_from(c) == ("alice", [b"to carol"])
            b.send("alice", [b"from bob"])
            c.send("alice", [b"from carol"])
            got = {recv_from(a)[0], recv_from(a)[0]}
            assert got == {"bob", "carol"}
        finally:
            for t in (a, b, c):
                t.close()
