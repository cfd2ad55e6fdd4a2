"""Who may connect: the ZAP allow-list authenticator and a watch on failed CURVE handshakes.

The authenticator admits exactly the allow-listed CURVE keys and stamps each
connection with the peer's name as User-Id. Handshakes that never reach ZAP (a
plain-text client, a client holding a wrong server key) are seen only by a socket
monitor; `HandshakeWatch` logs those. Every refusal is a WARNING naming the peer
address and, where one was presented, the key fingerprint; each (address, reason)
is logged once, because a refused client retries every 100 ms.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from collections.abc import Mapping
from typing import Any

import zmq
from zmq.auth.base import VERSION as ZAP_VERSION
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils import z85
from zmq.utils.monitor import recv_monitor_message

from privfl.errors import ConfigError
from privfl.protocol.keys import fingerprint

log = logging.getLogger("privfl.protocol.transport")

ZAP_DOMAIN = "privfl"
_MAX_WARNED = 1024  # distinct refused (address, reason) pairs we bother to warn about
# libzmq's ZMQ_PROTOCOL_ERROR_ZMTP_* codes for the handshakes a CURVE server refuses.
_HANDSHAKE_REASONS = {
    0x11000000: "not a CURVE client (mechanism mismatch: plain text?)",
    0x11000001: "CURVE handshake failed (the client may hold a wrong server key)",
    0x11000002: "CURVE handshake failed (malformed handshake: plain text or wrong server key?)",
}


class _OnceLog:
    """Warn once per (address, reason); bounded so a flood cannot grow memory."""

    def __init__(self, owner: str) -> None:
        self._owner = owner
        self._seen: set[tuple[str, str, str]] = set()
        self._lock = threading.Lock()

    def refused(self, address: str, key: str, reason: str) -> None:
        # A retrying client comes from a new port each time: remember the host only.
        seen = (address.rsplit(":", 1)[0] if address.count(":") == 1 else address, key, reason)
        with self._lock:
            if seen in self._seen:
                return
            if len(self._seen) < _MAX_WARNED:
                self._seen.add(seen)
        log.warning(
            "%s: refused a connection from %s (key %s): %s", self._owner, address, key, reason
        )


class AllowListAuthenticator(ThreadAuthenticator):
    """ZAP handler that admits exactly the allow-listed CURVE keys; User-Id := the peer's name."""

    def __init__(self, context: zmq.Context[Any], owner: str, peers: Mapping[str, bytes]) -> None:
        super().__init__(context=context, log=log.getChild("zap"))
        self._names_by_key: dict[bytes, str] = {}
        for peer, key in peers.items():
            if key in self._names_by_key:
                other = self._names_by_key[key]
                raise ConfigError(f"peers {other!r} and {peer!r} share one public key; fix keys")
            self._names_by_key[key] = peer
        self._once = _OnceLog(owner)
        self.configure_curve_callback(ZAP_DOMAIN, credentials_provider=self)

    def callback(self, domain: str, key: bytes) -> bool:
        """Credentials-provider hook of pyzmq's Authenticator: is this z85 key allow-listed?"""
        return domain == ZAP_DOMAIN and key in self._names_by_key

    def curve_user_id(self, client_public_key: bytes) -> str:
        """Name the authenticated connection after the peer that owns the key."""
        return self._names_by_key[z85.encode(client_public_key)]

    async def handle_zap_message(self, msg: list[bytes]) -> None:
        """Refuse anything but a well-formed CURVE request from a known key, then defer to pyzmq."""
        reason = self._refusal(msg)
        if reason is None:
            await super().handle_zap_message(msg)
            return
        address = msg[3].decode("utf-8", "replace") if len(msg) > 3 else "?"
        key = msg[6] if len(msg) > 6 else b""
        shown = fingerprint(z85.encode(key)) if len(key) == 32 else "-"
        self._once.refused(address, shown, reason.decode())
        if len(msg) >= 2:
            self._send_zap_reply(msg[1], b"400", reason)

    def _refusal(self, msg: list[bytes]) -> bytes | None:
        """Return why a ZAP request must be refused, or None if pyzmq may authenticate it."""
        # Checked here rather than left to the base class, which lets NULL through
        # when no address policy is set: we want fail-closed whatever the socket.
        if len(msg) < 6 or msg[0] != ZAP_VERSION:
            return b"Malformed ZAP request"
        if msg[2] != ZAP_DOMAIN.encode() or msg[5] != b"CURVE" or len(msg) != 7:
            return b"CURVE in the privfl domain required"
        if len(msg[6]) != 32 or z85.encode(msg[6]) not in self._names_by_key:
            return b"Unknown key"
        return None


class HandshakeWatch:
    """A thread reading an inbox's monitor socket and logging refused handshakes with the address.

    libzmq reports a failed handshake without saying which connection failed; it
    is followed by that connection's DISCONNECTED event, which carries the socket
    descriptor whose peer address we looked up when the connection was accepted.
    """

    def __init__(self, sock: zmq.Socket[bytes], owner: str) -> None:
        events = zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
        events |= zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_AUTH
        events |= zmq.EVENT_MONITOR_STOPPED  # what wakes the thread when we stop
        self._monitor = sock.get_monitor_socket(events)
        self._sock = sock
        self._once = _OnceLog(owner)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"{owner}-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        addresses: dict[int, str] = {}
        pending: list[str] = []
        while not self._stop.is_set():
            try:
                if not self._monitor.poll(100):
                    continue
                event: dict[str, Any] = dict(recv_monitor_message(self._monitor))
            except zmq.ZMQError:
                return
            self._handle(event, addresses, pending)

    def _handle(self, event: dict[str, Any], addresses: dict[int, str], pending: list[str]) -> None:
        kind, value = event["event"], int(event["value"])
        if kind == zmq.EVENT_ACCEPTED:
            addresses[value] = _peer_address(value)
        elif kind == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
            pending.append(_HANDSHAKE_REASONS.get(value, f"handshake error 0x{value:08x}"))
        elif kind == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
            pending.append("handshake failed (connection dropped or plain text)")
        elif kind == zmq.EVENT_DISCONNECTED:
            # A plain-text client fails so fast that its socket may be gone before
            # we look it up; then we can only say where it knocked.
            local = event["endpoint"].decode("utf-8", "replace")
            address = addresses.pop(value, "?")
            if address == "?":
                address = f"an unknown address (gone before it could be read) on {local}"
            if pending:
                self._once.refused(address, "-", pending.pop(0))
        if len(addresses) > _MAX_WARNED:
            addresses.clear()

    def stop(self) -> None:
        """Stop the thread and close the monitor socket (before the context ends).

        Disabling the monitor sends its last event, which ends the thread's poll at once
        (a transport's close is not held up by the poll's period).
        """
        self._stop.set()
        with contextlib.suppress(zmq.ZMQError):
            self._sock.disable_monitor()
        self._thread.join(timeout=2.0)
        self._monitor.close(linger=0)


def _peer_address(fd: int) -> str:
    """``ip:port`` of the TCP peer behind a descriptor libzmq just accepted, or ``?``."""
    try:
        with socket.socket(fileno=os.dup(fd)) as sock:
            host, port = sock.getpeername()[:2]
            return f"{host}:{port}"
    except OSError:
        return "?"


def enforce_zap_domain(sock: zmq.Socket[bytes]) -> None:
    """Make libzmq refuse CURVE clients when no ZAP handler answers (it accepts them otherwise)."""
    option = getattr(zmq, "ZAP_ENFORCE_DOMAIN", None)
    if option is None:
        return
    try:
        sock.setsockopt(option, 1)
    except zmq.ZMQError:
        # Draft option missing from this libzmq build; the User-Id check in
        # recv still drops everything a missing ZAP handler would have let in.
        log.debug("libzmq lacks ZMQ_ZAP_ENFORCE_DOMAIN; relying on the User-Id check")
