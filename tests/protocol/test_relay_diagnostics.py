"""What a party says when the relay is the problem: unreachable, or a second copy of a party."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from click.testing import CliRunner
from relay_harness import CONTEXT, Keys, connect_all, make_keys, relayed, running_relay

from privfl.cli import main
from privfl.config.vertical import load_job
from privfl.errors import ConfigError, PeerUnavailable
from privfl.parties.links import relay_key
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


def test_a_party_started_twice_is_refused_by_the_relay_and_logged(
    keys: Keys, caplog: pytest.LogCaptureFixture
) -> None:
    # Prepare: alice and bob connected through the relay.
    with (
        caplog.at_level(logging.WARNING, logger="privfl.relay"),
        running_relay(keys, NAMES) as relay,
    ):
        alice, bob = (relayed(keys, n, [m for m in NAMES if m != n], relay) for n in NAMES)
        second = None
        try:
            connect_all([alice, bob])

            # Act: a second copy of alice connects.
            second = relayed(keys, "alice", ["bob"], relay)
            with pytest.raises(PeerUnavailable) as caught:
                for _ in range(600):
                    second.recv(0.05)

            # Assert: the copy is told why; the first alice still reaches bob and back.
            assert str(caught.value).startswith(
                f"the relay at {relay.endpoint} refused alice: alice is already connected"
            ), caught.value
            bob.send("alice", [b"still you?"])
            got = alice.recv(30)
            assert got == ("bob", [b"still you?"])
        finally:
            for t in (alice, bob, second):
                if t is not None:
                    t.close()
    assert any("refused a second connection of alice" in r.getMessage() for r in caplog.records)


def test_a_missing_relay_key_is_to_be_imported_not_generated(tmp_path: Path) -> None:
    # Prepare: a relayed kit whose relay.key was not handed over.
    made = CliRunner().invoke(
        main,
        ["init", "vfl", "--out", str(tmp_path / "kit"), "--key-bits", "512",
         "--allow-weak-keys", "--relay", "tcp://relay.example.org:443"],
    )  # fmt: skip
    assert made.exit_code == 0, made.output
    (tmp_path / "kit" / "keys" / "relay.key").unlink()

    # Act
    with pytest.raises(ConfigError) as caught:
        relay_key(load_job(tmp_path / "kit" / "job.toml"))

    # Assert
    assert "ask the relay operator for their relay.key" in str(caught.value)
    assert "do not generate one" in str(caught.value) and "keys gen" not in str(caught.value)
