"""The relay: one bound port that carries sealed messages between parties that connect out.

A site whose IT opens no inbound port still reaches its peers: every relayed party
connects one CURVE DEALER out to the relay (protocol/relayed.py). The relay is a CURVE
server behind the same ZAP allow-list as a party's inbox (protocol/zap.py): it admits
exactly the job's parties' keys, so a connection's User-Id *is* the sender. It forwards
``[MAGIC, "D", recipient, sealed]`` from a sender as ``[MAGIC, "D", sender, sealed]`` to
the recipient's latest connection, and tells every connected party when another one
comes (``"U"``) or its connection goes (``"X"``), which is how a party names a lost peer.
A second connection that claims routes a live connection of the same party holds (the
party started twice) is refused (``"R"``, with the reason) and logged; the first keeps
its routes.

It never holds a key that opens a seal (protocol/seal.py): what it learns is who sends
to whom, how much and when (docs/security.md, the relay's row). :class:`RelayCore`
decides what one incoming frame set becomes (pure, no sockets); :class:`Relay` does
the I/O. Wire layout: docs/protocol.md §11.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

import zmq
from zmq.utils.monitor import recv_monitor_message

from privfl.protocol.keys import KeyRing
from privfl.protocol.relayed import DATA, DOWN, HELLO, MAGIC, REFUSED, RELAY, UP
from privfl.protocol.transport import MAX_WIRE_FRAME, Closeable, Sockets, frame_property

log = logging.getLogger("privfl.relay")

# A sealed chunk: the reliable layer's 1 MiB chunk, its link header, packing and the seal.
RELAY_MAX_FRAME = MAX_WIRE_FRAME + 512
Outgoing = list[tuple[bytes, list[bytes]]]  # (routing id, frames) to send


@dataclass
class RelayCore:
    """Routes and presence: which connection of each party hears from which peer, who is up.

    A party may hold several relayed connections, each for its own peers (the
    horizontal Shuffler has one towards the client hosts and one towards the
    aggregator): a route is keyed by (recipient, sender), set by the recipient's
    hello (which lists the peers that connection serves) or by any message it sends.
    """

    parties: frozenset[str]
    routes: dict[tuple[str, str], bytes] = field(default_factory=dict)  # (to, from) -> route
    conns: dict[str, set[int]] = field(default_factory=dict)  # party -> fds of its connections
    owner: dict[int, str] = field(default_factory=dict)  # fd -> party
    # Connections closed: what they sent before closing may still be queued behind the
    # close event, and must not bring their party back up (until libzmq reuses the fd).
    closed: set[int] = field(default_factory=set)
    route_fd: dict[bytes, int] = field(default_factory=dict)  # route -> its connection's fd
    refused: set[bytes] = field(default_factory=set)  # routes of second copies: ignored

    @property
    def up(self) -> set[str]:
        """The parties with at least one connection to the relay."""
        return {p for p, fds in self.conns.items() if fds}

    def on_message(self, user: str, routing_id: bytes, fd: int, frames: list[bytes]) -> Outgoing:
        """What a frame set from the authenticated party ``user`` becomes."""
        if routing_id.split(b"/", 1)[0] != user.encode() or len(frames) < 2 or frames[0] != MAGIC:
            log.warning("relay: dropped a frame set from %s (not ours or not its route)", user)
            return []
        if routing_id in self.refused:
            return []
        claims = [f.decode("utf-8", "replace") for f in frames[2:]] if frames[1] == HELLO else []
        if frames[1] == DATA and len(frames) == 4:
            claims = [frames[2].decode("utf-8", "replace")]
        if self._taken(user, routing_id, claims):
            return self._refuse(user, routing_id)
        self.route_fd[routing_id] = fd
        out = [] if fd in self.closed else self._arrived(user, fd)
        if frames[1] == HELLO:
            return out + self._hello(user, routing_id, [p for p in claims if p in self.parties])
        if len(frames) != 4 or frames[1] != DATA:
            log.warning("relay: dropped a malformed frame set from %s", user)
            return out
        recipient = frames[2].decode("utf-8", "replace")
        if recipient in self.parties:  # its answers come back over this connection
            self.routes[(user, recipient)] = routing_id
        if (recipient, user) not in self.routes or recipient not in self.up:
            log.info("relay: %s sent to %r, which is not connected; dropped", user, recipient)
            return out
        return [*out, *self.forward(user, recipient, frames[3])]

    def _taken(self, user: str, routing_id: bytes, peers: list[str]) -> bool:
        """Whether another live connection of ``user`` already serves one of ``peers``."""
        for peer in peers:
            route = self.routes.get((user, peer))
            if route is not None and route != routing_id and self._live(route):
                return True
        return False

    def _live(self, route: bytes) -> bool:
        fd = self.route_fd.get(route)
        return fd is not None and fd in self.owner and fd not in self.closed

    def _refuse(self, user: str, routing_id: bytes) -> Outgoing:
        """A second copy of ``user``: refused, logged, told why; the first keeps its routes."""
        self.refused.add(routing_id)
        log.warning(
            "relay: refused a second connection of %s: %s is already connected for the same "
            "peers (a second copy of the party, or a restart before its old connection timed "
            "out); the first connection keeps its routes",
            user,
            user,
        )
        reason = (
            f"{user} is already connected to the relay (another copy of this party runs, or "
            "its previous run's connection has not timed out yet): stop the other copy, or "
            "retry in 10 s"
        )
        return [(routing_id, [MAGIC, REFUSED, reason.encode()])]

    def forward(self, sender: str, recipient: str, sealed: bytes) -> Outgoing:
        """The delivery of one sealed payload (a hostile relay in the tests overrides it)."""
        return [(self.routes[(recipient, sender)], [MAGIC, DATA, sender.encode(), sealed])]

    def _hello(self, user: str, routing_id: bytes, peers: list[str]) -> Outgoing:
        """Route ``peers``' messages for ``user`` to this connection; say which are up."""
        for peer in peers:
            self.routes[(user, peer)] = routing_id
        return [(routing_id, [MAGIC, UP, p.encode()]) for p in peers if p in self.up]

    def _arrived(self, user: str, fd: int) -> Outgoing:
        """Note the connection ``user`` spoke on; if it was down, tell who listens for it."""
        was_up = user in self.up
        self.conns.setdefault(user, set()).add(fd)
        self.owner[fd] = user
        if was_up:
            return []
        log.info("relay: %s is connected", user)
        return self._notice(user, UP)

    def on_accepted(self, fd: int) -> None:
        """A new connection on ``fd`` (possibly a closed one's number again)."""
        self.closed.discard(fd)

    def on_disconnect(self, fd: int) -> Outgoing:
        """A connection closed: if it was a party's last one, tell the others it is down."""
        self.closed.add(fd)
        for route in [r for r, f in self.route_fd.items() if f == fd]:
            del self.route_fd[route]  # its routes are no longer live (libzmq reuses fds)
        party = self.owner.pop(fd, None)
        if party is None:
            return []
        self.conns[party].discard(fd)
        if self.conns[party]:
            return []
        log.info("relay: %s disconnected", party)
        return self._notice(party, DOWN)

    def _notice(self, subject: str, what: bytes) -> Outgoing:
        """``subject`` is up or down, to every connection that serves it as a peer."""
        return [
            (route, [MAGIC, what, subject.encode()])
            for (to, peer), route in self.routes.items()
            if peer == subject and to in self.up
        ]


class Relay(Closeable):
    """Bind ``endpoint`` with the relay's key pair; forward until :meth:`stop` or close.

    ``parties``: name → z85 public key of every party that may connect (the job's).
    ``core``: the routing policy (tests pass a hostile one).
    """

    def __init__(
        self,
        endpoint: str,
        public: bytes,
        secret: bytes,
        parties: Mapping[str, bytes],
        *,
        core: RelayCore | None = None,
    ) -> None:
        ring = KeyRing(RELAY, public, secret, dict(parties))
        self.core = core if core is not None else RelayCore(frozenset(parties))
        self._stopping = threading.Event()
        self._sockets = Sockets(RELAY, ring, linger_ms=0)
        try:
            self._router = self._sockets.router(endpoint, max_frame=RELAY_MAX_FRAME)
            self._events = self._router.get_monitor_socket(
                zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED
            )
        except BaseException:
            self._sockets.close()
            raise
        self.endpoint = self._router.getsockopt_string(zmq.LAST_ENDPOINT)

    def serve(self) -> None:
        """Forward frame sets until :meth:`stop` is called (from any thread)."""
        poller = zmq.Poller()
        poller.register(self._router, zmq.POLLIN)
        poller.register(self._events, zmq.POLLIN)
        while not self._stopping.is_set():
            ready = dict(poller.poll(200))
            self._drain_events()  # first: a connection's events precede its messages
            if ready.get(self._router):
                self._on_frames(self._router.recv_multipart(copy=False))

    def _drain_events(self) -> None:
        while self._events.poll(0):
            event = recv_monitor_message(self._events)
            fd = int(event["value"])
            if event["event"] == zmq.EVENT_ACCEPTED:
                self.core.on_accepted(fd)
            else:
                self._send(self.core.on_disconnect(fd))

    def _on_frames(self, parts: list[zmq.Frame]) -> None:
        user = frame_property(parts[0], "User-Id")
        if user is None or len(parts) < 2:
            return
        fd = int(parts[0].get(zmq.SRCFD))  # which connection: its close is the party's loss
        self._send(self.core.on_message(user, parts[0].bytes, fd, [p.bytes for p in parts[1:]]))

    def _send(self, out: Outgoing) -> None:
        for route, frames in out:
            try:
                self._router.send_multipart([route, *frames], flags=zmq.NOBLOCK)
            except zmq.ZMQError:  # the recipient's queue is full or it is gone: a drop
                log.info("relay: could not deliver to %r now; dropped", route.split(b"/")[0])

    def stop(self) -> None:
        """Ask :meth:`serve` to return (thread-safe)."""
        self._stopping.set()

    def close(self) -> None:
        """Close the sockets (after serve has returned)."""
        self._stopping.set()
        self._events.close(linger=0)
        self._sockets.close(0)
