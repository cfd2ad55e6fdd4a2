"""The horizontal transports (Listener, Outbound) over CURVE: the same socket set-up as the
vertical transport, replies over the connection the peer opened, the allow-list enforced."""

from __future__ import annotations

import time
from contextlib import ExitStack

import pytest

# The key fixture is test_transport's; used as a parameter, it shadows the import.
from test_transport import Keys, keys, ring  # noqa: F401

from privfl.errors import ConfigError, PeerUnavailable, PrivflError
from privfl.protocol.keys import KeyRing
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
