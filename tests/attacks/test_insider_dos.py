"""An allow-listed party tries to disrupt the others: take a route, fill memory, crash the Server.

* Route takeover: with ROUTER_HANDOVER, a connection presenting an existing routing id
  takes that route. Carol (allow-listed) connects to Alice's inbox under Bob's name;
  Bob's real transport keeps its route and its messages arrive (the control shows the
  same attack silently swallowing the messages of a DEALER named by the bare name).
* Memory: a peer flooding messages the receiver is not ready for hits a byte cap,
  with an error naming it.
* A Loss with a denominator below 8 is a protocol error at decoding, never a crash.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zmq
from helpers import PLAN_COMMIT, memory_job

from privfl.errors import ProtocolError
from privfl.parties.audit import FILE_NAME as AUDIT
from privfl.parties.vertical.runner import run_party
from privfl.protocol import codec
from privfl.protocol.channel import Channel
from privfl.protocol.keys import KeyRing
from privfl.protocol.memory import InMemoryHub
from privfl.protocol.messages import (
    PROTOCOL,
    VERSION,
    Finish,
    Hello,
    Kind,
    Resume,
)
from privfl.protocol.transport import ZmqTransport, free_tcp_endpoints

Pair = tuple[bytes, bytes]


@pytest.fixture(scope="module")
def pairs() -> dict[str, Pair]:
    return {name: zmq.curve_keypair() for name in ("alice", "bob", "carol")}


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as exits:
        yield exits


def inbox(stack: ExitStack, pairs: dict[str, Pair]) -> tuple[ZmqTransport, str]:
    """Alice's real CURVE inbox, allow-listing Bob and Carol."""
    (endpoint,) = free_tcp_endpoints(1)
    ring = KeyRing("alice", *pairs["alice"], {p: pairs[p][0] for p in ("bob", "carol")})
    return stack.enter_context(ZmqTransport("alice", endpoint, {}, ring, linger_ms=0)), endpoint


def dealer(stack: ExitStack, endpoint: str, routing_id: bytes, pair: Pair, server: bytes) -> Any:
    """A bare CURVE DEALER, as an attacker (or an old-style party) would open it."""
    ctx: zmq.Context[Any] = zmq.Context()
    stack.callback(ctx.term)
    sock = ctx.socket(zmq.DEALER)
    stack.callback(sock.close, 0)
    sock.routing_id = routing_id
    sock.curve_publickey, sock.curve_secretkey = pair
    sock.curve_serverkey = server
    sock.connect(endpoint)
    return sock


def receive_all(transport: ZmqTransport, seconds: float) -> list[tuple[str, list[bytes]]]:
    got, deadline = [], time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        item = transport.recv(left)
        if item is not None:
            got.append(item)
    return got


def impersonate(stack: ExitStack, endpoint: str, pairs: dict[str, Pair], ids: list[bytes]) -> None:
    """Carol connects under each id with her own (allow-listed) key and talks."""
    for routing_id in ids:
        sock = dealer(stack, endpoint, routing_id, pairs["carol"], pairs["alice"][0])
        sock.send_multipart([b"carol speaking as bob"])


def test_an_insider_cannot_take_over_another_partys_route(
    stack: ExitStack, pairs: dict[str, Pair]
) -> None:
    alice, endpoint = inbox(stack, pairs)
    ring = KeyRing("bob", *pairs["bob"], {"alice": pairs["alice"][0]})
    (bob_endpoint,) = free_tcp_endpoints(1)
    bob = stack.enter_context(ZmqTransport("bob", bob_endpoint, {"alice": endpoint}, ring))
    bob.send("alice", [b"one"])
    assert receive_all(alice, 1.0) == [("bob", [b"one"])]

    # Act: Carol under Bob's name, and under guessed "bob/<token>" route ids.
    impersonate(stack, endpoint, pairs, [b"bob", b"bob/" + b"0" * 32, b"bob/x"])
    time.sleep(1.0)
    bob.send("alice", [b"two"])

    # Assert: Bob's route still works; only Bob's messages arrive, Carol's are refused.
    assert receive_all(alice, 1.5) == [("bob", [b"two"])]


def test_control_a_bare_name_route_is_taken_over(stack: ExitStack, pairs: dict[str, Pair]) -> None:
    # The leaky construction: Bob's DEALER uses the bare name as its routing id.
    alice, endpoint = inbox(stack, pairs)
    old_bob = dealer(stack, endpoint, b"bob", pairs["bob"], pairs["alice"][0])
    old_bob.send_multipart([b"one"])
    assert receive_all(alice, 1.0) == [("bob", [b"one"])]

    impersonate(stack, endpoint, pairs, [b"bob"])
    time.sleep(1.0)
    old_bob.send_multipart([b"two"])

    assert receive_all(alice, 1.5) == [], "handover should have taken Bob's route"


# ------------------------------------------------------------------ memory


def test_a_flood_of_unexpected_messages_hits_the_byte_cap_naming_the_peer() -> None:
    hub = InMemoryHub(record=False)
    victim = Channel(hub.transport("host"), session="s", timeout=2.0, max_pending_bytes=64 * 1024)
    flooder = Channel(hub.transport("guest-1"), session="s", timeout=2.0)
    big = Finish(epochs=0, reason="x" * 200)  # valid, but nothing the victim waits for

    for _ in range(1000):  # ~250 kB of valid messages
        flooder.send("host", big)

    with pytest.raises(ProtocolError, match=r"^guest-1 sent more than 65536 bytes"):
        victim.expect({Kind.HELLO}, {"guest-1"})


def test_control_below_the_cap_every_message_is_kept() -> None:
    hub = InMemoryHub(record=False)
    victim = Channel(hub.transport("host"), session="s", timeout=2.0, max_pending_bytes=64 * 1024)
    peer = Channel(hub.transport("guest-1"), session="s", timeout=2.0)
    for _ in range(50):
        peer.send("host", Finish(epochs=0, reason="x" * 200))
    peer.send("host", Hello("guest", "f", 1, 1))

    assert isinstance(victim.expect({Kind.HELLO}, {"guest-1"}).body, Hello)
    assert sum(1 for _ in range(50) if victim.expect({Kind.FINISH}, {"guest-1"})) == 50


# ------------------------------------------------------------------ the loss denominator


def loss_frames(denominator: int, session: str = "s", msg_id: int = 7) -> list[bytes]:
    """A Loss as a deviating Host crafts it, bypassing the dataclass checks."""
    head = {
        "protocol": PROTOCOL,
        "version": VERSION,
        "session": session,
        "sender": "host",
        "receiver": "server",
        "round": 0,
        "msg_id": msg_id,
        "kind": "loss",
    }
    value = msgpack.ExtType(2, (1).to_bytes(4, "big") + b"\x05")  # BigInts((5,))
    body = {"epoch": 0, "batch": 0, "n_batches": 1, "value": value}
    body.update(denominator=denominator, scale_bits=48)
    return [msgpack.packb(head, use_bin_type=True), msgpack.packb(body, use_bin_type=True)]


@pytest.mark.parametrize("denominator", [0, 4, 7, -8])
def test_a_loss_denominator_below_8_is_refused_at_decoding(denominator: int) -> None:
    frames = loss_frames(denominator)

    with pytest.raises(ProtocolError, match="denominator"):
        codec.decode(frames)


def test_a_real_server_shrugs_off_a_zero_denominator(tmp_path: Path) -> None:
    job = memory_job(epochs=2)
    hub = InMemoryHub(record=False)
    transports = {name: hub.transport(name) for name in job.parties}
    result: dict[str, Any] = {}
    thread = threading.Thread(
        target=lambda: result.update(
            s=run_party(job, "server", tmp_path, transport=transports["server"])
        ),
        daemon=True,
    )
    thread.start()
    host = Channel(transports["host"], session=job.session, timeout=10, fresh_rule=False)
    guest = Channel(transports["guest-1"], session=job.session, timeout=10, fresh_rule=False)
    host.send("server", Hello("host", job.fingerprint(), 569, 11, plan_commit=PLAN_COMMIT))
    guest.send("server", Hello("guest", job.fingerprint(), 569, 20, plan_commit=PLAN_COMMIT))
    host.expect({Kind.CHECKPOINTS}, {"server"})
    host.send("server", Resume(completed=0))

    # Act: the crafted Loss (right session, fresh message id), then an ordinary Finish.
    transports["host"].send("server", loss_frames(0, job.session, 10_000))
    host.send("server", Finish(epochs=0, reason="done"))
    thread.join(15)

    # Assert: refused and audited, no crash; the Server ended normally on the Finish.
    assert result.get("s") == {"epochs": 0, "decrypted_values": 0}, result
    records = [json.loads(line) for line in (tmp_path / AUDIT).read_text().splitlines()]
    assert any(r["direction"] == "refused" and r["kind"] == "loss" for r in records)
