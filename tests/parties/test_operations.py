"""Operations: a long wait is logged with the peer's name; per-party progress bars."""

from __future__ import annotations

import logging

import pytest

from privfl.errors import PeerUnavailable
from privfl.parties.progress import party_progress
from privfl.protocol import channel as channel_module
from privfl.protocol.channel import FIRST_CONTACT_POLL_SECONDS, Channel
from privfl.protocol.memory import InMemoryHub
from privfl.protocol.messages import PROTOCOL, VERSION, Finish, Header, Kind


def test_a_long_wait_is_logged_naming_the_silent_peer(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(channel_module, "WAIT_NOTE_SECONDS", 0.2)
    hub = InMemoryHub()
    channel = Channel(hub.transport("host"), session="s", timeout=1.0)
    hub.transport("guest-1")

    with caplog.at_level(logging.INFO, logger="privfl.channel"), pytest.raises(PeerUnavailable):
        channel.expect({Kind.FORWARD}, {"guest-1"})

    notes = [r.getMessage() for r in caplog.records if "waiting for" in r.getMessage()]
    assert 2 <= len(notes) <= 5, notes  # one per 0.2 s of a 1 s wait
    assert all("forward from guest-1" in n and "giving up after 1 s" in n for n in notes)


def header(kind: Kind, round_: int) -> Header:
    return Header(PROTOCOL, VERSION, "s", "host", "guest-1", round_, 1, kind)


def test_the_guest_bar_follows_the_hosts_batches_and_finish() -> None:
    observe, instance = party_progress("guest", 10)
    for epoch in range(4):
        observe("received", "host", header(Kind.BATCH, epoch), [])
    assert instance.n == 3  # epoch 3 has begun, three are done
    observe("received", "host", header(Kind.FINISH, 0), [])
    assert instance.n == instance.total == 4  # stopped early: the bar ends full
    instance.close()


class LateTransport:
    """A transport whose peer comes online only after a few failed sends."""

    name = "guest-1"

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.sent: list[list[bytes]] = []

    def send(self, peer: str, frames: list[bytes]) -> None:
        if self.failures:
            self.failures -= 1
            raise PeerUnavailable(f"could not reach {peer}")
        self.sent.append(list(frames))

    def recv(self, timeout: float) -> None:
        return None

    def close(self) -> None:
        pass


def test_a_peer_that_starts_late_is_waited_for_once(caplog: pytest.LogCaptureFixture) -> None:
    # Retries come FIRST_CONTACT_POLL_SECONDS apart: the peer comes online after ~1.5 s.
    transport = LateTransport(failures=round(1.5 / FIRST_CONTACT_POLL_SECONDS))
    channel = Channel(transport, session="s", timeout=10.0)  # type: ignore[arg-type]

    with caplog.at_level(logging.INFO, logger="privfl.channel"):
        channel.send("host", Finish(epochs=0, reason="x"))

    assert len(transport.sent) == 1
    notes = [r.getMessage() for r in caplog.records if "to come online" in r.getMessage()]
    # The retries within a second are silent (a peer starting just after us), later
    # ones are logged: one note here, two if the retries run late on a loaded machine.
    assert 1 <= len(notes) <= 2 and all("waiting for host" in n for n in notes)
    # Once reached, a failure is reported at once (a peer that dies mid-run).
    transport.failures = 1
    with pytest.raises(PeerUnavailable):
        channel.send("host", Finish(epochs=0, reason="x"))


def test_a_peer_that_never_starts_fails_after_the_timeout() -> None:
    channel = Channel(LateTransport(failures=10**6), session="s", timeout=1.5)  # type: ignore[arg-type]

    with pytest.raises(PeerUnavailable, match="could not reach host"):
        channel.send("host", Finish(epochs=0, reason="x"))
