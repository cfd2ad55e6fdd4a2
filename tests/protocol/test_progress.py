"""Busy is not dead: a peer's advancing progress keeps a wait alive, a stuck one does not."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pytest

from privfl import pulse
from privfl.errors import PeerAborted, PeerUnavailable, ProtocolError
from privfl.protocol import channel as channel_module
from privfl.protocol.channel import Channel
from privfl.protocol.memory import InMemoryHub
from privfl.protocol.messages import Abort, Finish, Kind, Progress

SESSION = "job-1"
TIMEOUT = 1.0  # bob's wait; alice stays busy three times as long


@pytest.fixture
def pair(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Channel, Channel]]:
    """alice (the busy party) and bob (the waiting one) on one in-memory hub."""
    monkeypatch.setattr(channel_module, "PULSE_SECONDS", 0.05)
    hub = InMemoryHub()
    alice, bob = hub.transport("alice"), hub.transport("bob")
    yield (
        Channel(alice, session=SESSION, timeout=TIMEOUT),
        Channel(bob, session=SESSION, timeout=TIMEOUT),
    )
    alice.close()
    bob.close()


def busy(alice: Channel, seconds: float, *, advancing: bool, then: bool = True) -> threading.Thread:
    """alice works ``seconds``, ticking through privfl.pulse, then sends Finish (if ``then``)."""

    def work() -> None:
        with alice.reporting(["bob"]):
            end, done = time.monotonic() + seconds, 0
            while time.monotonic() < end:
                time.sleep(0.01)
                done += advancing
                alice.pulse("encrypting scores", min(done, 10_000), 10_000)
        if then:
            alice.send("bob", Finish(epochs=1, reason="done"))

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread


@pytest.mark.serial
def test_a_wait_lasts_as_long_as_the_peer_progresses(pair: tuple[Channel, Channel]) -> None:
    # Prepare
    alice, bob = pair
    began = time.monotonic()
    worker = busy(alice, 3 * TIMEOUT, advancing=True)

    # Act
    env = bob.expect({Kind.FINISH}, {"alice"})
    worker.join()

    # Assert: three timeouts long, and bob knew what alice was doing.
    assert isinstance(env.body, Finish)
    assert time.monotonic() - began >= 3 * TIMEOUT
    assert bob._heard["alice"][0].step == "encrypting scores"


def test_progress_that_does_not_advance_ends_the_wait_saying_so(
    pair: tuple[Channel, Channel],
) -> None:
    # Prepare: alice repeats the same count; she is alive, but stuck.
    alice, bob = pair
    worker = busy(alice, 3 * TIMEOUT, advancing=False, then=False)

    # Act
    with pytest.raises(PeerUnavailable) as caught:
        bob.expect({Kind.FINISH}, {"alice"})
    worker.join()

    # Assert: the error names the case (no progress) and the last thing heard.
    message = str(caught.value)
    assert message.startswith("no progress: no finish from alice within 1 s"), message
    assert "last heard: alice: encrypting scores 0/10000" in message, message


def test_the_waiting_side_logs_what_it_waits_for(
    pair: tuple[Channel, Channel],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Prepare
    alice, bob = pair
    monkeypatch.setattr(channel_module, "WAIT_NOTE_SECONDS", 0.3)
    worker = busy(alice, 1.5, advancing=True)

    # Act
    with caplog.at_level(logging.INFO, logger="privfl.channel"):
        bob.expect({Kind.FINISH}, {"alice"})
    worker.join()

    # Assert
    assert any(
        r.getMessage().startswith("waiting for alice: encrypting scores ")
        and r.getMessage().endswith("/10000")
        for r in caplog.records
    ), [r.getMessage() for r in caplog.records]


def test_a_busy_party_hears_an_abort_at_its_next_pulse(pair: tuple[Channel, Channel]) -> None:
    # Prepare: bob stops while alice is in the middle of a step.
    alice, bob = pair
    bob.abort(["alice"], ProtocolError("refused"))

    # Act / Assert: alice's next tick reads her inbox and ends the step.
    with alice.reporting(["bob"]), pytest.raises(PeerAborted, match="bob stopped"):
        pulse.tick(1, 2)


def test_ticks_without_a_reporter_do_nothing_and_steps_nest() -> None:
    heard: list[tuple[str, int, int]] = []
    pulse.tick(1, 2)  # no reporter: nothing happens, nothing fails
    with pulse.reporting(lambda *args: heard.append(args)), pulse.step("outer"):
        with pulse.step("inner", 4):
            pulse.tick(9, 4)
        pulse.tick(1, 2)
    assert heard == [("outer", 0, 0), ("inner", 0, 4), ("inner", 4, 4), ("outer", 1, 2)]


def test_progress_is_validated_like_every_message() -> None:
    with pytest.raises(ProtocolError):
        Progress(step="x", done=3, total=2)
    with pytest.raises(ProtocolError):
        Progress(step="x" * 65, done=0, total=0)
    assert Abort("x") != Progress("x", 0, 0)


def test_an_explicit_window_is_not_stretched_by_progress(pair: tuple[Channel, Channel]) -> None:
    # Prepare: a window of one timeout (the horizontal rounds, the Shuffler's window).
    alice, bob = pair
    worker = busy(alice, 3 * TIMEOUT, advancing=True, then=False)

    # Act / Assert: the window ends when it says, progress or not.
    with pytest.raises(PeerUnavailable, match="no progress: no finish from alice"):
        bob.expect({Kind.FINISH}, {"alice"}, TIMEOUT)
    worker.join()
