"""A wait that hears nothing names the peers whose connection never came up, and says so early."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest

from privfl.errors import PeerUnavailable
from privfl.protocol import waits
from privfl.protocol.channel import Channel
from privfl.protocol.memory import InMemoryHub, InMemoryTransport
from privfl.protocol.messages import Kind


class Unconnected:
    """An in-memory transport that also says which peers never connected."""

    def __init__(self, inner: InMemoryTransport, unconnected: dict[str, str]) -> None:
        self.inner, self.name, self.unconnected = inner, inner.name, unconnected

    def send(self, peer: str, frames: Sequence[bytes]) -> None:
        self.inner.send(peer, frames)

    def recv(self, timeout: float) -> tuple[str, list[bytes]] | None:
        return self.inner.recv(timeout)

    def close(self) -> None:
        self.inner.close()

    def unconnected_peers(self) -> dict[str, str]:
        return dict(self.unconnected)


def server(unconnected: dict[str, str]) -> Channel:
    hub = InMemoryHub()
    for name in ("host", "guest-1"):
        hub.transport(name)
    return Channel(Unconnected(hub.transport("server"), unconnected), session="s", timeout=1.0)


def test_a_wait_that_gives_up_names_the_peer_that_never_connected() -> None:
    # Prepare: the host is connected (and silent), guest-1 never connected.
    channel = server({"guest-1": "tcp://10.0.0.3:5557"})

    # Act
    with pytest.raises(PeerUnavailable) as gave_up:
        channel.expect({Kind.HELLO}, {"guest-1", "host"}, timeout=0.3)

    # Assert: guest-1 is named, with its endpoint; the connected host is not blamed.
    text = str(gave_up.value)
    assert "guest-1 never connected" in text and "tcp://10.0.0.3:5557" in text, text
    assert "host" not in text.replace("its own terminal", ""), text


def test_without_unconnected_peers_the_awaited_ones_are_named() -> None:
    with pytest.raises(PeerUnavailable, match=r"no hello from guest-1, host within 0\.3 s"):
        server({}).expect({Kind.HELLO}, {"guest-1", "host"}, timeout=0.3)


def test_the_terminal_hears_of_an_unconnected_peer_while_we_wait(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Prepare: notices due at once and every 0.1 s.
    monkeypatch.setattr(waits, "NOTICE_FIRST_SECONDS", 0.0)
    monkeypatch.setattr(waits, "NOTICE_EVERY_SECONDS", 0.1)
    channel = server({"guest-1": "tcp://10.0.0.3:5557"})

    # Act
    with caplog.at_level(logging.WARNING), pytest.raises(PeerUnavailable):
        channel.expect({Kind.HELLO}, {"guest-1"}, timeout=1.6)  # polls every 0.5 s

    # Assert: warnings (the console shows them), repeated, naming the peer and where.
    notices = [r.getMessage() for r in caplog.records if "no connection yet" in r.getMessage()]
    assert len(notices) >= 2, notices
    assert all(n.startswith("waiting for guest-1 at tcp://10.0.0.3:5557") for n in notices)
