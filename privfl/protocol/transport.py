"""Moves opaque multipart frames between named parties over ZeroMQ with CURVE.

Each party has one ROUTER inbox and one DEALER per peer. With CURVE, a ZAP
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
The in-memory transport for tests lives in protocol/memory.py.
"""

from __future__ import annotations

import logging
import math
import secrets
import socket
import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Protocol, Self

import zmq

from privfl.errors import ConfigError, PeerUnavailable, PrivflError
from privfl.protocol.keys import KeyRing, check_party_name, fingerprint
from privfl.protocol.liveness import DEFAULT_GRACE_SECONDS, LinkWatch, lost_message
from privfl.protocol.zap import (
    ZAP_DOMAIN,
    AllowListAuthenticator,
    HandshakeWatch,
    enforce_zap_domain,
)

log = logging.getLogger(__name__)

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


class ZmqTransport(Closeable):
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
        self.name = check_party_name(name)
        self._check_keys(keys, curve)
        self._curve = curve
        self._endpoints = dict(peers)
        self._known = frozenset(peers) | frozenset(keys.peers if keys else ())
        self._send_timeout = send_timeout
        self._linger_ms = linger_ms
        self._max_frame = max_frame
        self._closed = False
        self._ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self._auth: AllowListAuthenticator | None = None
        self._watch: HandshakeWatch | None = None
        self._peer_keys = dict(keys.peers) if keys else {}
        self._inbox: zmq.Socket[bytes] | None = None
        self._dealers: dict[str, zmq.Socket[bytes]] = {}
        self._links = LinkWatch(self.name, grace)
        try:
            self._open(endpoint, keys)
        except BaseException:
            self.close()
            raise

    def _check_keys(self, keys: KeyRing | None, curve: bool) -> None:
        """Refuse a CURVE transport without keys, or with somebody else's."""
        if curve and keys is None:
            raise ConfigError(f"party {self.name!r} needs CURVE keys; run `privfl keys gen`")
        if keys is not None and keys.name != self.name:
            raise ConfigError(f"key ring belongs to {keys.name!r}, not to {self.name!r}")

    def _open(self, endpoint: str, keys: KeyRing | None) -> None:
        """Start the ZAP handler first, so no connection is ever accepted before it runs."""
        if self._curve and keys is not None:
            self._auth = AllowListAuthenticator(self._ctx, self.name, keys.peers)
            self._auth.start()
        self._inbox = self._bind_inbox(endpoint, keys)
        if self._curve:
            self._watch = HandshakeWatch(self._inbox, self.name)
        for peer, peer_endpoint in self._endpoints.items():
            self._connect_dealer(peer, peer_endpoint, keys)

    def _socket(self, kind: int) -> zmq.Socket[bytes]:
        """A socket with bounded linger and ZMTP heartbeats, so dead peers are noticed."""
        sock = self._ctx.socket(kind)
        sock.setsockopt(zmq.LINGER, self._linger_ms)
        sock.setsockopt(zmq.HEARTBEAT_IVL, HEARTBEAT_IVL_MS)
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, HEARTBEAT_TIMEOUT_MS)
        sock.setsockopt(zmq.HEARTBEAT_TTL, HEARTBEAT_TIMEOUT_MS)
        return sock

    def _bind_inbox(self, endpoint: str, keys: KeyRing | None) -> zmq.Socket[bytes]:
        """Bind the ROUTER inbox; as a CURVE server it sends every handshake through ZAP."""
        inbox = self._socket(zmq.ROUTER)
        # A DEALER that reconnects keeps its routing id, and we may not have noticed
        # its old connection die yet: handover lets the new connection take the route.
        # Only the route's owner knows its id (see route_id), so no other key can.
        inbox.setsockopt(zmq.ROUTER_HANDOVER, 1)
        inbox.setsockopt(zmq.MAXMSGSIZE, self._max_frame)
        if self._curve and keys is not None:
            inbox.setsockopt(zmq.CURVE_SERVER, 1)
            inbox.setsockopt(zmq.CURVE_PUBLICKEY, keys.public)
            inbox.setsockopt(zmq.CURVE_SECRETKEY, keys.secret)
            inbox.setsockopt(zmq.ZAP_DOMAIN, ZAP_DOMAIN.encode())
            enforce_zap_domain(inbox)
        try:
            inbox.bind(endpoint)
        except zmq.ZMQError as exc:
            inbox.close(linger=0)
            raise ConfigError(
                f"party {self.name!r} cannot listen on {endpoint}: {exc}; "
                "is another process using it, or is the endpoint mistyped?"
            ) from exc
        return inbox

    def _connect_dealer(self, peer: str, endpoint: str, keys: KeyRing | None) -> zmq.Socket[bytes]:
        """Connect a DEALER to `peer`, presenting our name as routing id and our key."""
        dealer = self._socket(zmq.DEALER)
        self._dealers[peer] = dealer  # registered first so close() cleans up on failure
        dealer.setsockopt(zmq.ROUTING_ID, route_id(self.name))
        # Queue only onto completed (authenticated) connections, so a send to a
        # peer that is down or refuses our key times out instead of piling up.
        dealer.setsockopt(zmq.IMMEDIATE, 1)
        if self._curve and keys is not None:
            server_key = keys.peers.get(peer)
            if server_key is None:
                raise ConfigError(f"no public key for peer {peer!r}; add its .key file")
            dealer.setsockopt(zmq.CURVE_SERVERKEY, server_key)
            dealer.setsockopt(zmq.CURVE_PUBLICKEY, keys.public)
            dealer.setsockopt(zmq.CURVE_SECRETKEY, keys.secret)
        self._links.watch(peer, dealer)  # before connecting: no event may be missed
        try:
            dealer.connect(endpoint)
        except zmq.ZMQError as exc:
            raise ConfigError(f"endpoint {endpoint!r} of peer {peer!r} is invalid: {exc}") from exc
        return dealer

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
            left = deadline - time.monotonic()
            if left <= 0:
                raise PeerUnavailable(
                    f"{self.name!r} could not reach peer {peer!r} at {self._endpoints[peer]} "
                    f"within {self._send_timeout:g} s; check that it is running, that the "
                    "endpoint is right and that it allow-lists our public key"
                )
            self._dealers[peer].poll(min(SEND_POLL_MS, math.ceil(left * 1000)), zmq.POLLOUT)

    def connected(self, peer: str) -> bool:
        """Whether a message to `peer` can be queued now (its authenticated connection is up)."""
        self._check_open()
        dealer = self._dealers.get(peer)
        # With IMMEDIATE, a DEALER is writable exactly when a handshake has completed.
        return dealer is not None and bool(dealer.poll(0, zmq.POLLOUT))

    def lost_peers(self) -> dict[str, float]:
        """Peers whose connection went and did not come back within the grace, and since when."""
        self._check_open()
        return self._links.lost()

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
        user = frame_property(parts[0], "User-Id") if self._curve else None
        key = self._peer_keys.get(user) if user else None
        log.warning(
            "%s: refused a message from %s (key %s of %s) claiming to be %r: %s",
            self.name,
            frame_property(parts[0], "Peer-Address") or "?",
            fingerprint(key) if key else "-",
            user or "nobody authenticated",
            claimed,
            reason,
        )
        return None

    def _check_open(self) -> None:
        if self._closed:
            raise PrivflError(f"transport {self.name!r} is closed; create a new one")

    def close(self, linger_ms: int | None = None) -> None:
        """Close the sockets, stop the ZAP handler and end the context (waits ≤ linger)."""
        linger = self._linger_ms if linger_ms is None else linger_ms
        if self._closed:
            return
        self._closed = True
        if self._watch is not None:
            self._watch.stop()
        self._links.close()
        for sock in [*self._dealers.values(), self._inbox]:
            if sock is not None:
                sock.close(linger=linger)
        # Stopped after the inbox is closed, so no handshake is left waiting on ZAP.
        if self._auth is not None:
            self._auth.stop()
        self._ctx.term()


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


def free_tcp_endpoints(count: int, host: str = "127.0.0.1") -> list[str]:
    """Return `count` distinct ``tcp://host:port`` endpoints on ports that were free just now.

    Another process may grab a port between this call and the bind; fine for
    tests and local demos, not a reservation.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    # All sockets stay open until every port is read, so the ports differ.
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(family, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind((host, 0))
        return [f"tcp://{shown}:{sock.getsockname()[1]}" for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()
