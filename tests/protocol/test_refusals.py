"""Strangers are refused at the door, with real sockets: logged at WARNING, never delivered.

Each case points a raw ZeroMQ client at a real ZmqTransport inbox and checks
that (a) the refusal is logged at WARNING with the peer address (and the key
fingerprint where one was presented), and (b) nothing reaches protocol logic:
the transport's recv yields nothing, and a Channel on top never sees a message.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest
import zmq

from privfl.protocol.channel import Channel
from privfl.protocol.keys import KeyRing, fingerprint
from privfl.protocol.transport import ZmqTransport, free_tcp_endpoints

LOGGER = "privfl.protocol.transport"
Pair = tuple[bytes, bytes]


@pytest.fixture(scope="module")
def pairs() -> dict[str, Pair]:
    """CURVE key pairs: alice (the inbox), bob and carol (allow-listed), mallory (not)."""
    return {name: zmq.curve_keypair() for name in ("alice", "bob", "carol", "mallory")}


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as exits:
        yield exits


@pytest.fixture
def inbox(stack: ExitStack, pairs: dict[str, Pair]) -> tuple[ZmqTransport, str]:
    """Alice's real CURVE inbox on a free loopback port, allow-listing bob and carol."""
    (endpoint,) = free_tcp_endpoints(1)
    public, secret = pairs["alice"]
    ring = KeyRing("alice", public, secret, {p: pairs[p][0] for p in ("bob", "carol")})
    transport = ZmqTransport("alice", endpoint, {}, ring, linger_ms=0)
    return stack.enter_context(transport), endpoint


def client(
    stack: ExitStack, endpoint: str, routing_id: bytes, pair: Pair | None, server_key: bytes | None
) -> zmq.Socket[Any]:
    """A bare DEALER (plain text when ``pair`` is None) that queues until a handshake succeeds."""
    ctx: zmq.Context[Any] = zmq.Context()
    stack.callback(ctx.term)
    sock: zmq.Socket[Any] = ctx.socket(zmq.DEALER)
    stack.callback(sock.close, 0)
    sock.routing_id = routing_id
    if pair is not None and server_key is not None:
        sock.curve_publickey, sock.curve_secretkey = pair
        sock.curve_serverkey = server_key
    sock.connect(endpoint)
    return sock


def refused(caplog: pytest.LogCaptureFixture, fragment: str, wait: float = 3.0) -> str:
    """The first WARNING line containing ``fragment``, waiting for the monitor thread."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        for record in caplog.records:
            text = record.getMessage()
            if record.levelno == logging.WARNING and fragment in text:
                return text
        time.sleep(0.05)
    raise AssertionError(f"no WARNING with {fragment!r}: {caplog.text}")


def nothing_delivered(transport: ZmqTransport) -> None:
    """Neither the transport nor a Channel on top of it hands anything to protocol logic."""
    assert transport.recv(timeout=0.5) is None
    seen: list[str] = []
    channel = Channel(
        transport, session="s", timeout=0.5, observer=lambda *args: seen.append(str(args))
    )
    assert channel._receive(0.5) is None
    assert seen == []


def test_plain_text_client_is_refused_and_logged(
    inbox: tuple[ZmqTransport, str], stack: ExitStack, caplog: pytest.LogCaptureFixture
) -> None:
    transport, endpoint = inbox
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        plain = client(stack, endpoint, b"bob", None, None)
        plain.send_multipart([b"hello in the clear"])
        line = refused(caplog, "refused a connection from")
        nothing_delivered(transport)  # ~1.5 s in which the client keeps reconnecting
    lines = [r for r in caplog.records if "plain text" in r.getMessage()]

    # libzmq may close a plain-text socket before its peer address can be read;
    # then the log names the endpoint it knocked on.
    assert "127.0.0.1:" in line and "key -" in line and "plain text" in line
    # Once per (address, reason), not once per retry: the client reconnects from a new
    # port every ~100 ms, and libzmq reports a drop either as a handshake failure or as
    # a disconnect, with or without the peer address.
    seen = [re.sub(r"from 127\.0\.0\.1:\d+", "from 127.0.0.1", r.getMessage()) for r in lines]
    assert len(seen) == len(set(seen)) and len(seen) <= 4, seen


def test_unknown_key_is_refused_with_its_fingerprint(
    inbox: tuple[ZmqTransport, str],
    stack: ExitStack,
    pairs: dict[str, Pair],
    caplog: pytest.LogCaptureFixture,
) -> None:
    transport, endpoint = inbox
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        mallory = client(stack, endpoint, b"bob", pairs["mallory"], pairs["alice"][0])
        mallory.send_multipart([b"let me in"])
        line = refused(caplog, fingerprint(pairs["mallory"][0]))
        nothing_delivered(transport)

    assert "127.0.0.1" in line and "Unknown key" in line


def test_wrong_server_key_is_refused_and_logged(
    inbox: tuple[ZmqTransport, str],
    stack: ExitStack,
    pairs: dict[str, Pair],
    caplog: pytest.LogCaptureFixture,
) -> None:
    transport, endpoint = inbox
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        # bob's own key is allow-listed, but he expects mallory's server key
        confused = client(stack, endpoint, b"bob", pairs["bob"], pairs["mallory"][0])
        confused.send_multipart([b"is this alice?"])
        line = refused(caplog, "refused a connection from 127.0.0.1:")
        nothing_delivered(transport)

    assert "handshake" in line


def test_allow_listed_party_impersonating_another_is_refused(
    inbox: tuple[ZmqTransport, str],
    stack: ExitStack,
    pairs: dict[str, Pair],
    caplog: pytest.LogCaptureFixture,
) -> None:
    transport, endpoint = inbox
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        carol_as_bob = client(stack, endpoint, b"bob", pairs["carol"], pairs["alice"][0])
        carol_as_bob.send_multipart([b"I am bob"])
        nothing_delivered(transport)
        line = refused(caplog, "claiming to be b'bob'")
    honest = client(stack, endpoint, b"carol", pairs["carol"], pairs["alice"][0])
    honest.send_multipart([b"I am carol"])

    assert fingerprint(pairs["carol"][0]) in line and "127.0.0.1" in line
    assert transport.recv(timeout=3.0) == ("carol", [b"I am carol"])  # control
