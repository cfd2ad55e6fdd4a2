"""Tests for CURVE key files, the ZeroMQ transport and the in-memory hub."""

from __future__ import annotations

import logging
import socket
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import zmq

from privfl.errors import ConfigError, PeerUnavailable, PrivflError
from privfl.protocol.keys import (
    KeyRing,
    fingerprint,
    generate_keypair,
    load_public_key,
    load_secret_keypair,
)
from privfl.protocol.memory import InMemoryHub
from privfl.protocol.transport import ZmqTransport, free_tcp_endpoints

Keys = dict[str, tuple[bytes, bytes]]
MakeTransport = Callable[..., ZmqTransport]


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    """Key pairs for alice, bob, carol (all allow-listed) and mallory (never allow-listed)."""
    directory = tmp_path_factory.mktemp("keys")
    pairs: Keys = {}
    for name in ("alice", "bob", "carol", "mallory"):
        _, secret_path = generate_keypair(directory, name)
        pairs[name] = load_secret_keypair(secret_path)
    return pairs


def ring(keys: Keys, name: str, allowed: list[str]) -> KeyRing:
    """KeyRing for `name` allowing `allowed`."""
    public, secret = keys[name]
    return KeyRing(name=name, public=public, secret=secret, peers={p: keys[p][0] for p in allowed})


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as exits:
        yield exits


@pytest.fixture
def make(stack: ExitStack, keys: Keys) -> MakeTransport:
    """Build a ZmqTransport that is closed at the end of the test; linger 0."""

    def build(name: str, endpoint: str, peers: dict[str, str], **kwargs: Any) -> ZmqTransport:
        allowed = kwargs.pop("allowed", list(peers))
        kwargs.setdefault("linger_ms", 0)
        kwargs.setdefault("send_timeout", 2.0)
        transport = ZmqTransport(name, endpoint, peers, ring(keys, name, allowed), **kwargs)
        return stack.enter_context(transport)

    return build


RawDealer = Callable[[str, tuple[bytes, bytes] | None, bytes | None, bytes], zmq.Socket[Any]]


@pytest.fixture
def raw_dealer(stack: ExitStack) -> RawDealer:
    """Build bare DEALERs (no IMMEDIATE: they queue and deliver once a handshake succeeds)."""
    ctx: zmq.Context[Any] = zmq.Context()
    stack.callback(ctx.term)

    def build(
        endpoint: str, pair: tuple[bytes, bytes] | None, server_key: bytes | None, routing_id: bytes
    ) -> zmq.Socket[Any]:
        sock: zmq.Socket[Any] = ctx.socket(zmq.DEALER)
        stack.callback(sock.close, linger=0)
        sock.linger = 0
        sock.routing_id = routing_id
        if pair is not None and server_key is not None:
            sock.curve_publickey, sock.curve_secretkey = pair
            sock.curve_serverkey = server_key
        sock.connect(endpoint)
        return sock

    return build


# --- ZmqTransport ---------------------------------------------------------------


def test_curve_round_trip_both_ways(make: MakeTransport) -> None:
    a_ep, b_ep = free_tcp_endpoints(2)
    alice = make("alice", a_ep, {"bob": b_ep})
    bob = make("bob", b_ep, {"alice": a_ep})
    frames = [b"header", b"", b"\x00\xff" * 50_000]

    alice.send("bob", frames)
    got_by_bob = bob.recv(timeout=2.0)
    bob.send("alice", [b"reply"])
    got_by_alice = alice.recv(timeout=2.0)

    assert got_by_bob == ("alice", frames)
    assert got_by_alice == ("bob", [b"reply"])


def test_unknown_key_cannot_deliver(make: MakeTransport, keys: Keys, raw_dealer: RawDealer) -> None:
    a_ep, m_ep = free_tcp_endpoints(2)
    alice = make("alice", a_ep, {}, allowed=["bob"])
    mallory = make("mallory", m_ep, {"alice": a_ep}, send_timeout=0.5)
    queued = raw_dealer(a_ep, keys["mallory"], keys["alice"][0], b"mallory")

    queued.send_multipart([b"let me in"])
    with pytest.raises(PeerUnavailable, match="alice"):
        mallory.send("alice", [b"let me in"])
    received = alice.recv(timeout=0.5)

    assert received is None


def test_null_client_cannot_deliver(make: MakeTransport, raw_dealer: RawDealer) -> None:
    (a_ep,) = free_tcp_endpoints(1)
    alice = make("alice", a_ep, {}, allowed=["bob"])
    plain = raw_dealer(a_ep, None, None, b"bob")

    plain.send_multipart([b"no crypto"])

    assert alice.recv(timeout=0.7) is None


def test_no_zap_handler_means_no_delivery(
    make: MakeTransport, keys: Keys, raw_dealer: RawDealer
) -> None:
    (a_ep,) = free_tcp_endpoints(1)
    alice = make("alice", a_ep, {}, allowed=["bob"])
    assert alice._auth is not None
    alice._auth.stop()  # white-box: simulate a dead authenticator; libzmq must fail closed
    bob = raw_dealer(a_ep, keys["bob"], keys["alice"][0], b"bob")

    bob.send_multipart([b"allowed key, but nobody to check it"])

    assert alice.recv(timeout=0.7) is None


def test_allow_listed_peer_claiming_another_name_is_dropped(
    make: MakeTransport, keys: Keys, raw_dealer: RawDealer, caplog: pytest.LogCaptureFixture
) -> None:
    (a_ep,) = free_tcp_endpoints(1)
    alice = make("alice", a_ep, {}, allowed=["bob", "carol"])
    as_bob = raw_dealer(a_ep, keys["carol"], keys["alice"][0], b"bob")
    as_carol = raw_dealer(a_ep, keys["carol"], keys["alice"][0], b"carol")

    with caplog.at_level(logging.WARNING, logger="privfl.protocol.transport"):
        as_bob.send_multipart([b"I am bob"])
        forged = alice.recv(timeout=0.7)
    as_carol.send_multipart([b"I am carol"])
    honest = alice.recv(timeout=2.0)

    assert forged is None
    assert "claiming to be b'bob'" in caplog.text
    assert fingerprint(keys["carol"][0]) in caplog.text
    assert honest == ("carol", [b"I am carol"])  # control: same key, true name, delivered


@pytest.mark.serial  # a wall-clock bound
def test_recv_times_out_on_time(make: MakeTransport) -> None:
    (a_ep,) = free_tcp_endpoints(1)
    alice = make("alice", a_ep, {})

    start = time.monotonic()
    received = alice.recv(timeout=0.3)
    elapsed = time.monotonic() - start

    assert received is None
    assert 0.28 <= elapsed < 5.0  # ends on its own; the upper bound leaves room for load


def test_send_to_unknown_peer_is_config_error(make: MakeTransport) -> None:
    (a_ep,) = free_tcp_endpoints(1)
    alice = make("alice", a_ep, {})

    with pytest.raises(ConfigError, match="bob"):
        alice.send("bob", [b"x"])


def test_send_to_silent_peer_is_peer_unavailable(make: MakeTransport) -> None:
    a_ep, b_ep = free_tcp_endpoints(2)
    alice = make("alice", a_ep, {"bob": b_ep}, send_timeout=0.3)

    with pytest.raises(PeerUnavailable, match=r"'bob'.*running"):
        alice.send("bob", [b"anyone?"])


def test_curve_without_keys_or_peer_key_is_config_error(keys: Keys) -> None:
    a_ep, b_ep = free_tcp_endpoints(2)

    with pytest.raises(ConfigError, match="keys"):
        ZmqTransport("alice", a_ep, {"bob": b_ep}, None)
    with pytest.raises(ConfigError, match="no public key for peer 'bob'"):
        ZmqTransport("alice", a_ep, {"bob": b_ep}, ring(keys, "alice", []), linger_ms=0)


def test_endpoint_in_use_is_config_error(make: MakeTransport, keys: Keys) -> None:
    (a_ep,) = free_tcp_endpoints(1)
    make("alice", a_ep, {})

    with pytest.raises(ConfigError, match="cannot listen"):
        ZmqTransport("alice", a_ep, {}, ring(keys, "alice", []), linger_ms=0)


def test_close_is_idempotent_and_use_after_close_fails(keys: Keys) -> None:
    (a_ep,) = free_tcp_endpoints(1)
    with ZmqTransport("alice", a_ep, {}, ring(keys, "alice", []), linger_ms=0) as alice:
        pass

    alice.close()

    with pytest.raises(PrivflError, match="closed"):
        alice.recv(timeout=0.1)


def test_plaintext_mode_still_requires_known_peer(
    make: MakeTransport, raw_dealer: RawDealer
) -> None:
    a_ep, b_ep = free_tcp_endpoints(2)
    alice = make("alice", a_ep, {"bob": b_ep}, curve=False)
    bob = make("bob", b_ep, {"alice": a_ep}, curve=False)
    stranger = raw_dealer(b_ep, None, None, b"stranger")

    stranger.send_multipart([b"hi"])
    alice.send("bob", [b"hello"])

    assert bob.recv(timeout=2.0) == ("alice", [b"hello"])
    assert bob.recv(timeout=0.3) is None


def test_restarted_party_can_deliver_again(make: MakeTransport, keys: Keys) -> None:
    a_ep, b_ep = free_tcp_endpoints(2)
    bob = make("bob", b_ep, {"alice": a_ep})
    with ZmqTransport(
        "alice", a_ep, {"bob": b_ep}, ring(keys, "alice", ["bob"]), linger_ms=0
    ) as a1:
        a1.send("bob", [b"before"])
        assert bob.recv(timeout=2.0) == ("alice", [b"before"])

    alice = make("alice", a_ep, {"bob": b_ep})
    alice.send("bob", [b"after"])
    after = bob.recv(timeout=2.0)
    bob.send("alice", [b"welcome back"])
    back = alice.recv(timeout=2.0)

    assert after == ("alice", [b"after"])
    assert back == ("bob", [b"welcome back"])


def test_free_tcp_endpoints_are_distinct() -> None:
    endpoints = free_tcp_endpoints(5)

    assert len(set(endpoints)) == 5
    assert all(ep.startswith("tcp://127.0.0.1:") for ep in endpoints)


def test_free_tcp_endpoints_stay_in_privfl_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    # Prepare: a range of one port, held by us, then one of eight (the suite's workers' case).
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    port = held.getsockname()[1]
    monkeypatch.setenv("PRIVFL_PORTS", f"{port}-{port}")

    with pytest.raises(OSError, match=f"no free port in PRIVFL_PORTS={port}-{port}"):
        free_tcp_endpoints(1)
    held.close()
    assert free_tcp_endpoints(1) == [f"tcp://127.0.0.1:{port}"]
    monkeypatch.setenv("PRIVFL_PORTS", f"{port}-{port + 7}")
    ports = [int(ep.rsplit(":", 1)[1]) for ep in free_tcp_endpoints(5)]
    assert len(set(ports)) == 5 and all(port <= p <= port + 7 for p in ports), ports


# --- keys -----------------------------------------------------------------------


def test_secret_key_file_is_private(tmp_path: Path) -> None:
    public_path, secret_path = generate_keypair(tmp_path, "alice")

    assert stat.S_IMODE(secret_path.stat().st_mode) == 0o600
    assert load_public_key(public_path) == load_secret_keypair(secret_path)[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["alice.key", "alice.key_secret"]


def test_generate_refuses_to_overwrite(tmp_path: Path) -> None:
    generate_keypair(tmp_path, "alice")

    with pytest.raises(ConfigError, match="already exist"):
        generate_keypair(tmp_path, "alice")


def test_loading_missing_or_garbled_key_is_config_error(tmp_path: Path) -> None:
    garbled = tmp_path / "garbled.key"
    garbled.write_text('curve\n    public-key = "not a key"\n')
    public_path, _ = generate_keypair(tmp_path, "alice")

    with pytest.raises(ConfigError, match=r"nope\.key is missing.*privfl"):
        load_public_key(tmp_path / "nope.key")
    with pytest.raises(ConfigError, match="garbled"):
        load_public_key(garbled)
    with pytest.raises(ConfigError, match="no secret key"):
        load_secret_keypair(public_path)


def test_fingerprint_is_stable_and_distinguishes_keys(keys: Keys) -> None:
    alice, bob = keys["alice"][0], keys["bob"][0]

    assert fingerprint(alice) == fingerprint(bytes(alice))
    assert fingerprint(alice) != fingerprint(bob)
    with pytest.raises(ConfigError):
        fingerprint(b"#" * 40)
    assert len(fingerprint(alice).split(":")) == 4


def test_keyring_repr_hides_secret(keys: Keys) -> None:
    key_ring = ring(keys, "alice", ["bob"])

    text = repr(key_ring)

    assert keys["alice"][1].decode() not in text
    assert "secret" not in text
    assert "alice" in text


# --- InMemoryHub ----------------------------------------------------------------


def test_in_memory_round_trip_and_record() -> None:
    hub = InMemoryHub()
    with hub.transport("host") as host, hub.transport("guest") as guest:
        host.send("guest", [b"a", b"b"])
        received = guest.recv(timeout=1.0)

    assert received == ("host", [b"a", b"b"])
    assert hub.sent == [("host", "guest", [b"a", b"b"])]


@pytest.mark.serial  # a wall-clock bound
def test_in_memory_timeout_and_unknown_peer() -> None:
    hub = InMemoryHub()
    with hub.transport("host") as host:
        start = time.monotonic()
        received = host.recv(timeout=0.2)
        elapsed = time.monotonic() - start
        with pytest.raises(PeerUnavailable, match="guest"):
            host.send("guest", [b"x"])

    assert received is None
    assert 0.18 <= elapsed < 5.0  # ends on its own; the upper bound leaves room for load


def test_in_memory_name_reusable_after_close() -> None:
    hub = InMemoryHub()
    first = hub.transport("host")
    with pytest.raises(ConfigError, match="already open"):
        hub.transport("host")

    first.close()
    first.close()

    with hub.transport("host") as again:
        assert again.recv(timeout=0.0) is None
