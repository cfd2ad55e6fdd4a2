"""The horizontal transports (Listener, Outbound) over CURVE: the same socket set-up as the
vertical transport, replies over the connection the peer opened, the allow-list enforced."""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path

import pytest

# The key fixture is test_transport's; used as a parameter, it shadows the import.
from test_transport import Keys, keys, ring  # noqa: F401

from privfl.errors import ConfigError, PeerUnavailable, PrivflError
from privfl.parties.audit import FILE_NAME, AuditLog
from privfl.protocol.channel import Channel
from privfl.protocol.hfl_messages import RoundEnd
from privfl.protocol.keys import KeyRing
from privfl.protocol.messages import Kind
from privfl.protocol.transport import Listener, Outbound, free_tcp_endpoints


def _recv(transport: Listener | Outbound, seconds: float = 5.0) -> tuple[str, list[bytes]] | None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got = transport.recv(0.1)
        if got is not None:
            return got
    return None


def test_an_outbound_client_talks_to_a_listener_and_hears_back(keys: Keys) -> None:  # noqa: F811
    (endpoint,) = free_tcp_endpoints(1)
    with ExitStack() as stack:
        agg = stack.enter_context(
            Listener("alice", endpoint, ring(keys, "alice", ["bob"]), linger_ms=0)
        )
        client = stack.enter_context(
            Outbound("bob", {"alice": endpoint}, ring(keys, "bob", ["alice"]), linger_ms=0)
        )

        client.send("alice", [b"join", b"body"])
        assert _recv(agg) == ("bob", [b"join", b"body"])
        agg.send("bob", [b"start"])
        assert _recv(client) == ("alice", [b"start"])


def test_a_key_off_the_allow_list_is_never_heard(keys: Keys) -> None:  # noqa: F811
    (endpoint,) = free_tcp_endpoints(1)
    with ExitStack() as stack:
        agg = stack.enter_context(
            Listener("alice", endpoint, ring(keys, "alice", ["bob"]), linger_ms=0)
        )
        # mallory presents her own key under the name bob: the ZAP allow-list refuses it.
        public, secret = keys["mallory"]
        impostor = KeyRing(
            name="bob", public=public, secret=secret, peers={"alice": keys["alice"][0]}
        )
        client = stack.enter_context(
            Outbound("bob", {"alice": endpoint}, impostor, linger_ms=0, send_timeout=0.5)
        )

        with pytest.raises(PeerUnavailable, match="could not reach peer 'alice'"):
            client.send("alice", [b"join"])
        assert agg.recv(0.3) is None
        with pytest.raises(PeerUnavailable, match="cannot reach 'bob'"):
            agg.send("bob", [b"start"])


def test_set_up_errors_are_one_clear_line(keys: Keys) -> None:  # noqa: F811
    (endpoint,) = free_tcp_endpoints(1)
    with Listener("alice", endpoint, ring(keys, "alice", ["bob"]), linger_ms=0) as agg:
        with pytest.raises(ConfigError, match="cannot listen on"):
            Listener("alice", endpoint, ring(keys, "alice", ["bob"]), linger_ms=0)
        with pytest.raises(ConfigError, match="no public key for peer 'carol'"):
            Outbound("bob", {"carol": endpoint}, ring(keys, "bob", ["alice"]), linger_ms=0)
        with pytest.raises(ConfigError, match="key ring belongs to 'bob'"):
            Outbound("carol", {"alice": endpoint}, ring(keys, "bob", ["alice"]))
        agg.close()
        agg.close()  # closing twice does nothing
        with pytest.raises(PrivflError, match="is closed"):
            agg.recv(0)


def _departed(agg: Listener, peer: str, seconds: float = 30.0) -> bool:
    """Wait for the listener to count ``peer`` departed (the bound only fails the test)."""
    deadline = time.monotonic() + seconds
    while peer not in agg.departed_peers():
        if time.monotonic() > deadline:
            return False
        agg.recv(0.05)
    return True


def test_a_listener_notes_a_peer_whose_connection_closed_until_it_speaks_again(
    keys: Keys,  # noqa: F811
) -> None:
    (endpoint,) = free_tcp_endpoints(1)
    bob_ring = ring(keys, "bob", ["alice"])
    with Listener(
        "alice", endpoint, ring(keys, "alice", ["bob", "carol"]), linger_ms=0, grace=0.05
    ) as agg:
        bob = Outbound("bob", {"alice": endpoint}, bob_ring, linger_ms=0)
        with Outbound("carol", {"alice": endpoint}, ring(keys, "carol", ["alice"]), linger_ms=0):
            bob.send("alice", [b"report"])
            assert _recv(agg) == ("bob", [b"report"]) and not agg.departed_peers()

            bob.close()  # dies without a word: no message says so, its connection closes

            assert _departed(agg, "bob") and "carol" not in agg.departed_peers()
            with Outbound("bob", {"alice": endpoint}, bob_ring, linger_ms=0) as again:
                again.send("alice", [b"back"])
                assert _recv(agg) == ("bob", [b"back"])
                assert "bob" not in agg.departed_peers()


def test_the_closing_exchange_of_a_listener_ends_when_a_silent_peer_is_gone(
    keys: Keys,  # noqa: F811
    tmp_path: Path,
) -> None:
    # Prepare: the Shuffler's case: a client host sent messages (and its audit head), then
    # died without a word; the listener's closing exchange waits for its heads with a
    # window far longer than the test may take.
    (endpoint,) = free_tcp_endpoints(1)
    listener = Listener("alice", endpoint, ring(keys, "alice", ["bob"]), linger_ms=0, grace=0.05)
    outbound = Outbound("bob", {"alice": endpoint}, ring(keys, "bob", ["alice"]), linger_ms=0)
    with listener, outbound:
        logs = {
            name: AuditLog(tmp_path / name / FILE_NAME, party=name, session="s", job="j")
            for name in ("alice", "bob")
        }
        alice = Channel(listener, session="s", timeout=30.0, observer=logs["alice"])
        bob = Channel(outbound, session="s", timeout=30.0, observer=logs["bob"])
        logs["alice"].attach(alice)
        logs["bob"].attach(bob)
        for round_ in (1, 2):  # its first head goes along with the first
            bob.send("alice", RoundEnd(round_, 0.5, False, "rounds"), round_)
        alice.expect({Kind.ROUND_END}, {"bob"})
        alice.expect({Kind.ROUND_END}, {"bob"})
        outbound.close()

        # Act
        began = time.monotonic()
        missing = logs["alice"].settle(timeout=WINDOW)

    # Assert: it gave up on bob once its connection was gone, not after the window
    assert missing == ["bob"] and time.monotonic() - began < WINDOW / 2


WINDOW = 600.0  # the exchange's window per stage, as 2 x round_timeout of a long round
