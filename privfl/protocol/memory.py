"""In-memory transports for tests: parties in threads of one process, connected by a hub.

Same send/recv semantics as the ZeroMQ transport, so protocol logic is testable
without sockets; a send to a party whose transport is closed (or was never
opened) raises PeerUnavailable, as a dead peer does over ZeroMQ.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Sequence
from typing import NamedTuple

from privfl.errors import ConfigError, PeerUnavailable, PrivflError
from privfl.protocol.transport import Closeable


class Sent(NamedTuple):
    """One message as the in-memory hub saw it go over the 'wire'."""

    sender: str
    receiver: str
    frames: list[bytes]


class InMemoryHub:
    """Connects in-memory transports by name; thread-safe; records traffic in `sent`."""

    def __init__(self, *, record: bool = True) -> None:
        self.record = record
        self.sent: list[Sent] = []
        self._lock = threading.Lock()
        self._queues: dict[str, queue.Queue[tuple[str, list[bytes]]]] = {}

    def transport(self, name: str) -> InMemoryTransport:
        """Open the transport for party `name`; a closed one may be opened again."""
        inbox: queue.Queue[tuple[str, list[bytes]]] = queue.Queue()
        with self._lock:
            if name in self._queues:
                raise ConfigError(f"a transport named {name!r} is already open on this hub")
            self._queues[name] = inbox
        return InMemoryTransport(self, name, inbox)

    def _deliver(self, sender: str, receiver: str, frames: Sequence[bytes]) -> None:
        """Put a copy of `frames` in `receiver`'s inbox and, if recording, in `sent`."""
        body = [bytes(frame) for frame in frames]
        with self._lock:
            inbox = self._queues.get(receiver)
            if inbox is None:
                raise PeerUnavailable(
                    f"{sender!r} could not reach peer {receiver!r}: it has no open transport "
                    "on this hub; check that it is running"
                )
            if self.record:
                self.sent.append(Sent(sender, receiver, list(body)))
        inbox.put((sender, body))

    def _detach(self, name: str, inbox: queue.Queue[tuple[str, list[bytes]]]) -> None:
        with self._lock:
            if self._queues.get(name) is inbox:
                del self._queues[name]


class InMemoryTransport(Closeable):
    """A Transport whose 'network' is an InMemoryHub; same send/recv semantics as ZmqTransport."""

    def __init__(
        self, hub: InMemoryHub, name: str, inbox: queue.Queue[tuple[str, list[bytes]]]
    ) -> None:
        self.name = name
        self._hub = hub
        self._inbox = inbox
        self._closed = False

    def send(self, peer: str, frames: Sequence[bytes]) -> None:
        """Deliver one multipart message to `peer`; PeerUnavailable if it has no open transport."""
        self._check_open()
        if not frames:
            raise ValueError("a message needs at least one frame")
        self._hub._deliver(self.name, peer, frames)

    def try_send(self, peer: str, frames: Sequence[bytes]) -> bool:
        """Deliver now if `peer` has an open transport; False otherwise."""
        try:
            self.send(peer, frames)
        except PeerUnavailable:
            return False
        return True

    def recv(self, timeout: float) -> tuple[str, list[bytes]] | None:
        """Return (sender, frames) of the next message, or None after `timeout` seconds."""
        self._check_open()
        try:
            return self._inbox.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return None

    def _check_open(self) -> None:
        if self._closed:
            raise PrivflError(f"transport {self.name!r} is closed; create a new one")

    def close(self) -> None:
        """Leave the hub; later sends to this name raise PeerUnavailable."""
        if not self._closed:
            self._closed = True
            self._hub._detach(self.name, self._inbox)
