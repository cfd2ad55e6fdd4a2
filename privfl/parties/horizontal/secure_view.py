"""What client hosts agree on before they unmask: their view of a SecAgg+ round (v6).

Bonawitz et al.'s malicious-server variant has every client sign the survivor set and
check the others' signatures before it reveals a share, so a server cannot name a
client a survivor to some and dropped to others. Here a host speaks for its clients and
shares a key with every other host (``advert_tags.py``), so it tags its view of the
round for each of them instead, and answers the unmask stage only if every other host
with a surviving client in its clients' groups tagged the same view. The view has four
parts, one SHA-256 each: the adverts (every advert it was shown, its own included: who
takes part, with which keys), the groups (which group each grouped client is in), the
survivors it was named and (v7) the digest of the ``round_start`` it was given
(``integrity.round_digest``: the global model, the top-k indices, the round). Without
that last part an aggregator could send a target's host the real model and every other
host in its group a crafted one whose updates it knows (all-zero weights move only the
output bias), and read the target's update from the group's sum: the model
inconsistency attack of Pasquini et al. (CCS 2022).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from privfl.learning import secagg
from privfl.parties.horizontal import advert_tags
from privfl.parties.horizontal.advert_tags import HostKeys
from privfl.protocol import secagg_messages as wire


def _digest(label: bytes, parts: Iterable[bytes]) -> bytes:
    return hashlib.sha256(b"".join(len(p).to_bytes(8, "big") + p for p in [label, *parts])).digest()


def _ints(values: Iterable[int]) -> bytes:
    return np.array(sorted(values), dtype="<i8").tobytes()


@dataclass
class View:
    """What a host was shown of the round at the neighbours stage, and then the survivors."""

    adverts: dict[int, bytes] = field(default_factory=dict)  # host index → advert digest
    placement: dict[int, int] = field(default_factory=dict)  # grouped client → its group
    owner: dict[int, str] = field(default_factory=dict)  # every advertised client → host
    alive: frozenset[int] = frozenset()
    model: bytes = b""  # the round_start this host was given (integrity.round_digest)

    def digests(self) -> tuple[bytes, ...]:
        """One digest per ``wire.VIEW_PARTS``: adverts, groups, survivors, models."""
        adverts = [i.to_bytes(8, "big") + self.adverts[i] for i in sorted(self.adverts)]
        pairs = np.array(sorted(self.placement.items()), dtype="<i8").reshape(-1, 2)
        return (
            _digest(b"privfl secagg view adverts v1", adverts),
            _digest(b"privfl secagg view groups v1", [pairs.tobytes()]),  # (client, group) rows
            _digest(b"privfl secagg view survivors v1", [_ints(self.alive)]),
            _digest(b"privfl secagg view model v1", [self.model]),
        )

    def peers(self, me: str, groups: set[int]) -> set[str]:
        """The other hosts with a surviving client in ``groups``: each must agree."""
        return {self.owner[c] for c in self.alive if self.placement.get(c) in groups} - {me}


def _listed(parts: list[str]) -> str:
    return " and ".join([", ".join(parts[:-1]), parts[-1]] if len(parts) > 1 else parts)


def check_agreement(
    keys: HostKeys,
    session: str,
    round_: int,
    view: View,
    groups: set[int],
    body: wire.SecConsistency,
) -> None:
    """Refuse to unmask (SecAggAborted, one line) unless every other host with a surviving
    client in ``groups`` sent a view tag for us that matches our view. The tags of hosts
    outside our groups are not checked: a host could otherwise stop every group of the
    round, not only its own, with tags that do not verify."""
    mine = view.digests()
    peers = view.peers(keys.me, groups)
    got: set[str] = set()
    for h, index in enumerate(body.hosts.tolist()):
        if index >= len(keys.order) or keys.order[index] == keys.me:
            raise secagg.SecAggAborted(f"a view said to be from client host #{index}")
        sender = keys.order[index]
        if sender not in peers:
            continue
        tags = body.tags[h * wire.VIEW_BYTES : (h + 1) * wire.VIEW_BYTES]
        differs = advert_tags.view_differs(keys, sender, session, round_, mine, tags)
        if differs:
            raise secagg.SecAggAborted(
                f"{sender} was shown other {_listed(differs)} than we were: the "
                "aggregator's views of the round disagree"
            )
        got.add(sender)
    missing = sorted(peers - got)
    if missing:
        raise secagg.SecAggAborted(
            f"no view from {', '.join(missing)}, which the aggregator names with surviving "
            "clients in our groups"
        )
