"""Moves opaque multipart frames between named parties over ZeroMQ with CURVE.

Every socket of both modes is made by :class:`Sockets`: bounded linger, ZMTP
heartbeats, the CURVE server (a ROUTER, behind the ZAP allow-list) or client (a
DEALER) options, and the liveness watch of a DEALER's connection.

The vertical mode (:class:`ZmqTransport`): each party has one ROUTER inbox and
one DEALER per peer. With CURVE, a ZAP
handler on the transport's own context (protocol/zap.py) admits exactly the
allow-listed keys and stamps each connection with the peer's name as User-Id;
`recv` then drops any message whose routing id does not name that authenticated peer.

A DEALER's routing id is ``<name>/<128 random bits>``, fresh per socket, so it is a
route secret: only its owner and the receiving inbox ever see it (CURVE encrypts the
handshake that carries it). ROUTER_HANDOVER lets a restarted connection of the same
DEALER take its route back at once; another allow-listed party cannot take a route
over, because it cannot present that id — connecting under a bare ``<name>`` only
opens a route of its own, whose messages are refused (User-Id ≠ name).
A LinkWatch (protocol/liveness.py) follows each DEALER's connection, so a peer
whose connection is gone for longer than the grace is reported as lost.
The horizontal mode: only the aggregator and the Shuffler listen
(:class:`Listener`, one ROUTER that answers each peer over the connection that
peer opened), so client hosts never open a port (:class:`Outbound`, one DEALER per
listener); an Outbound watches the connections of the peers in ``watch``, so a
lost aggregator ends a client host's or the Shuffler's wait within the grace.
The in-memory transport for tests lives in protocol/memory.py.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import secrets
import socket
import time
from collections.abc import Collection, Mapping, Sequence
from types import TracebackType
from typing import Protocol, Self

import zmq
from zmq.utils.monitor import recv_monitor_message

from privfl.errors import ConfigError, PeerUnavailable, PrivflError
from privfl.protocol.keys import KeyRing, check_party_name, fingerprint
from privfl.protocol.liveness import (
    DEFAULT_GRACE_SECONDS,
    LinkWatch,
    lost_message,
    unproven_message,
)
from privfl.protocol.zap import (
    ZAP_DOMAIN,
    AllowListAuthenticator,
    HandshakeWatch,
    enforce_zap_domain,
)

log = logging.getLogger(__name__)


def should_log(count: int) -> bool:
    """Log the first 20 refusals from a peer, then every 1000th."""
    return count <= 20 or count % 1000 == 0


HEARTBEAT_IVL_MS = 1000
HEARTBEAT_TIMEOUT_MS = 5000
SEND_POLL_MS = 250  # how often a waiting send checks whether its peer is lost
# Larger frames make libzmq drop the connection before buffering them: the
# reliable layer (protocol/reliable.py) never sends a frame over 1 MiB.
MAX_WIRE_FRAME = 1024 * 1024 + 64


class Transport(Protocol):
    """What protocol code needs from the network: send frames to a peer, receive with a timeout."""

    name: str

    def send(self, peer: str, frames: Sequence[bytes]) -> None:
        """Queue one multipart message for `peer`; raise PeerUnavailable if it cannot be."""
        ...

    def recv(self, timeout: float) -> tuple[str, list[bytes]] | None:
        """Return (sender, frames) of the next accepted message, or None after `timeout` s."""
        ...

    def close(self) -> None:
        """Release every resource; calling it again does nothing."""
        ...


class Closeable:
    """Context-manager support for anything with an idempotent `close()`."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class Sockets:
    """One ZeroMQ context, the ZAP handler of its ROUTER, and every socket made on it.

    ``keys`` None (tests only, ``curve=False`` of ZmqTransport) makes plain sockets.
    ``send_timeout`` bounds a blocking send (None: sends never block).
    """

    def __init__(
        self,
        name: str,
        keys: KeyRing | None,
        *,
        linger_ms: int,
        send_timeout: float | None = None,
    ) -> None:
        self.name = name
        self.keys = keys
        self.linger_ms = linger_ms
        self.send_timeout_ms = None if send_timeout is None else max(0, round(send_timeout * 1000))
        self.ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self.auth: AllowListAuthenticator | None = None
        self.sockets: list[zmq.Socket[bytes]] = []

    def socket(self, kind: int) -> zmq.Socket[bytes]:
        """A socket with bounded linger and ZMTP heartbeats, so dead peers are noticed."""
        sock = self.ctx.socket(kind)
        self.sockets.append(sock)  # registered first so close() cleans up on failure
        sock.setsockopt(zmq.LINGER, self.linger_ms)
        sock.setsockopt(zmq.HEARTBEAT_IVL, HEARTBEAT_IVL_MS)
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, HEARTBEAT_TIMEOUT_MS)
        sock.setsockopt(zmq.HEARTBEAT_TTL, HEARTBEAT_TIMEOUT_MS)
        if self.send_timeout_ms is not None:
            sock.setsockopt(zmq.SNDTIMEO, self.send_timeout_ms)
        return sock

    def router(
        self, endpoint: str, *, max_frame: int | None = None, mandatory: bool = False
    ) -> zmq.Socket[bytes]:
        """Bind a ROUTER; with keys, as a CURVE server that sends every handshake through ZAP.

        The ZAP handler starts first, so no connection is ever accepted before it runs.
        ``mandatory``: a send to a peer with no connection is an error, not a silent drop.
        """
        if self.keys is not None and self.auth is None:
            self.auth = AllowListAuthenticator(self.ctx, self.name, self.keys.peers)
            self.auth.start()
        router = self.socket(zmq.ROUTER)
        # A DEALER that reconnects keeps its routing id, and we may not have noticed
        # its old connection die yet: handover lets the new connection take the route.
        # Only the route's owner knows its id (see route_id), so no other key can.
        router.setsockopt(zmq.ROUTER_HANDOVER, 1)
        if mandatory:
            router.setsockopt(zmq.ROUTER_MANDATORY, 1)
        if max_frame is not None:
            router.setsockopt(zmq.MAXMSGSIZE, max_frame)
        if self.keys is not None:
            router.setsockopt(zmq.CURVE_SERVER, 1)
            router.setsockopt(zmq.CURVE_PUBLICKEY, self.keys.public)
            router.setsockopt(zmq.CURVE_SECRETKEY, self.keys.secret)
            router.setsockopt(zmq.ZAP_DOMAIN, ZAP_DOMAIN.encode())
            enforce_zap_domain(router)
        try:
            router.bind(endpoint)
        except zmq.ZMQError as exc:
            raise ConfigError(
                f"party {self.name!r} cannot listen on {endpoint}: {exc}; "
                "is another process using it, or is the endpoint mistyped?"
            ) from exc
        return router

    def dealer(
        self, peer: str, endpoint: str, routing_id: bytes, links: LinkWatch | None
    ) -> zmq.Socket[bytes]:
        """Connect a DEALER to ``peer`` under ``routing_id``; with keys, as its CURVE client.

        ``links`` follows the connection (registered before connecting: no event may
        be missed).
        """
        dealer = self.socket(zmq.DEALER)
        dealer.setsockopt(zmq.ROUTING_ID, routing_id)
        # Queue only onto completed (authenticated) connections, so a send to a
        # peer that is down or refuses our key times out instead of piling up.
        dealer.setsockopt(zmq.IMMEDIATE, 1)
        if self.keys is not None:
            server_key = self.keys.peers.get(peer)
            if server_key is None:
                raise ConfigError(f"no public key for peer {peer!r}; add its .key file")
            dealer.setsockopt(zmq.CURVE_SERVERKEY, server_key)
            dealer.setsockopt(zmq.CURVE_PUBLICKEY, self.keys.public)
            dealer.setsockopt(zmq.CURVE_SECRETKEY, self.keys.secret)
        if links is not None:
            links.watch(peer, dealer)
        try:
            dealer.connect(endpoint)
        except zmq.ZMQError as exc:
            raise ConfigError(f"endpoint {endpoint!r} of peer {peer!r} is invalid: {exc}") from exc
        return dealer

    def close(self, linger_ms: int | None = None) -> None:
        """Close the sockets, then stop the ZAP handler (so no handshake is left waiting on
        it), then end the context (waits ≤ linger)."""
        linger = self.linger_ms if linger_ms is None else linger_ms
        for sock in self.sockets:
            sock.close(linger=linger)
        if self.auth is not None:
            self.auth.stop()
        self.ctx.term()


def check_keys(name: str, keys: KeyRing | None, curve: bool = True) -> None:
    """Refuse a CURVE transport without keys, or with somebody else's."""
    if curve and keys is None:
        raise ConfigError(f"party {name!r} needs CURVE keys; run `privfl keys gen`")
    if keys is not None and keys.name != name:
        raise ConfigError(f"key ring belongs to {keys.name!r}, not to {name!r}")


class _Endpoint(Closeable):
    """What every transport has: a checked name and key ring, its Sockets, and one close."""

    def __init__(
        self,
        name: str,
        keys: KeyRing | None,
        *,
        curve: bool = True,
        linger_ms: int,
        send_timeout: float | None = None,
    ) -> None:
        self.name = check_party_name(name)
        check_keys(self.name, keys, curve)
        self._closed = False
        self._sockets = Sockets(
            self.name, keys if curve else None, linger_ms=linger_ms, send_timeout=send_timeout
        )

    def _check_open(self) -> None:
        if self._closed:
            raise PrivflError(f"transport {self.name!r} is closed; create a new one")

    def _stop_watching(self) -> None:
        """Stop what follows the sockets, before they close (subclasses that watch)."""

    def close(self, linger_ms: int | None = None) -> None:
        """Close the sockets, stop the ZAP handler and end the context (waits ≤ linger)."""
        if self._closed:
            return
        self._closed = True
        self._stop_watching()
        self._sockets.close(linger_ms)


class _Dealers(_Endpoint):
    """A transport that reaches its peers over DEALERs: sends wait for the connection,
    and end early, naming the peer, once the liveness watch finds it lost."""

    def __init__(
        self,
        name: str,
        peers: Mapping[str, str],
        keys: KeyRing | None,
        *,
        curve: bool = True,
        send_timeout: float,
        linger_ms: int,
        grace: float,
        socket_send_timeout: float | None = None,
    ) -> None:
        super().__init__(
            name, keys, curve=curve, linger_ms=linger_ms, send_timeout=socket_send_timeout
        )
        self._endpoints = dict(peers)
        self._send_timeout = send_timeout
        self._dealers: dict[str, zmq.Socket[bytes]] = {}
        self._links = LinkWatch(self.name, grace)

    def send(self, peer: str, frames: Sequence[bytes]) -> None:
        """Send one multipart message to `peer`, waiting at most `send_timeout` seconds.

        The wait ends early, naming the peer, once its connection is lost.
        """
        deadline = time.monotonic() + self._send_timeout
        while not self.try_send(peer, frames):
            if peer not in self._dealers:
                raise ConfigError(
                    f"{self.name!r} has no peer {peer!r}; known: {sorted(self._dealers)}"
                )
            if not frames:
                raise ValueError("a message needs at least one frame")
            lost = self._links.lost()
            if peer in lost:
                raise PeerUnavailable(
                    lost_message(self.name, {peer: lost[peer]}, self._links.grace)
                )
            unproven = self._links.unproven()
            if peer in unproven:
                where = {peer: (self._endpoints[peer], unproven[peer])}
                raise PeerUnavailable(unproven_message(self.name, where))
            left = deadline - time.monotonic()
            if left <= 0:
                raise PeerUnavailable(
                    f"{self.name!r} could not reach peer {peer!r} at {self._endpoints[peer]} "
                    f"within {self._send_timeout:g} s; check that it is running, that the "
                    "endpoint is right and that it allow-lists our public key"
                )
            self._dealers[peer].poll(min(SEND_POLL_MS, math.ceil(left * 1000)), zmq.POLLOUT)

    def lost_peers(self) -> dict[str, float]:
        """Peers whose connection went and did not come back within the grace, and since when."""
        self._check_open()
        return self._links.lost()

    def unproven_peers(self) -> dict[str, tuple[str, bool]]:
        """Peers whose endpoint fails every CURVE handshake (liveness.unproven): their
        endpoint, and whether they refuse our key (else they cannot prove theirs)."""
        self._check_open()
        return {
            peer: (self._endpoints[peer], refused)
            for peer, refused in self._links.unproven().items()
        }

    def unconnected_peers(self) -> dict[str, str]:
        """Watched peers whose connection never came up, and the endpoint we try them at."""
        self._check_open()
        return {peer: self._endpoints[peer] for peer in self._links.never_up()}

    def connected(self, peer: str) -> bool:
        """Whether a message to `peer` can be queued now (its authenticated connection is up)."""
        self._check_open()
        dealer = self._dealers.get(peer)
        # With IMMEDIATE, a DEALER is writable exactly when a handshake has completed.
        return dealer is not None and bool(dealer.poll(0, zmq.POLLOUT))

    @property
    def grace(self) -> float:
        """Seconds a lost connection may take to come back before its peer counts as lost."""
        return self._links.grace

    def try_send(self, peer: str, frames: Sequence[bytes]) -> bool:
        """Send without waiting; False if the peer is not connected or its queue is full."""
        self._check_open()
        dealer = self._dealers.get(peer)
        if dealer is None or not frames:
            return False
        try:
            dealer.send_multipart(list(frames), flags=zmq.NOBLOCK)
        except zmq.Again:
            return False
        return True

    def _stop_watching(self) -> None:
        self._links.close()


class ZmqTransport(_Dealers):
    """ROUTER inbox bound at `endpoint` plus one DEALER per peer, CURVE-authenticated by default.

    Not thread-safe (ZeroMQ sockets are not): use one instance from one thread.
    `peers` maps peer name to its endpoint; `keys.peers` is the inbox allow-list.
    `curve=False` is for tests and debugging only: anyone who can reach the port
    may then claim to be any known peer.
    """

    def __init__(
        self,
        name: str,
        endpoint: str,
        peers: Mapping[str, str],
        keys: KeyRing | None,
        *,
        curve: bool = True,
        send_timeout: float = 30.0,
        linger_ms: int = 2000,
        max_frame: int = MAX_WIRE_FRAME,
        grace: float = DEFAULT_GRACE_SECONDS,
    ) -> None:
        super().__init__(
            name,
            peers,
            keys,
            curve=curve,
            send_timeout=send_timeout,
            linger_ms=linger_ms,
            grace=grace,
        )
        self._curve = curve
        self._known = frozenset(peers) | frozenset(keys.peers if keys else ())
        self._watch: HandshakeWatch | None = None
        self._peer_keys = dict(keys.peers) if keys else {}
        self._refused = 0  # messages refused by routing id (logged as :func:`should_log` says)
        self._inbox: zmq.Socket[bytes] | None = None
        try:
            self._inbox = self._sockets.router(endpoint, max_frame=max_frame)
            if self._curve:
                self._watch = HandshakeWatch(self._inbox, self.name)
            for peer, peer_endpoint in self._endpoints.items():
                self._dealers[peer] = self._sockets.dealer(
                    peer, peer_endpoint, route_id(self.name), self._links
                )
        except BaseException:
            self.close()
            raise

    @property
    def _auth(self) -> AllowListAuthenticator | None:
        return self._sockets.auth

    def recv(self, timeout: float) -> tuple[str, list[bytes]] | None:
        """Return (sender, frames) of the next authentic message, or None after `timeout` s.

        Messages that fail the checks are dropped with a warning and do not
        extend the wait.
        """
        self._check_open()
        assert self._inbox is not None
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            wait_ms = max(0, math.ceil((deadline - time.monotonic()) * 1000))
            if not self._inbox.poll(wait_ms, zmq.POLLIN):
                return None
            accepted = self._accept(self._inbox.recv_multipart(copy=False))
            if accepted is not None:
                return accepted
            if time.monotonic() >= deadline:
                return None

    def _accept(self, parts: list[zmq.Frame]) -> tuple[str, list[bytes]] | None:
        """Return (sender, body) if the routing id is a known, authenticated peer; else None."""
        claimed = parts[0].bytes
        sender = _decode_name(claimed.split(b"/", 1)[0])
        if len(parts) < 2:
            reason = "it has no body"
        elif sender is None or sender not in self._known:
            reason = "the routing id is not a known peer"
        elif self._curve and frame_property(parts[0], "User-Id") != sender:
            reason = "the routing id does not match the authenticated key"
        else:
            return sender, [part.bytes for part in parts[1:]]
        self._refused += 1
        if not should_log(self._refused):  # a flood must not become a flood of log lines
            return None
        user = frame_property(parts[0], "User-Id") if self._curve else None
        key = self._peer_keys.get(user) if user else None
        log.warning(
            "%s: refused a message (%d so far) from %s (key %s of %s) claiming to be %r: %s",
            self.name,
            self._refused,
            frame_property(parts[0], "Peer-Address") or "?",
            fingerprint(key) if key else "-",
            user or "nobody authenticated",
            claimed,
            reason,
        )
        return None

    def _stop_watching(self) -> None:
        if self._watch is not None:
            self._watch.stop()
        super()._stop_watching()


class Listener(_Endpoint):
    """One CURVE ROUTER bound at ``endpoint``; replies go back over each peer's own connection.

    The horizontal mode's aggregator and Shuffler. Its peers connect under their bare
    name as routing id (an :class:`Outbound`), which is how a reply finds them.

    It does not watch its peers as an Outbound does (a client host that leaves ends no
    wait), but it notes which connection each peer's last message came over (the
    frame's source descriptor) and when the ROUTER's monitor says that connection
    closed: :meth:`departed_peers`, for the closing exchange, which need not wait for
    a peer that is gone.
    """

    def __init__(
        self,
        name: str,
        endpoint: str,
        keys: KeyRing,
        *,
        send_timeout: float = 10.0,
        linger_ms: int = 1000,
        grace: float = DEFAULT_GRACE_SECONDS,
    ) -> None:
        super().__init__(name, keys, linger_ms=linger_ms, send_timeout=send_timeout)
        self._peers = frozenset(keys.peers)
        self._grace = grace
        self._fd_of: dict[str, int] = {}  # the connection of each peer's last message
        self._closed_at: dict[str, float] = {}  # peers whose connection closed, and when
        self._closed_fds: dict[int, float] = {}  # closed connections not yet reused
        self._monitor: zmq.Socket[bytes] | None = None
        try:
            self._router = self._sockets.router(endpoint, mandatory=True)
            events = zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED
            self._monitor = self._router.get_monitor_socket(events)
        except BaseException:
            self.close()
            raise

    def departed_peers(self) -> set[str]:
        """Peers whose last message's connection closed over the grace ago, silent since."""
        self._check_open()
        self._drain_monitor()
        now = time.monotonic()
        return {p for p, at in self._closed_at.items() if now - at >= self._grace}

    def _drain_monitor(self) -> None:
        # Read before each message: a descriptor is reused only after its close event, and
        # a message still queued from a closed connection finds it in ``_closed_fds``.
        monitor = self._monitor
        while monitor is not None and monitor.poll(0):
            event = recv_monitor_message(monitor)
            fd, now = int(event["value"]), time.monotonic()
            if event["event"] == zmq.EVENT_ACCEPTED:
                self._closed_fds.pop(fd, None)
                continue
            self._closed_fds[fd] = now
            for peer in [p for p, mine in self._fd_of.items() if mine == fd]:
                del self._fd_of[peer]
                self._closed_at[peer] = now

    def _heard(self, peer: str, frame: zmq.Frame) -> None:
        try:  # a libzmq without the (deprecated) property: no departures noted, waits as before
            fd = int(frame.get(zmq.SRCFD))
        except (AttributeError, zmq.ZMQError):
            return
        if fd in self._closed_fds:  # read after its connection closed: still departed
            self._closed_at.setdefault(peer, self._closed_fds[fd])
            return
        self._fd_of[peer] = fd
        self._closed_at.pop(peer, None)

    def _stop_watching(self) -> None:
        if self._monitor is not None:
            with contextlib.suppress(zmq.ZMQError):
                self._router.disable_monitor()
            self._monitor.close(linger=0)

    def send(self, peer: str, frames: Sequence[bytes]) -> None:
        self._check_open()
        try:
            self._router.send_multipart([peer.encode(), *frames])
        except (zmq.Again, zmq.ZMQError) as exc:
            raise PeerUnavailable(
                f"{self.name!r} cannot reach {peer!r} (not connected: {exc})"
            ) from exc

    def recv(self, timeout: float) -> tuple[str, list[bytes]] | None:
        self._check_open()
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            wait_ms = max(0, math.ceil((deadline - time.monotonic()) * 1000))
            if not self._router.poll(wait_ms, zmq.POLLIN):
                return None
            self._drain_monitor()
            parts = self._router.recv_multipart(copy=False)
            sender = parts[0].bytes.decode("utf-8", "replace")
            if (
                len(parts) >= 2
                and sender in self._peers
                and frame_property(parts[0], "User-Id") == sender
            ):
                self._heard(sender, parts[0])
                return sender, [p.bytes for p in parts[1:]]
            if time.monotonic() >= deadline:
                return None


class Outbound(_Dealers):
    """One CURVE DEALER per listener in ``peers`` (name → endpoint); never binds."""

    def __init__(
        self,
        name: str,
        peers: Mapping[str, str],
        keys: KeyRing,
        *,
        send_timeout: float = 10.0,
        linger_ms: int = 1000,
        watch: Collection[str] = (),
        grace: float = DEFAULT_GRACE_SECONDS,
    ) -> None:
        super().__init__(
            name,
            peers,
            keys,
            send_timeout=send_timeout,
            linger_ms=linger_ms,
            grace=grace,
            socket_send_timeout=send_timeout,
        )
        self._poller = zmq.Poller()
        try:
            for peer, endpoint in peers.items():
                links = self._links if peer in watch else None
                dealer = self._sockets.dealer(peer, endpoint, self.name.encode(), links)
                self._dealers[peer] = dealer
                self._poller.register(dealer, zmq.POLLIN)
        except BaseException:
            self.close()
            raise

    def recv(self, timeout: float) -> tuple[str, list[bytes]] | None:
        self._check_open()
        ready = dict(self._poller.poll(max(0, math.ceil(timeout * 1000))))
        for peer, dealer in self._dealers.items():
            if ready.get(dealer):
                return peer, dealer.recv_multipart()
        return None


def route_id(name: str) -> bytes:
    """A DEALER's routing id: our name, then 128 random bits no other party can guess."""
    return f"{name}/{secrets.token_hex(16)}".encode()


def _decode_name(routing_id: bytes) -> str | None:
    """Return the routing id as a party name, or None if it is not valid UTF-8."""
    try:
        return routing_id.decode("utf-8")
    except UnicodeDecodeError:
        return None


def frame_property(frame: zmq.Frame, prop: str) -> str | None:
    """Return a message metadata property (e.g. User-Id) or None if libzmq has none."""
    try:
        value = frame.get(prop)
    except zmq.ZMQError:
        return None
    return value if isinstance(value, str) else None


PORTS_VAR = "PRIVFL_PORTS"  # "LOW-HIGH": where free_tcp_endpoints looks instead of port 0


def _ports() -> range | None:
    """The port range named by ``$PRIVFL_PORTS`` (both ends included), None when unset."""
    value = os.environ.get(PORTS_VAR)
    if not value:
        return None
    low, _, high = value.partition("-")
    return range(int(low), int(high) + 1)


def _bind_free(sock: socket.socket, host: str, ports: range | None) -> None:
    """Bind ``sock`` to port 0, or to a free port of ``ports`` tried from a random start."""
    if ports is None:
        sock.bind((host, 0))
        return
    start = secrets.randbelow(len(ports))
    for k in range(len(ports)):
        try:
            sock.bind((host, ports[(start + k) % len(ports)]))
            return
        except OSError:
            continue
    raise OSError(f"no free port in {PORTS_VAR}={os.environ[PORTS_VAR]}")


def free_tcp_endpoints(count: int, host: str = "127.0.0.1") -> list[str]:
    """Return `count` distinct ``tcp://host:port`` endpoints on ports that were free just now.

    Another process may grab a port between this call and the bind; fine for
    tests and local demos, not a reservation. ``$PRIVFL_PORTS`` ("LOW-HIGH") keeps
    the choice inside a range of its own: the test suite gives each parallel worker
    a range, so that no two workers ever pick the same port in that window.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    ports = _ports()
    # All sockets stay open until every port is read, so the ports differ.
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(family, socket.SOCK_STREAM)
            sockets.append(sock)
            _bind_free(sock, host, ports)
        return [f"tcp://{shown}:{sock.getsockname()[1]}" for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()
