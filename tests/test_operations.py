"""Operations: a long wait is logged with the peer's name; per-party progress bars."""

from __future__ import annotations

import logging

import pytest

from privfl.errors import PeerUnavailable
from privfl.parties import channel as channel_module
from privfl.parties.channel import Channel
from privfl.parties.progress import party_progress
from privfl.protocol.messages import PROTOCOL, VERSION, Header, Kind
from privfl.protocol.transport import InMemoryHub


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
    assert 3 <= len(notes) <= 5, notes  # one per 0.2 s of a 1 s wait
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
