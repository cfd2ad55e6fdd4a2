"""A hostile relay: it reads, flips a bit, replays, reorders, drops and impersonates.

Whoever runs the relay (in a pilot, often the Server's operator, who holds the Paillier
key) sees every frame set the parties exchange. Each is sealed for its recipient with
the two parties' own keys and numbered per direction (protocol/seal.py), so:

* reading yields ciphertext only (leaky arm: unsealed, the payload is in the clear);
* a flipped bit, a replay, a reordering or a forged message ends the recipient's run
  with one line naming the relay (leaky arm: unsealed, the flipped bit is delivered);
* a dropped message is resent by the reliable layer and arrives once: harmless.

Real sockets, real CURVE, real seals; the relay's routing policy is the attacker's.
"""

from __future__ import annotations

from typing import Any

import pytest
from relay_harness import NAMES, SECRET, Keys, alice_tells_bob, relayed, running_relay, wait_for
from relay_harness import keys as keys  # a module-scoped fixture

from privfl.protocol.channel import Channel
from privfl.protocol.messages import Finish
from privfl.protocol.relay import Outgoing, RelayCore
from privfl.protocol.relayed import RelayedTransport
from privfl.protocol.reliable import ReliableTransport
from privfl.protocol.seal import OVERHEAD, SealBroken


class Hostile(RelayCore):
    """A relay that keeps what it carries from alice to bob and lets ``tamper`` rewrite it."""

    def __init__(self, parties: frozenset[str]) -> None:
        super().__init__(parties)
        self.seen: list[bytes] = []

    def forward(self, sender: str, recipient: str, sealed: bytes) -> Outgoing:
        if sender != "alice":
            return super().forward(sender, recipient, sealed)
        self.seen.append(sealed)
        deliver = RelayCore.forward
        if len(sealed) == OVERHEAD:  # a session-nonce announcement (80 bytes): the data
            return deliver(self, sender, recipient, sealed)  # seals are the target here
        return [o for s in self.tamper(sealed) for o in deliver(self, sender, recipient, s)]

    def tamper(self, sealed: bytes) -> list[bytes]:
        return [sealed]


class Flips(Hostile):
    def tamper(self, sealed: bytes) -> list[bytes]:
        i = sealed.find(SECRET)  # unsealed: flip a bit of the secret itself
        at = i if i >= 0 else len(sealed) // 2
        return [sealed[:at] + bytes([sealed[at] ^ 1]) + sealed[at + 1 :]]


class Replays(Hostile):
    def tamper(self, sealed: bytes) -> list[bytes]:
        return [sealed, sealed]


class Reorders(Hostile):
    held: bytes | None = None

    def tamper(self, sealed: bytes) -> list[bytes]:
        if self.held is None:
            self.held = sealed
            return []
        first, self.held = self.held, None
        return [sealed, first]


class Drops(Hostile):
    dropped = 0

    def tamper(self, sealed: bytes) -> list[bytes]:
        if self.dropped < 2:
            self.dropped += 1
            return []
        return [sealed]


class Impersonates(Hostile):
    """Injects a message 'from alice' it sealed with the one key pair it has: its own."""

    forger: RelayedTransport | None = None

    def tamper(self, sealed: bytes) -> list[bytes]:
        assert self.forger is not None
        self.forger._sealer._theirs["bob"] = bytes(16)  # it guesses: it cannot know
        return [self.forger._sealer.seal("bob", SECRET)]


def pair(
    keys: Keys, relay: Any, *, sealed: bool, retry_after: float = 2.0
) -> tuple[ReliableTransport, ReliableTransport]:
    """alice's and bob's reliable transports through the relay (``retry_after``: the
    link layer's first resend, the product's 2 s by default)."""
    a = ReliableTransport(
        relayed(keys, "alice", ["bob"], relay, sealed=sealed), retry_after=retry_after
    )
    b = ReliableTransport(
        relayed(keys, "bob", ["alice"], relay, sealed=sealed), retry_after=retry_after
    )
    wait_for(lambda: all([a.connected("bob"), b.connected("alice")]))  # both polled
    return a, b


def exchange(
    core: Hostile, keys: Keys, *, sealed: bool = True, count: int = 2, retry_after: float = 2.0
) -> list[Any]:
    """alice sends ``count`` messages holding SECRET; what bob receives (or the error)."""
    with running_relay(keys, NAMES, core=core) as relay:
        a, b = pair(keys, relay, sealed=sealed, retry_after=retry_after)
        return alice_tells_bob(a, b, count, count, polls=(0.05, 0.5))


def test_the_relay_reads_only_ciphertext(keys: Keys) -> None:
    core = Hostile(frozenset(NAMES))

    got = exchange(core, keys)

    assert got == [("alice", [b"0", SECRET]), ("alice", [b"1", SECRET])]
    assert core.seen and not any(SECRET in s for s in core.seen)


def test_leaky_arm_unsealed_the_relay_reads_the_payload(keys: Keys) -> None:
    core = Hostile(frozenset(NAMES))

    exchange(core, keys, sealed=False)

    assert any(SECRET in s for s in core.seen)


@pytest.mark.parametrize(
    ("core", "why"),
    [(Flips, "failed to open"), (Replays, "out of sequence"), (Reorders, "out of sequence")],
    ids=["flips-a-bit", "replays", "reorders"],
)
def test_tampering_ends_the_run_naming_the_relay(keys: Keys, core: type[Hostile], why: str) -> None:
    got = exchange(core(frozenset(NAMES)), keys)

    error = got[-1]
    assert isinstance(error, SealBroken), got
    assert why in str(error) and "the relay at tcp://127.0.0.1:" in str(error)
    assert not any(m != ("alice", [b"0", SECRET]) for m in got[:-1])  # nothing altered got in


def test_leaky_arm_unsealed_a_flipped_bit_is_delivered(keys: Keys) -> None:
    got = exchange(Flips(frozenset(NAMES)), keys, sealed=False, count=1)

    ((sender, frames),) = got
    assert sender == "alice" and frames[1] != SECRET and len(frames[1]) == len(SECRET)


def test_a_dropped_message_is_resent_and_arrives_once(keys: Keys) -> None:
    core = Drops(frozenset(NAMES))

    # Resent after 0.25 s, then 0.5 s (doubling), not 2 s and 4 s: the same resend path.
    got = exchange(core, keys, count=1, retry_after=0.25)

    assert got == [("alice", [b"0", SECRET])] and core.dropped == 2


def test_a_message_the_relay_forges_for_a_party_does_not_open(keys: Keys) -> None:
    core = Impersonates(frozenset(NAMES))
    with running_relay(keys, NAMES, core=core) as relay:
        # The relay's own key pair is all it has: it seals as "alice" with it.
        core.forger = relayed({**keys, "alice": keys["relay"]}, "alice", ["bob"], relay)
        a, b = pair(keys, relay, sealed=True)
        try:
            a.send("bob", [b"0", b"harmless"])
            with pytest.raises(SealBroken, match=r"from alice failed to open.*the relay at"):
                wait_for(lambda: b.recv(0.2) is not None and False, seconds=30)
        finally:
            for t in (a, b, core.forger):
                t.close()


def test_through_a_channel_the_run_stops_with_one_line_naming_the_relay(keys: Keys) -> None:
    """What a party's protocol loop sees: the channel's wait raises, the message names it."""
    with running_relay(keys, NAMES, core=Flips(frozenset(NAMES))) as relay:
        a, b = pair(keys, relay, sealed=True)
        sender = Channel(a, session="s", timeout=30)
        receiver = Channel(b, session="s", timeout=30)
        try:
            sender.send("bob", Finish(epochs=1, reason="done"))
            with pytest.raises(SealBroken) as caught:
                receiver.expect_body(Finish, {"alice"})
        finally:
            a.close()
            b.close()
    line = str(caught.value)
    assert "\n" not in line and "relay" in line and "alice" in line
