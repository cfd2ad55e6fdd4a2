"""A hostile relay replays frames from one run of a kit into a later run of the same kit.

The job's session id is the kit's: ``--resume``, ``--overwrite`` and every ``vfl predict``
session reuse it, and each process numbers its seals from 1 again. So the relay, which
keeps what it carried in run 1, hands it to the recipient in run 2 in place of what the
sender really sent. Each transport draws a fresh session nonce (OS CSPRNG) and every seal
binds both ends' nonces (protocol/seal.py): a frame of run 1 names the recipient's run-1
nonce and is refused with one line naming the relay. Leaky arm: nonces fixed for the
kit (seals that bind only the kit, as before): 3/3 replayed frames are accepted, in order.
"""

from __future__ import annotations

from typing import Any

import pytest
from relay_harness import NAMES, SECRET, Keys, alice_tells_bob, relayed, running_relay
from relay_harness import keys as keys  # a module-scoped fixture

from privfl.protocol.relay import Outgoing, RelayCore
from privfl.protocol.seal import OVERHEAD, SealBroken

FIXED = {"alice": b"A" * 16, "bob": b"B" * 16}  # the leaky arm: the same in every run


class Keeps(RelayCore):
    """Run 1: forwards honestly and keeps alice's data seals for bob."""

    def __init__(self, parties: frozenset[str]) -> None:
        super().__init__(parties)
        self.kept: list[bytes] = []

    def forward(self, sender: str, recipient: str, sealed: bytes) -> Outgoing:
        if sender == "alice" and len(sealed) > OVERHEAD:  # data, not an announcement
            self.kept.append(sealed)
        return super().forward(sender, recipient, sealed)


class Replays(RelayCore):
    """Run 2: delivers run 1's seals in place of alice's first data seal, drops the rest."""

    def __init__(self, parties: frozenset[str], old: list[bytes]) -> None:
        super().__init__(parties)
        self.old: list[bytes] | None = old

    def forward(self, sender: str, recipient: str, sealed: bytes) -> Outgoing:
        if sender != "alice" or len(sealed) == OVERHEAD:
            return super().forward(sender, recipient, sealed)
        old, self.old = self.old or [], None
        deliver = RelayCore.forward
        return [o for s in old for o in deliver(self, sender, recipient, s)]


def one_run(keys: Keys, core: RelayCore, *, fixed: bool, sends: int) -> list[Any]:
    """alice sends ``sends`` messages to bob; what bob's transport delivers (or the error)."""
    nonce = (lambda n: FIXED[n]) if fixed else (lambda n: None)
    with running_relay(keys, NAMES, core=core) as relay:
        a = relayed(keys, "alice", ["bob"], relay, session_nonce=nonce("alice"))
        b = relayed(keys, "bob", ["alice"], relay, session_nonce=nonce("bob"))
        return alice_tells_bob(a, b, sends, 3, polls=(0.01, 0.2), connect=True)


def replayed_into_a_later_run(keys: Keys, *, fixed: bool) -> list[Any]:
    first = Keeps(frozenset(NAMES))
    assert len(one_run(keys, first, fixed=fixed, sends=3)) == 3 and len(first.kept) == 3
    return one_run(keys, Replays(frozenset(NAMES), first.kept), fixed=fixed, sends=1)


def test_a_frame_from_an_earlier_run_is_refused_naming_the_relay(keys: Keys) -> None:
    got = replayed_into_a_later_run(keys, fixed=False)

    (error,) = got  # nothing of run 1 was delivered
    assert isinstance(error, SealBroken), got
    line = str(error)
    assert "sealed for another run" in line and "the relay at tcp://127.0.0.1:" in line
    assert "\n" not in line


def test_leaky_arm_seals_that_bind_only_the_kit_accept_all_three(keys: Keys) -> None:
    got = replayed_into_a_later_run(keys, fixed=True)

    assert got == [("alice", [b"%d" % k, SECRET]) for k in range(3)]


def test_a_restarted_sender_is_refused_by_a_recipient_still_in_its_run(keys: Keys) -> None:
    """alice's second process (numbers from 1 again) cannot continue bob's run of alice."""
    from relay_harness import CONTEXT

    from privfl.protocol.seal import Sealer

    def sealer(name: str, peer: str) -> Sealer:
        return Sealer(name, keys[name][1], {peer: keys[peer][0]}, CONTEXT)

    bob, first, second = sealer("bob", "alice"), sealer("alice", "bob"), sealer("alice", "bob")
    for alice in (first, second):
        alice.open("bob", bob.announce("alice"))
    assert bob.open("alice", first.seal("bob", b"one")) == b"one"

    with pytest.raises(SealBroken, match="came from another run of alice"):
        bob.open("alice", second.seal("bob", b"one again"))
