"""A party of a mixed job: some peers direct, the others through the relay.

Sends go to the transport that reaches the peer; a receive reads whichever has a
message, the relayed one first (its messages are already queued in memory once read).
"""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence

from privfl.protocol.relayed import RelayedTransport
from privfl.protocol.transport import Closeable, Listener, Outbound, ZmqTransport

Direct = ZmqTransport | Outbound | Listener
POLL_SLICE = 0.01  # seconds a receive listens on the direct sockets before looking again


class RoutedTransport(Closeable):
    """``relayed`` reaches the peers in ``via``; ``direct`` every other one."""

    def __init__(self, direct: Direct, relayed: RelayedTransport, via: Collection[str]) -> None:
        self.name = direct.name
        self._direct, self._relayed, self._via = direct, relayed, frozenset(via)

    def _for(self, peer: str) -> Direct | RelayedTransport:
        return self._relayed if peer in self._via else self._direct

    def send(self, peer: str, frames: Sequence[bytes]) -> None:
        self._for(peer).send(peer, frames)

    def try_send(self, peer: str, frames: Sequence[bytes]) -> bool:
        transport = self._for(peer)
        try_send = getattr(transport, "try_send", None)
        if try_send is None:  # a Listener answers over the peer's own connection
            transport.send(peer, frames)
            return True
        return bool(try_send(peer, frames))

    def recv(self, timeout: float) -> tuple[str, list[bytes]] | None:
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            got = self._relayed.recv(0) or self._direct.recv(
                min(POLL_SLICE, max(0.0, deadline - time.monotonic()))
            )
            if got is not None or time.monotonic() >= deadline:
                return got

    def connected(self, peer: str) -> bool:
        connected = getattr(self._for(peer), "connected", None)
        return connected(peer) if connected is not None else True

    def lost_peers(self) -> dict[str, float]:
        lost = getattr(self._direct, "lost_peers", dict)
        return {**lost(), **self._relayed.lost_peers()}

    def unconnected_peers(self) -> dict[str, str]:
        unconnected = getattr(self._direct, "unconnected_peers", dict)
        return {**unconnected(), **self._relayed.unconnected_peers()}

    @property
    def grace(self) -> float:
        return self._relayed.grace

    def close(self) -> None:
        self._relayed.close()
        self._direct.close()
