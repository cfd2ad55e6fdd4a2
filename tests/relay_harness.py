"""An in-process relay on loopback and relayed transports around it, for protocol tests.

Real sockets, real CURVE, real seals: only the processes are threads here. A test that
needs a hostile relay passes its own :class:`RelayCore` subclass.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from privfl.protocol.keys import KeyRing, generate_keypair, load_secret_keypair
from privfl.protocol.relay import Relay, RelayCore
from privfl.protocol.relayed import RELAY, RelayedTransport
from privfl.protocol.seal import SealBroken

Keys = dict[str, tuple[bytes, bytes]]
CONTEXT = b"session-1\0" + b"f" * 64
NAMES = ["alice", "bob"]  # the two parties of the relay attack tests (tests/attacks/)
SECRET = b"PATIENT-0042 diagnosis=malignant"  # what alice tells bob


def make_keys(directory: Path, names: list[str]) -> Keys:
    """A key pair for each name and for the relay."""
    pairs: Keys = {}
    for name in [*names, RELAY]:
        _, secret_path = generate_keypair(directory, name)
        pairs[name] = load_secret_keypair(secret_path)
    return pairs


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    """alice's, bob's and the relay's key pairs, once per test module that imports it."""
    return make_keys(tmp_path_factory.mktemp("keys"), NAMES)


@contextmanager
def running_relay(keys: Keys, parties: list[str], core: RelayCore | None = None) -> Iterator[Relay]:
    """A relay serving in a thread on a random loopback port; stopped and closed after."""
    public, secret = keys[RELAY]
    relay = Relay("tcp://127.0.0.1:*", public, secret, {p: keys[p][0] for p in parties}, core=core)
    thread = threading.Thread(target=relay.serve, daemon=True)
    thread.start()
    try:
        yield relay
    finally:
        relay.stop()
        thread.join(timeout=10)
        relay.close()


def relayed(
    keys: Keys, name: str, peers: list[str], relay: Relay, **kwargs: Any
) -> RelayedTransport:
    """``name``'s transport through ``relay`` to ``peers``, linger 0."""
    public, secret = keys[name]
    ring = KeyRing(name, public, secret, {p: keys[p][0] for p in peers})
    kwargs.setdefault("linger_ms", 0)
    kwargs.setdefault("context", CONTEXT)
    return RelayedTransport(name, relay.endpoint, keys[RELAY][0], ring, **kwargs)


def wait_for(check: Callable[[], bool], seconds: float = 60.0) -> None:
    """Poll ``check`` until it holds; AssertionError after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {seconds:g} s")
        time.sleep(0.02)


def connect_all(transports: list[RelayedTransport]) -> None:
    """Wait until each transport sees every one of its peers at the relay."""
    # every transport polled on each try: each learns the others' session nonces only
    # from their answers, which they send while polled
    wait_for(
        lambda: all([t.connected(o.name) for t in transports for o in transports if o is not t])
    )


def alice_tells_bob(
    a: Any, b: Any, sends: int, until: int, polls: tuple[float, float], connect: bool = False
) -> list[Any]:
    """alice's transport sends bob ``sends`` messages ``[k, SECRET]``; what bob's receives
    until it holds ``until`` of them (at most 60 s), or the SealBroken that ends it.

    ``polls``: how long each turn waits for alice's ACKs, then for bob's next message;
    ``connect``: first wait until both see each other at the relay (:func:`connect_all`).
    Both transports are closed after.
    """
    got: list[Any] = []
    try:
        if connect:
            connect_all([a, b])
        for k in range(sends):
            a.send("bob", [b"%d" % k, SECRET])
        deadline = time.monotonic() + 60
        while len(got) < until and time.monotonic() < deadline:
            a.recv(polls[0])  # ACKs
            message = b.recv(polls[1])
            if message is not None:
                got.append(message)
    except SealBroken as exc:
        got.append(exc)
    finally:
        a.close()
        b.close()
    return got
