"""A party that opens no port: every peer is reached through the relay, sealed end to end.

One CURVE DEALER connects *out* to the relay (protocol/relay.py); nothing binds. Each
frame set for a peer is packed, sealed for that peer (protocol/seal.py) and handed to
the relay as ``[MAGIC, "D", recipient, sealed]``; the relay, which knows who sent it
from the CURVE key of the connection, delivers ``[MAGIC, "D", sender, sealed]``. The
relay also tells each party which peers are connected to it (``"U"``/``"X"`` notices),
so a lost peer is named within the liveness grace as on the direct mesh, and a lost
relay is named by the DEALER's own LinkWatch. Wire layout: docs/protocol.md §11.

The transport has the same face as :class:`~privfl.protocol.transport.ZmqTransport`
(send, try_send, recv, connected, lost_peers, unconnected_peers, grace), so the
reliable layer, channels and parties above it do not know the difference.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Collection, Sequence

import zmq

from privfl.errors import ConfigError, PeerUnavailable, ProtocolError
from privfl.protocol.keys import KeyRing
from privfl.protocol.liveness import DEFAULT_GRACE_SECONDS, Link, LinkWatch, lost_message
from privfl.protocol.reliable import pack_frames, unpack_frames
from privfl.protocol.seal import SealBroken, Sealer, asks_for_nonce
from privfl.protocol.transport import SEND_POLL_MS, _Endpoint, route_id

log = logging.getLogger(__name__)

MAGIC = b"privfl-relay/1"
HELLO, DATA, UP, DOWN, REFUSED = b"H", b"D", b"U", b"X", b"R"
RELAY = "relay"  # the relay's name in the key folder and in messages about it
ANNOUNCE_EVERY = 0.5  # s between repeated session-nonce announcements to a silent peer
MAX_HELD = 1024  # messages held for a peer until its nonce is known

REACH_SECONDS = 12.0
"""A relay not reached within this long is named as the problem, whatever the timeout: it
is infrastructure that runs before any party (the issue's goal: within 20 s)."""


def unreachable_message(name: str, relay: str, link: Link, waited: float) -> str:
    """The one-line error of a party that cannot reach its relay: what happened, whom to ask."""
    where = relay.split("://", 1)[-1]
    if link.answered:  # TCP came up, CURVE never did: not the relay we hold the key of
        return (
            f"{name} reaches {relay} but the relay there fails every CURVE handshake: it is "
            "not the relay whose relay.key this site holds (or our key is not on its list); "
            "ask the relay operator for its relay.key and to allow-list our public key"
        )
    why = "connection refused" if link.retries else f"no answer in {waited:.0f} s"
    return (
        f"{name} cannot reach the relay at {relay} ({why}): ask your IT to allow outbound TCP "
        f"to {where}, and the relay operator whether the relay runs there"
    )


class RelayedTransport(_Endpoint):
    """Reach every peer in ``keys.peers`` through the relay at ``relay``; never binds.

    ``relay_key``: the relay's z85 CURVE public key. ``context``: the session id and job
    fingerprint the seals bind (with this transport's fresh session nonce, or
    ``session_nonce`` where a test fixes it). ``socks_proxy``: ``host:port`` of a SOCKS5
    proxy on the way out, or "". ``watch``: the peers whose loss :meth:`lost_peers`
    reports (None: all; the relay's own loss is always reported). Not thread-safe: one
    instance per thread.
    """

    def __init__(
        self,
        name: str,
        relay: str,
        relay_key: bytes,
        keys: KeyRing,
        *,
        context: bytes,
        socks_proxy: str = "",
        send_timeout: float = 30.0,
        linger_ms: int = 1000,
        grace: float = DEFAULT_GRACE_SECONDS,
        sealed: bool = True,
        watch: Collection[str] | None = None,
        session_nonce: bytes | None = None,
    ) -> None:
        super().__init__(name, keys, linger_ms=linger_ms)
        self.relay = relay
        self._peers = frozenset(keys.peers)
        # whose loss ends our waits (None: every peer's); the relay's always does
        self._watch = self._peers if watch is None else frozenset(watch)
        self._sealer = Sealer(self.name, keys.secret, keys.peers, context, nonce=session_nonce)
        self._announced: dict[str, float] = {}  # when we last announced our nonce to a peer
        self._held: dict[str, deque[bytes]] = {}  # packed, for a peer whose nonce we lack
        self._sealed = sealed  # False only in the leaky arm of the hostile-relay tests
        self._send_timeout = send_timeout
        self._links = LinkWatch(self.name, grace)
        self._up: set[str] = set()
        self._ever_up: set[str] = set()
        self._down_since: dict[str, float] = {}
        self._hellos = 0  # the relay connection's ups we said hello on
        self._broken: set[str] = set()  # peers whose seals broke: nothing more from them
        self._inbox: deque[tuple[str, list[bytes]]] = deque()
        self._began = time.monotonic()
        try:
            self._dealer = self._relay_dealer(relay_key, socks_proxy)
            self._dealer.send_multipart(self._hello_frames())  # queued until the connection is up
        except BaseException:
            self.close()
            raise

    def _relay_dealer(self, relay_key: bytes, socks_proxy: str) -> zmq.Socket[bytes]:
        ring = self._sockets.keys
        assert ring is not None  # a relayed party always has its key pair
        dealer = self._sockets.socket(zmq.DEALER)
        dealer.setsockopt(zmq.ROUTING_ID, route_id(self.name))
        # Not IMMEDIATE: our hello (and what follows) waits in the pipe until the
        # connection is up, so the relay learns our route without our thread's help.
        dealer.setsockopt(zmq.IMMEDIATE, 0)
        dealer.setsockopt(zmq.CURVE_SERVERKEY, relay_key)
        dealer.setsockopt(zmq.CURVE_PUBLICKEY, ring.public)
        dealer.setsockopt(zmq.CURVE_SECRETKEY, ring.secret)
        if socks_proxy:
            dealer.setsockopt(zmq.SOCKS_PROXY, socks_proxy.encode())
        self._links.watch(RELAY, dealer)
        try:
            dealer.connect(self.relay)
        except zmq.ZMQError as exc:
            raise ConfigError(f"the relay endpoint {self.relay!r} is invalid: {exc}") from exc
        return dealer

    # --- sending ---------------------------------------------------------------

    def send(self, peer: str, frames: Sequence[bytes]) -> None:
        """Send to ``peer`` through the relay, waiting at most ``send_timeout`` s for it."""
        deadline = time.monotonic() + self._send_timeout
        while not self.try_send(peer, frames):
            self._check_peer(peer)
            lost = self.lost_peers()  # raises, naming the relay, if it was never reached
            if lost:
                raise PeerUnavailable(lost_message(self.name, lost, self._links.grace))
            left = deadline - time.monotonic()
            if left <= 0:
                raise PeerUnavailable(
                    f"{self.name!r} could not reach {peer!r} through the relay at {self.relay} "
                    f"within {self._send_timeout:g} s; check that the relay and {peer} run "
                    "and that the relay allow-lists our public key"
                )
            self._dealer.poll(min(SEND_POLL_MS, math.ceil(left * 1000)), zmq.POLLOUT)

    def try_send(self, peer: str, frames: Sequence[bytes]) -> bool:
        """Send now if the relay connection can take it; False otherwise."""
        self._check_open()
        self._check_peer(peer)
        if not frames:
            raise ValueError("a message needs at least one frame")
        if not self._hello():
            return False
        blob = pack_frames(frames)
        if self._sealed and (not self._sealer.knows(peer) or self._held.get(peer)):
            self._hold(peer, blob)
            return True
        return self._send_blob(peer, blob)

    def _send_blob(self, peer: str, blob: bytes) -> bool:
        payload = self._sealer.seal(peer, blob) if self._sealed else blob
        try:
            self._dealer.send_multipart([MAGIC, DATA, peer.encode(), payload], flags=zmq.NOBLOCK)
        except zmq.Again:
            return False
        return True

    def _hold(self, peer: str, blob: bytes) -> None:
        """Keep ``blob`` until ``peer``'s session nonce is known (its seal must name it)."""
        held = self._held.setdefault(peer, deque())
        held.append(blob)
        if len(held) > MAX_HELD:  # the reliable layer resends what is lost here
            held.popleft()
            log.warning(
                "%s: dropped a message held for %s, which has not answered", self.name, peer
            )
        self._announce(peer)
        self._flush(peer)

    def _flush(self, peer: str) -> None:
        """Seal and send what was held for ``peer``, in order, once its nonce is known."""
        held = self._held.get(peer)
        while held and self._sealer.knows(peer) and self._links.is_up(RELAY):
            if not self._send_blob(peer, held[0]):
                return
            held.popleft()

    def _hello(self) -> bool:
        """Whether the relay connection is up; after a reconnection, say hello again, so
        the relay learns our new connection even while we only compute."""
        ups = self._links.ups(RELAY)
        if ups > self._hellos:
            try:
                self._dealer.send_multipart(self._hello_frames(), flags=zmq.NOBLOCK)
            except zmq.Again:
                return False
            self._hellos = ups
        return self._links.is_up(RELAY)

    def _announce(self, peer: str, *, now: bool = False) -> None:
        """Tell ``peer`` our session nonce (at most every ANNOUNCE_EVERY s unless ``now``)."""
        if not self._sealed or not self._links.is_up(RELAY):
            return
        last = self._announced.get(peer, -math.inf)
        if not now and time.monotonic() - last < ANNOUNCE_EVERY:
            return
        frames = [MAGIC, DATA, peer.encode(), self._sealer.announce(peer)]
        try:
            self._dealer.send_multipart(frames, flags=zmq.NOBLOCK)
        except zmq.Again:
            return
        self._announced[peer] = time.monotonic()

    def _hello_frames(self) -> list[bytes]:
        """Our hello: the peers whose messages this connection is for."""
        return [MAGIC, HELLO, *(p.encode() for p in sorted(self._peers))]

    def _check_peer(self, peer: str) -> None:
        if peer not in self._peers:
            raise ConfigError(f"{self.name!r} has no peer {peer!r}; known: {sorted(self._peers)}")

    # --- receiving -------------------------------------------------------------

    def recv(self, timeout: float) -> tuple[str, list[bytes]] | None:
        """The next message a peer sealed for us, or None after ``timeout`` s.

        A message that fails to open or comes out of sequence raises SealBroken (a
        ProtocolError naming the relay): the run cannot go on over a relay that tampers.
        """
        self._check_open()
        deadline = time.monotonic() + max(0.0, timeout)
        while not self._inbox:
            self._hello()
            wait_ms = max(0, math.ceil((deadline - time.monotonic()) * 1000))
            self._pump(min(wait_ms, SEND_POLL_MS))
            if not self._inbox and time.monotonic() >= deadline:
                return None
        return self._inbox.popleft()

    def _pump(self, wait_ms: int = 0) -> None:
        """Read what the relay has sent: notices are applied, messages queued for recv."""
        while self._dealer.poll(wait_ms, zmq.POLLIN):
            got = self._on_frames(self._dealer.recv_multipart())
            if got is not None:
                self._inbox.append(got)
            wait_ms = 0

    def _on_frames(self, frames: list[bytes]) -> tuple[str, list[bytes]] | None:
        if len(frames) < 3 or frames[0] != MAGIC:
            log.warning("%s: dropped a malformed relay frame set", self.name)
            return None
        who = frames[2].decode("utf-8", "replace")
        if frames[1] == REFUSED:  # e.g. another copy of us holds our routes
            raise PeerUnavailable(f"the relay at {self.relay} refused {self.name}: {who[:300]}")
        if frames[1] in (UP, DOWN):
            self._on_presence(who, frames[1] == UP)
            return None
        if frames[1] != DATA or len(frames) != 4 or who not in self._peers:
            log.warning("%s: dropped a relay frame set for sender %r", self.name, who)
            return None
        if who in self._broken:  # reported once; what follows cannot be trusted either
            return None
        opened = self._open(who, frames[3])
        return None if opened is None else (who, opened)

    def _open(self, sender: str, payload: bytes) -> list[bytes] | None:
        if not self._sealed:
            return unpack_frames(payload)
        try:
            plain = self._sealer.open(sender, payload)
            self._flush(sender)  # its nonce is known now
            if plain is None:  # an announcement; if it does not know ours yet, tell it
                if asks_for_nonce(payload):
                    self._announce(sender, now=True)
                return None
            return unpack_frames(plain)
        except SealBroken as exc:
            self._broken.add(sender)
            raise SealBroken(
                f"{exc}: the relay at {self.relay} (or the network before it) altered, "
                "replayed, reordered or forged it; the run stops — check who runs the relay"
            ) from exc
        except ProtocolError as exc:  # opened, yet not our packing: the sender is at fault
            raise ProtocolError(f"{sender} sent a malformed sealed message: {exc}") from exc

    def _on_presence(self, peer: str, up: bool) -> None:
        if peer not in self._peers:
            return
        if up:
            self._up.add(peer)
            self._ever_up.add(peer)
            self._down_since.pop(peer, None)
            self._announce(peer, now=True)
        elif peer in self._up:
            self._up.discard(peer)
            self._down_since[peer] = time.monotonic()
        log.info("%s: %s is %s at the relay", self.name, peer, "up" if up else "down")

    # --- liveness --------------------------------------------------------------

    def connected(self, peer: str) -> bool:
        """Whether a message to ``peer`` can go now: the relay is up, so is ``peer`` there,
        and we have its session nonce (a message sent before waits for it, held here)."""
        self._check_open()
        up = self._hello()
        self._pump()
        if up and peer in self._up and self._sealed and not self._sealer.knows(peer):
            self._announce(peer)  # up, but what we send waits for its session nonce
            return False
        return up and peer in self._up

    def check_relay(self) -> None:
        """PeerUnavailable naming the relay, once it has not been reached for REACH_SECONDS:
        our IT's firewall or the relay is the problem, not the peers."""
        if self._links.never_up():
            waited = time.monotonic() - self._began
            if waited >= REACH_SECONDS:
                link = self._links.reach(RELAY)
                raise PeerUnavailable(unreachable_message(self.name, self.relay, link, waited))

    def lost_peers(self) -> dict[str, float]:
        """The relay, if its connection is lost; peers the relay says are gone past the grace.

        PeerUnavailable naming the relay if it has never been reached (:meth:`check_relay`).
        """
        self._check_open()
        self.check_relay()
        self._pump()
        lost = self._links.lost()
        now = time.monotonic()
        for peer, since in self._down_since.items():
            if peer in self._watch and now - since >= self._links.grace:
                lost[peer] = now - since
        return lost

    def unconnected_peers(self) -> dict[str, str]:
        """Peers never seen at the relay (all of them while the relay itself is not reached),
        each with where we looked for it (protocol/waits.py words it)."""
        self._check_open()
        where = f"via the relay at {self.relay}, which we reach (it never connected there)"
        if self._links.never_up():
            where = f"via the relay at {self.relay}, which we have not reached yet"
        return {peer: where for peer in sorted(self._peers - self._ever_up)}

    @property
    def grace(self) -> float:
        return self._links.grace

    def _stop_watching(self) -> None:
        self._links.close()
