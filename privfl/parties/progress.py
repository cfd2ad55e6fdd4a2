"""Progress bars for the Server and the guests, fed by the messages their channel carries.

The Host draws its own bar from its epoch records; the other parties learn the epoch
from the envelopes: a guest from each ``batch`` the Host opens, the Server from each
``epoch_result`` it sends. While a peer reports progress (busy is not dead), the bar
says what we wait for: ``waiting for guest-1: encrypting scores 212/426``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from tqdm import tqdm

from privfl.errors import ProtocolError
from privfl.protocol import codec
from privfl.protocol.channel import describe
from privfl.protocol.messages import Header, Kind, Progress

Observer = Callable[[str, str, Header, list[bytes]], None]


def party_progress(role: str, epochs: int) -> tuple[Observer, tqdm[None]]:
    """An observer for the party's Channel, and the bar it advances (close it at the end)."""
    label = {"server": "decrypting (server)", "guest": "encrypted training (guest)"}[role]
    bar = tqdm(total=epochs, desc=label, unit="epoch", file=sys.stderr, dynamic_ncols=True)
    watched = ("sent", Kind.EPOCH_RESULT) if role == "server" else ("received", Kind.BATCH)

    last = [0]

    def observe(direction: str, peer: str, header: Header, frames: list[bytes]) -> None:
        if direction == "received":
            bar.set_postfix_str(waiting_for(peer, header, frames), refresh=False)
        if role == "guest" and (direction, header.kind) == ("received", Kind.FINISH):
            bar.total = last[0] + 1  # the run may have stopped before the last epoch
            advance(last[0] + 1)
        elif (direction, header.kind) == watched:
            last[0] = header.round
            advance(header.round + 1 if role == "server" else header.round)

    def advance(done: int) -> None:
        if done > bar.n:
            bar.update(min(done, bar.total) - bar.n)

    return observe, bar


def waiting_for(peer: str, header: Header, frames: list[bytes]) -> str:
    """``waiting for guest-1: encrypting scores 212/426`` for a progress message, else ''."""
    if header.kind is not Kind.PROGRESS or len(frames) != 2:
        return ""
    try:
        body = codec.decode_body(header.kind, frames[1])
    except ProtocolError:
        return ""
    return f"waiting for {describe(peer, body)}" if isinstance(body, Progress) else ""
