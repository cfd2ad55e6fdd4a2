"""What a party says when the relay is the problem: unreachable, or a second copy of a party."""

from __future__ import annotations

import pytest
from relay_harness import CONTEXT, Keys, make_keys

from privfl.errors import PeerUnavailable
from privfl.protocol import relayed as relayed_module
from privfl.protocol.keys import KeyRing
from privfl.protocol.liveness import Link
from privfl.protocol.relayed import RELAY, RelayedTransport, unreachable_message
from privfl.protocol.transport import free_tcp_endpoints
from privfl.protocol.waits import never_connected_message

NAMES = ["alice", "bob"]


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    return make_keys(tmp_path_factory.mktemp("keys"), NAMES)


def test_a_relay_nobody_listens_at_is_named_with_what_to_ask_it(
    keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: a free loopback port: the connection is refused.
    monkeypatch.setattr(relayed_module, "REACH_SECONDS", 0.5)
    endpoint = free_tcp_endpoints(1)[0]
    public, secret = keys["alice"]
    ring = KeyRing("alice", public, secret, {"bob": keys["bob"][0]})
    transport = RelayedTransport(
        "alice", endpoint, keys[RELAY][0], ring, context=CONTEXT, linger_ms=0
    )

    # Act
    try:
        with pytest.raises(PeerUnavailable) as caught:
            for _ in range(200):  # a wait polls like this (Channel._check_links)
                transport.lost_peers()
                transport.recv(0.05)
    finally:
        transport.close()

    # Assert
    where = endpoint.split("://")[1]
    assert str(caught.value) == (
        f"alice cannot reach the relay at {endpoint} (connection refused): ask your IT to "
        f"allow outbound TCP to {where}, and the relay operator whether the relay runs there"
    )


def test_no_answer_and_a_wrong_relay_are_told_apart() -> None:
    silent = unreachable_message("alice", "tcp://relay.example.org:443", Link(), 12.4)
    wrong = unreachable_message("alice", "tcp://relay.example.org:443", Link(answered=True), 12)

    assert "(no answer in 12 s): ask your IT to allow outbound TCP to relay.example.org:443" in (
        silent
    )
    assert "fails every CURVE handshake" in wrong and "relay.key" in wrong


def test_peers_blame_the_relay_link_of_the_party_that_never_came() -> None:
    where = "via the relay at tcp://r:1, which we reach (it never connected there)"

    message = never_connected_message("host", {"guest-1": where}, 120)

    assert message.startswith("host gave up after 120 s: guest-1 never reached the relay (")
    assert "guest-1 via the relay at tcp://r:1" in message and " at via " not in message
    assert "the problem is between them and the relay, not here" in message
