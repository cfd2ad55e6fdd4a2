"""Transports for the horizontal mode: listeners (aggregator, Shuffler) and outbound-only clients.

A listener binds one CURVE-server ROUTER, admits exactly the allow-listed keys
(the same ZAP handler as the vertical mode) and answers each peer on the
connection that peer opened, so client hosts never listen on a port. A client
host opens one CURVE DEALER per listener it talks to, and watches the connections
of those in ``watch`` (protocol/liveness.py): a lost aggregator ends a client host's
or the Shuffler's wait within the grace, not after ``timeout_seconds``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Collection, Mapping, Sequence

import zmq

from privfl.errors import ConfigError, PeerUnavailable, PrivflError
from privfl.protocol.keys import KeyRing, check_party_name
from privfl.protocol.liveness import DEFAULT_GRACE_SECONDS, LinkWatch, lost_message
from privfl.protocol.transport import (
    HEARTBEAT_IVL_MS,
    HEARTBEAT_TIMEOUT_MS,
    SEND_POLL_MS,
    Closeable,
    frame_property,
)
from privfl.protocol.zap import ZAP_DOMAIN, AllowListAuthenticator, enforce_zap_domain


class _Base(Closeable):
    def __init__(self, name: str, keys: KeyRing, send_timeout: float, linger_ms: int) -> None:
        self.name = check_party_name(name)
        if keys.name != self.name:
            raise ConfigError(f"key ring belongs to {keys.name!r}, not to {self.name!r}")
        self._keys = keys
        self._send_timeout_ms = max(0, round(send_timeout * 1000))
        self._linger_ms = linger_ms
        self._ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self._sockets: list[zmq.Socket[bytes]] = []
        self._closed = False

    def _socket(self, kind: int) -> zmq.Socket[bytes]:
        sock = self._ctx.socket(kind)
        self._sockets.append(sock)
        sock.setsockopt(zmq.LINGER, self._linger_ms)
        sock.setsockopt(zmq.HEARTBEAT_IVL, HEARTBEAT_IVL_MS)
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, HEARTBEAT_TIMEOUT_MS)
        sock.setsockopt(zmq.HEARTBEAT_TTL, HEARTBEAT_TIMEOUT_MS)
        sock.setsockopt(zmq.SNDTIMEO, self._send_timeout_ms)
        return sock

    def _check_open(self) -> None:
        if self._closed:
            raise PrivflError(f"transport {self.name!r} is closed; create a new one")

    def _close_extra(self) -> None:
        """Hook for subclasses (the listener stops its ZAP thread)."""

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for sock in self._sockets:
            sock.close(linger=self._linger_ms)
        self._close_extra()
        self._ctx.term()


class Listener(_Base):
    """One ROUTER bound at ``endpoint``; replies go back over each peer's own connection."""

    def __init__(
        self,
        name: str,
        endpoint: str,
        keys: KeyRing,
        *,
        send_timeout: float = 10.0,
        linger_ms: int = 1000,
    ) -> None:
        super().__init__(name, keys, send_timeout, linger_ms)
        self._auth: AllowListAuthenticator | None = None
        try:
            self._auth = AllowListAuthenticator(self._ctx, self.name, keys.peers)
            self._auth.start()
            self._router = self._socket(zmq.ROUTER)
            self._router.setsockopt(zmq.ROUTER_HANDOVER, 1)
            self._router.setsockopt(
                zmq.ROUTER_MANDATORY, 1
            )  # unknown peer: an error, not a silent drop
            self._router.setsockopt(zmq.CURVE_SERVER, 1)
            self._router.setsockopt(zmq.CURVE_PUBLICKEY, keys.public)
            self._router.setsockopt(zmq.CURVE_SECRETKEY, keys.secret)
            self._router.setsockopt(zmq.ZAP_DOMAIN, ZAP_DOMAIN.encode())
            enforce_zap_domain(self._router)
            self._router.bind(endpoint)
        except zmq.ZMQError as exc:
            self.close()
            raise ConfigError(
                f"{name!r} cannot listen on {endpoint}: {exc}; is the port in use?"
            ) from exc

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
            parts = self._router.recv_multipart(copy=False)
            sender = parts[0].bytes.decode("utf-8", "replace")
            if (
                len(parts) >= 2
                and sender in self._keys.peers
                and frame_property(parts[0], "User-Id") == sender
            ):
                return sender, [p.bytes for p in parts[1:]]
            if time.monotonic() >= deadline:
                return None

    def _close_extra(self) -> None:
        if self._auth is not None:
            self._auth.stop()


class Outbound(_Base):
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
        super().__init__(name, keys, send_timeout, linger_ms)
        self._dealers: dict[str, zmq.Socket[bytes]] = {}
        self._poller = zmq.Poller()
        self._links = LinkWatch(self.name, grace)
        for peer, endpoint in peers.items():
            server_key = keys.peers.get(peer)
            if server_key is None:
                self.close()
                raise ConfigError(f"no public key for {peer!r}; add its .key file to the kit")
            dealer = self._socket(zmq.DEALER)
            dealer.setsockopt(zmq.ROUTING_ID, self.name.encode())
            dealer.setsockopt(zmq.IMMEDIATE, 1)
            dealer.setsockopt(zmq.CURVE_SERVERKEY, server_key)
            dealer.setsockopt(zmq.CURVE_PUBLICKEY, keys.public)
            dealer.setsockopt(zmq.CURVE_SECRETKEY, keys.secret)
            if peer in watch:
                self._links.watch(peer, dealer)  # before connecting: no event may be missed
            try:
                dealer.connect(endpoint)
            except zmq.ZMQError as exc:
                self.close()
                raise ConfigError(f"endpoint {endpoint!r} of {peer!r} is invalid: {exc}") from exc
            self._dealers[peer] = dealer
            self._poller.register(dealer, zmq.POLLIN)

    def send(self, peer: str, frames: Sequence[bytes]) -> None:
        self._check_open()
        dealer = self._dealers.get(peer)
        if dealer is None:
            raise ConfigError(f"{self.name!r} has no peer {peer!r}")
        deadline = time.monotonic() + self._send_timeout_ms / 1000
        while True:
            try:
                dealer.send_multipart(list(frames), flags=zmq.NOBLOCK)
                return
            except zmq.Again:
                pass
            lost = self._links.lost()
            if peer in lost:  # gone for good: no point waiting out the send timeout
                raise PeerUnavailable(lost_message(self.name, {peer: lost[peer]}, self.grace))
            left = deadline - time.monotonic()
            if left <= 0:
                raise PeerUnavailable(
                    f"{self.name!r} could not reach {peer!r} within "
                    f"{self._send_timeout_ms / 1000:g} s; "
                    "is it running, and does it allow-list our key?"
                )
            dealer.poll(min(SEND_POLL_MS, math.ceil(left * 1000)), zmq.POLLOUT)

    def lost_peers(self) -> dict[str, float]:
        """Watched peers whose connection went and did not come back within the grace."""
        self._check_open()
        return self._links.lost()

    @property
    def grace(self) -> float:
        return self._links.grace

    def _close_extra(self) -> None:
        self._links.close()

    def recv(self, timeout: float) -> tuple[str, list[bytes]] | None:
        self._check_open()
        ready = dict(self._poller.poll(max(0, math.ceil(timeout * 1000))))
        for peer, dealer in self._dealers.items():
            if ready.get(dealer):
                return peer, dealer.recv_multipart()
        return None
