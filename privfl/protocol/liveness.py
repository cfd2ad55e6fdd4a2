"""Which peers are connected: socket-monitor events of the DEALERs that reach each peer.

A party's DEALER to a peer carries ZMTP heartbeats (transport.py): if the peer's
process dies, the TCP connection closes at once; if it freezes (SIGSTOP, a hung
host), the heartbeat times out after ``HEARTBEAT_TIMEOUT_MS``. Either way libzmq
reports ``EVENT_DISCONNECTED`` and keeps reconnecting; a new connection counts
as back only once its CURVE handshake succeeds. A peer whose connection has been
down for longer than the grace is *lost*. A peer that is merely busy (a long
encryption) keeps its connection: libzmq's I/O thread answers heartbeats on its
own, without Python. A peer never connected yet is not lost, only not started.

Events are read without blocking by whoever calls `lost` (the transport's own
thread), so no socket is shared between threads. A socket is watched before it
connects: an event libzmq emits before its monitor exists is lost for good.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass

import zmq
from zmq.utils.monitor import recv_monitor_message

log = logging.getLogger("privfl.protocol.liveness")

DEFAULT_GRACE_SECONDS = 3.0
_EVENTS = zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED


@dataclass
class Link:
    """One peer's connection state as the monitor events told it."""

    up: bool = False
    ever_up: bool = False
    down_since: float = 0.0
    ups: int = 0  # how many times a connection came up (a relayed party says hello each time)

    def on_event(self, event: int, now: float) -> None:
        """Apply one monitor event: a finished handshake is up, a disconnect is down."""
        if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            self.up = self.ever_up = True
            self.ups += 1
        elif event == zmq.EVENT_DISCONNECTED and self.up:
            # Failed reconnects to a frozen peer disconnect again: keep the first time.
            self.up, self.down_since = False, now

    def lost_for(self, now: float, grace: float) -> float | None:
        """Seconds since the connection went, if it was up once and stayed away past ``grace``."""
        if self.ever_up and not self.up and now - self.down_since >= grace:
            return now - self.down_since
        return None


class LinkWatch:
    """Monitors one socket per peer; tells which peers are lost."""

    def __init__(self, owner: str, grace: float = DEFAULT_GRACE_SECONDS) -> None:
        if grace <= 0:
            raise ValueError("the liveness grace must be positive")
        self.owner = owner
        self.grace = grace
        self._watched: dict[str, tuple[zmq.Socket[bytes], zmq.Socket[bytes]]] = {}
        self._links: dict[str, Link] = {}

    def watch(self, peer: str, sock: zmq.Socket[bytes]) -> None:
        """Follow the connections of ``sock``, the socket that reaches ``peer``."""
        self._watched[peer] = (sock, sock.get_monitor_socket(_EVENTS))
        self._links[peer] = Link()

    def _drain(self) -> None:
        now = time.monotonic()
        for peer, (_, monitor) in self._watched.items():
            link = self._links[peer]
            while monitor.poll(0):
                event = int(recv_monitor_message(monitor)["event"])
                was_up = link.up
                link.on_event(event, now)
                if was_up != link.up:
                    log.info(
                        "%s: connection to %s %s",
                        self.owner,
                        peer,
                        "is up" if link.up else "went down",
                    )

    def lost(self) -> dict[str, float]:
        """Peers whose connection went and did not come back within the grace, and since when."""
        self._drain()
        now = time.monotonic()
        lost = {}
        for peer, link in self._links.items():
            age = link.lost_for(now, self.grace)
            if age is not None:
                lost[peer] = age
        return lost

    def ups(self, peer: str) -> int:
        """How many times the connection to ``peer`` has come up so far (0: never)."""
        self._drain()
        return self._links[peer].ups

    def is_up(self, peer: str) -> bool:
        """Whether the connection to ``peer`` is up now."""
        self._drain()
        return self._links[peer].up

    def never_up(self) -> list[str]:
        """Peers whose connection has not come up once yet: not started, or failed to start."""
        self._drain()
        return sorted(peer for peer, link in self._links.items() if not link.ever_up)

    def close(self) -> None:
        """Stop monitoring (before the sockets and the context close)."""
        for sock, monitor in self._watched.values():
            with contextlib.suppress(zmq.ZMQError):
                sock.disable_monitor()
            monitor.close(linger=0)
        self._watched.clear()


def lost_message(owner: str, lost: dict[str, float], grace: float) -> str:
    """The one-line error for peers whose connection is gone."""
    names = ", ".join(sorted(lost))
    longest = max(lost.values())
    return (
        f"{owner} lost its connection to {names} {longest:.0f} s ago and it did not come back "
        f"within the {grace:g} s grace: it exited, crashed, froze or was cut off; see its log"
    )
