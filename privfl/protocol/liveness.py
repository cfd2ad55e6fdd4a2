"""Which peers are connected: socket-monitor events of the DEALERs that reach each peer.

A party's DEALER to a peer carries ZMTP heartbeats (transport.py): if the peer's
process dies, the TCP connection closes at once; if it freezes (SIGSTOP, a hung
host), the heartbeat times out after ``HEARTBEAT_TIMEOUT_MS``. Either way libzmq
reports ``EVENT_DISCONNECTED`` and keeps reconnecting; a new connection counts
as back only once its CURVE handshake succeeds. A peer whose connection has been
down for longer than the grace is *lost*. A peer that is merely busy (a long
encryption) keeps its connection: libzmq's I/O thread answers heartbeats on its
own, without Python. A peer never connected yet is not lost, only not started — unless its endpoint
answers and the CURVE handshake fails there, again and again: then whatever listens
at that endpoint cannot prove the peer's key (a party whose secret key does not match
the public key the job lists, or another program), or refuses ours. Such a peer is
*unproven*, and waiting longer will not change that.

Events are read without blocking by whoever calls `lost` (the transport's own
thread), so no socket is shared between threads. A socket is watched before it
connects: an event libzmq emits before its monitor exists is lost for good.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from dataclasses import dataclass

import zmq
from zmq.utils.monitor import recv_monitor_message

log = logging.getLogger("privfl.protocol.liveness")

DEFAULT_GRACE_SECONDS = 3.0
UNPROVEN_AFTER = 3  # failed handshakes in a row (libzmq retries every ~0.1 s): not transient
_REFUSED = zmq.EVENT_HANDSHAKE_FAILED_AUTH  # the peer's allow-list refused our key
_FAILED = zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | _REFUSED
# TCP-level: whether the endpoint ever answered (connected), or refused (a retry follows).
_TCP = zmq.EVENT_CONNECTED | zmq.EVENT_CONNECT_RETRIED
_EVENTS = zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED | _FAILED | _TCP


@dataclass
class Link:
    """One peer's connection state as the monitor events told it."""

    up: bool = False
    ever_up: bool = False
    down_since: float = 0.0
    failed: int = 0  # handshakes failed in a row
    # The last failure was the peer's allow-list refusing our key: final at once,
    # libzmq does not retry a connection after a ZAP refusal.
    refused: bool = False
    ups: int = 0  # how many times a connection came up (a relayed party says hello each time)
    answered: bool = False  # a TCP connection was made once (whatever came of its handshake)
    retries: int = 0  # connection attempts that failed at once (refused), before any answer

    def on_event(self, event: int, now: float) -> None:
        """Apply one monitor event: a finished handshake is up, a disconnect is down."""
        if event == zmq.EVENT_CONNECTED:
            self.answered = True
        elif event == zmq.EVENT_CONNECT_RETRIED:
            self.retries += 1
        if event & _FAILED:
            self.failed += 1
            self.refused = event == _REFUSED
        if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            self.up = self.ever_up = True
            self.failed = 0
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

    def unproven(self) -> dict[str, bool]:
        """Peers never up whose handshakes keep failing; True where they refuse our key."""
        self._drain()
        return {
            peer: link.refused
            for peer, link in self._links.items()
            if not link.ever_up and (link.refused or link.failed >= UNPROVEN_AFTER)
        }

    def ups(self, peer: str) -> int:
        """How many times the connection to ``peer`` has come up so far (0: never)."""
        self._drain()
        return self._links[peer].ups

    def is_up(self, peer: str) -> bool:
        """Whether the connection to ``peer`` is up now."""
        self._drain()
        return self._links[peer].up

    def reach(self, peer: str) -> Link:
        """``peer``'s link as the events told it so far (a copy: for diagnostics)."""
        self._drain()
        link = self._links[peer]
        return dataclasses.replace(link)

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


def unproven_message(owner: str, unproven: dict[str, tuple[str, bool]]) -> str:
    """The one-line error for peers whose endpoint fails every CURVE handshake."""
    peer = sorted(unproven)[0]
    endpoint, refused = unproven[peer]
    if refused:
        return (
            f"{peer} at {endpoint} refuses {owner}'s key: the job {peer} runs lists another "
            f"public key for {owner}; give {peer} the .key file that goes with {owner}'s "
            "secret key"
        )
    return (
        f"the process at {peer}'s endpoint {endpoint} fails every CURVE handshake: it does "
        f"not hold {peer}'s secret key (a key file that does not match the public key in "
        f"the job: see {peer}'s own error) or it is not a privfl party"
    )


def lost_message(owner: str, lost: dict[str, float], grace: float) -> str:
    """The one-line error for peers whose connection is gone."""
    names = ", ".join(sorted(lost))
    longest = max(lost.values())
    return (
        f"silence: {owner} lost its connection to {names} {longest:.0f} s ago and it did not "
        f"come back within the {grace:g} s grace: it exited, crashed, froze or was cut off "
        "(a busy party keeps its connection and reports progress); see its log"
    )
