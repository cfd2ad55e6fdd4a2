"""Host tags: a client host authenticates its SecAgg+ keys, and its view, to every other host.

The aggregator forwards every client's public keys; without authentication it could
hand a target's neighbours keys of its own (or the target its own keys as theirs),
open the shares sealed under them and unmask the target. So each host tags its
round's advert for each other client host of the job with HMAC-SHA256 under a key
only the two hosts can compute: the X25519 of one's CURVE secret key and the other's
CURVE public key (both already in every kit's ``keys/``), through the SP 800-56C KDF
of :func:`privfl.learning.secagg.derive`, bound to the session, the round and the
pair. A receiving host checks the tag of every advert it is forwarded before it uses
one key of it. CurveZMQ's handshake never uses this static-static secret; the KDF's
purpose string keeps it apart from everything else.

View tags (protocol v6) use the same pairwise secret under another purpose string
(``view tag``): before it unmasks, a host tags the round as it was shown to it (the
adverts, the groups, the survivors: one HMAC per part, ``wire.VIEW_PARTS``) for every
other client host, so an aggregator that told two hosts different stories is caught
by the hosts themselves (``secure_view.py``).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from nacl.bindings import crypto_scalarmult
from nacl.exceptions import CryptoError

from privfl.learning import secagg
from privfl.protocol.secagg_messages import TAG_BYTES, VIEW_PARTS


@dataclass(frozen=True)
class HostKeys:
    """A client host's CURVE secret key and every other client host's public key (raw)."""

    me: str
    secret: bytes = field(repr=False)
    peers: dict[str, bytes]  # every other client host of the job
    order: tuple[str, ...]  # the job's client hosts, in job-file order (the wire's indices)

    def others(self, sender: str) -> list[str]:
        """The hosts ``sender`` tags for, in the order its tags travel."""
        return others(self.order, sender)


def others(order: tuple[str, ...], sender: str) -> list[str]:
    """The client hosts of ``order`` that ``sender`` tags its advert for, in tag order."""
    return [h for h in order if h != sender]


def other_positions(order: tuple[str, ...], sender: str) -> list[int]:
    """The job-order indices of the hosts of :func:`others`: where ``sender``'s tags go."""
    return [i for i, h in enumerate(order) if h != sender]


def slot(position: Mapping[str, int], sender: str, receiver: str) -> int:
    """Where ``sender``'s tag for ``receiver`` sits among its tags: ``receiver``'s index in
    :func:`others` (``position``: each host's index in the job order), without a scan."""
    return position[receiver] - (position[receiver] > position[sender])


def digest(session: str, round_: int, host: str, clients: np.ndarray, keys: bytes) -> bytes:
    """What a tag covers: the session, round, sending host, its clients and their keys
    (``keys``: the c keys then the s keys, as the advert carries them)."""
    ids = np.ascontiguousarray(clients, dtype="<i8").tobytes()
    parts = [b"privfl secagg advert v1", session.encode(), round_.to_bytes(8, "big")]
    parts += [host.encode(), ids, keys]
    return hashlib.sha256(b"".join(len(p).to_bytes(8, "big") + p for p in parts)).digest()


def _pair_key(
    keys: HostKeys, other: str, session: str, round_: int, purpose: bytes = b"advert tag"
) -> bytes:
    try:
        shared = crypto_scalarmult(keys.secret, keys.peers[other])
    except CryptoError as exc:  # an all-zero secret: libsodium refuses a low-order key
        raise secagg.SecAggAborted(f"{other}'s public key is of low order") from exc
    low, high = sorted((keys.me, other))
    context = f"{session}|round {round_}|{low}|{high}".encode()
    return secagg.derive(shared, purpose, context)


def _tag(key: bytes, sender: str, receiver: str, covered: bytes) -> bytes:
    label = f"{sender}->{receiver}|".encode()  # one key per pair: the direction is named
    return hmac.new(key, label + covered, hashlib.sha256).digest()


def tags_for(keys: HostKeys, session: str, round_: int, covered: bytes) -> bytes:
    """This host's tags of ``covered`` for every other client host, in job order."""
    return b"".join(
        _tag(_pair_key(keys, other, session, round_), keys.me, other, covered)
        for other in keys.others(keys.me)
    )


def check(
    keys: HostKeys, sender: str, session: str, round_: int, covered: bytes, tag: bytes
) -> None:
    """Refuse an advert whose tag for us does not verify (SecAggAborted, one line)."""
    if sender == keys.me or sender not in keys.peers:
        raise secagg.SecAggAborted(f"an advert said to be from {sender!r}, not another client host")
    expected = _tag(_pair_key(keys, sender, session, round_), sender, keys.me, covered)
    if not hmac.compare_digest(expected, tag):
        raise secagg.SecAggAborted(
            f"the advert of {sender} fails its tag for {keys.me}: its keys were changed on "
            "the way (or are not this round's)"
        )


def _view_tags(key: bytes, sender: str, receiver: str, view: tuple[bytes, ...]) -> list[bytes]:
    return [
        _tag(key, sender, receiver, part.encode() + b"|" + digest)
        for part, digest in zip(VIEW_PARTS, view, strict=True)
    ]


def view_tags_for(keys: HostKeys, session: str, round_: int, view: tuple[bytes, ...]) -> bytes:
    """This host's tags of its round ``view`` (one digest per ``VIEW_PARTS``) for every
    other client host, in job order: ``VIEW_BYTES`` per host."""
    return b"".join(
        b"".join(_view_tags(_pair_key(keys, o, session, round_, b"view tag"), keys.me, o, view))
        for o in keys.others(keys.me)
    )


def view_differs(
    keys: HostKeys, sender: str, session: str, round_: int, view: tuple[bytes, ...], tags: bytes
) -> list[str]:
    """The parts of our ``view`` that ``sender``'s tags for us do not match (none: it was
    shown the same round as we were)."""
    key = _pair_key(keys, sender, session, round_, b"view tag")
    expected = _view_tags(key, sender, keys.me, view)
    got = [tags[i * TAG_BYTES : (i + 1) * TAG_BYTES] for i in range(len(VIEW_PARTS))]
    return [
        p
        for p, e, g in zip(VIEW_PARTS, expected, got, strict=True)
        if not hmac.compare_digest(e, g)
    ]
