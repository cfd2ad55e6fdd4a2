"""A party's view of the network: envelopes, validation, buffering and bounded waits.

The transport moves frames; the channel turns them into checked messages. Every
received message is validated (session, receiver, sender, duplicate id) before its
body is decoded; a bad one is logged and dropped, never raised. A valid message
that the party is not ready for yet (a peer raced ahead) is kept until asked for —
at most ``max_pending_bytes`` of them per peer, so an allow-listed peer cannot fill
our memory with messages we never asked for. While it waits, the channel keeps
reading (an Abort ends the wait at once) and asks the transport, if it can tell,
whether a peer's connection is lost (the wait then ends within the liveness grace,
naming the peer, whatever the timeout).

Busy is not dead: a party in a long step ticks (privfl/pulse.py), and its channel
sends a ``progress`` message to every peer at most every ``PULSE_SECONDS``, reading
its inbox meanwhile (an Abort still ends the step). A waiting channel counts the
timeout from the later of its wait's start and the last time any peer's progress
advanced: it gives up on silence (a lost connection, within the grace) or on no
progress for the whole timeout, and its error says which.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

from privfl import pulse
from privfl.errors import PeerAborted, PeerUnavailable, PrivflError, ProtocolError
from privfl.protocol import codec, fresh
from privfl.protocol.liveness import DEFAULT_GRACE_SECONDS, lost_message
from privfl.protocol.messages import (
    KIND_OF,
    PROTOCOL,
    VERSION,
    Abort,
    AuditHead,
    Header,
    Kind,
    Message,
    Progress,
    kind_of,
)
from privfl.protocol.transport import Transport, should_log
from privfl.protocol.waits import (
    UnconnectedNotices,
    check_unproven,
    never_connected_message,
    unconnected_of,
)

MAX_PENDING = 10_000
MAX_PENDING_BYTES = 256 * 1024 * 1024  # per peer: a few of the largest legal messages
WAIT_NOTE_SECONDS = 10.0  # how often a long wait is logged, naming whom we wait for
LIVENESS_POLL_SECONDS = 0.5  # how often a wait asks the transport whether a peer is lost
# How often a first send asks whether its peer's connection is up: the handshake of a peer
# that starts a moment after us completes within milliseconds of its start.
FIRST_CONTACT_POLL_SECONDS = 0.05
# How often a closing party looks again whether its peers acknowledged its last head.
SETTLE_POLL_SECONDS = 0.02
PULSE_SECONDS = 2.0  # a busy party tells its peers how far it is at least this often
PULSE_LOG_SECONDS = 10.0  # and writes it to its own log this often
log = logging.getLogger("privfl.channel")
M = TypeVar("M")


def body_as(body: object, cls: type[M]) -> M:
    """``body`` as a ``cls``: the codec decodes each kind to one class, so a mismatch is a bug."""
    if not isinstance(body, cls):
        raise ProtocolError(f"expected a {cls.__name__}, got a {type(body).__name__}")
    return body


@dataclass(frozen=True, slots=True)
class Envelope:
    """A received, validated message and who sent it."""

    sender: str
    header: Header
    body: Message
    frames: tuple[bytes, ...] = field(default=(), repr=False, compare=False)

    @property
    def size(self) -> int:
        """Bytes on the wire (header and body frames)."""
        return sum(len(f) for f in self.frames)


class Channel:
    """Send and receive typed messages for one party within one session."""

    def __init__(
        self,
        transport: Transport,
        *,
        session: str,
        timeout: float,
        observer: Callable[[str, str, Header | None, list[bytes]], None] | None = None,
        max_pending_bytes: int = MAX_PENDING_BYTES,
        fresh_rule: bool = True,
    ) -> None:
        self.transport = transport
        # Off only for the conformance kit, which plays a peer that sends chosen
        # (non-fresh) ciphertexts on purpose to check the tested party re-randomises.
        self._fresh_rule = fresh_rule
        self.name = transport.name
        self.session = session
        self.timeout = timeout
        self._ids = itertools.count(1)
        self._seen: set[tuple[str, int]] = set()
        self._pending: list[Envelope] = []
        self._pending_bytes: dict[str, int] = {}
        self.max_pending_bytes = max_pending_bytes
        self._reached: set[str] = set()
        self._observer = observer
        self._refusals: dict[str, int] = {}
        # Busy is not dead: the last progress each peer reported, and when some advanced.
        self._heard: dict[str, tuple[Progress, float]] = {}
        self._advanced = 0.0
        self._pulse_peers: tuple[str, ...] = ()
        self._pulsed = self._pulse_logged = 0.0
        self._aborted: set[str] = set()  # peers whose Abort we read

    def send(self, peer: str, body: Message, round_: int = 0) -> None:
        """Wrap ``body`` in an envelope and send it to ``peer``.

        Until a peer has been reached once, an unreachable peer is retried for the
        channel's timeout (it may simply not have started yet), with a log line each try.
        Every ciphertext in ``body`` must be Fresh and never sent before (crypto.fresh).
        """
        if self._fresh_rule:
            fresh.require(body)
        try:
            if peer in self._reached:
                self._post(peer, body, round_)
            else:
                self._first_contact(peer, body, round_)
        except PrivflError:
            self._raise_pending_abort()
            raise

    def _first_contact(self, peer: str, body: Message, round_: int) -> None:
        """Send once ``peer`` is connected; meanwhile keep reading, so an Abort is not missed.

        A peer that already stopped may have told us so: its Abort waits in our
        inbox while we try to reach it, and is what ends the wait.
        """
        began = time.monotonic()
        note = began + 1.0  # a peer starting a moment after us is not worth a log line
        connected: Callable[[str], bool] | None = getattr(self.transport, "connected", None)
        notices = UnconnectedNotices(self.transport, self.timeout)
        while True:
            if connected is None or connected(peer):
                try:
                    self._post(peer, body, round_)
                except PeerUnavailable:
                    pass
                else:
                    self._reached.add(peer)
                    return
            waited = time.monotonic() - began
            if waited >= self.timeout:
                raise PeerUnavailable(
                    f"{self.name} could not reach {peer} within {self.timeout:g} s; check that "
                    f"{peer} is running, that its endpoint is right and that it allow-lists "
                    "our public key"
                )
            if time.monotonic() >= note:
                note = time.monotonic() + WAIT_NOTE_SECONDS
                log.info(
                    "waiting for %s to come online for %.0f s (giving up after %.0f s)",
                    peer,
                    waited,
                    self.timeout,
                )
            notices.tick()
            self._hold_incoming(min(FIRST_CONTACT_POLL_SECONDS, self.timeout - waited))

    def _post(self, peer: str, body: Message, round_: int, *, wait: bool = True) -> None:
        header = Header(
            protocol=PROTOCOL,
            version=VERSION,
            session=self.session,
            sender=self.name,
            receiver=peer,
            round=round_,
            msg_id=next(self._ids),
            kind=kind_of(body),
        )
        frames = codec.encode(header, body)
        try_send = getattr(self.transport, "try_send", None)
        if wait or try_send is None:
            self.transport.send(peer, frames)
        elif not try_send(peer, frames):  # a dead peer must not delay our exit
            return
        if self._observer:  # only what actually left
            self._observer("sent", peer, header, frames)

    def _raise_pending_abort(self, grace: float = 1.0) -> None:
        """After a failed send: raise PeerAborted if a peer told us it stopped.

        A peer that stops aborts every party in turn; the one it told first may be
        gone before our send to it, while the Abort to us is still on its way. That
        Abort, not "peer unreachable", is what the user needs to see.
        """
        self._hold_incoming(grace, check_links=False)

    def _hold_incoming(self, seconds: float, *, check_links: bool = True) -> None:
        """Read for ``seconds``, keeping what arrives; PeerAborted on an Abort.

        With ``check_links``, also PeerUnavailable once a peer's connection is lost.
        """
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            env = self._receive(min(left, LIVENESS_POLL_SECONDS))  # raises on an Abort
            if env is not None:
                try:
                    self._keep(env)
                except ProtocolError:  # over the cap
                    if check_links:  # waiting to send: the flood is the error
                        raise
                    # looking for an Abort after a failed send: that error stands
                    log.debug("dropped a message of %s while looking for an Abort", env.sender)
            elif check_links:
                self._check_links()

    def _check_links(self) -> None:
        """Raise PeerUnavailable naming the peers whose connection went and stayed away."""
        lost_peers: Callable[[], dict[str, float]] | None = getattr(
            self.transport, "lost_peers", None
        )
        lost = lost_peers() if lost_peers is not None else {}
        if lost:
            grace = getattr(self.transport, "grace", None) or DEFAULT_GRACE_SECONDS
            raise PeerUnavailable(lost_message(self.name, lost, grace))
        check_unproven(self.name, self.transport)

    def broadcast(self, peers: Iterable[str], body: Message, round_: int = 0) -> None:
        """Send the same body to several peers."""
        for peer in peers:
            self.send(peer, body, round_)

    def expect(
        self,
        kinds: Collection[Kind],
        senders: Collection[str],
        timeout: float | None = None,
        *,
        patient: bool | None = None,
    ) -> Envelope:
        """The next message of one of ``kinds`` from one of ``senders``.

        Other valid messages are kept for later. An Abort from any peer raises
        PeerAborted; no progress for ``timeout`` seconds (the job's by default) raises
        PeerUnavailable naming the peers that were awaited. ``patient`` (default: when
        the timeout is the job's) lets a peer's advancing progress restart the clock; an
        explicit ``timeout`` is otherwise a window that ends when it says (the horizontal
        rounds, the Shuffler's window).
        """
        for i, env in enumerate(self._pending):
            if env.header.kind in kinds and env.sender in senders:
                self._pending_bytes[env.sender] -= env.size
                return self._pending.pop(i)
        began = time.monotonic()
        limit = self.timeout if timeout is None else timeout
        patient = timeout is None if patient is None else patient
        note = began + WAIT_NOTE_SECONDS
        notices = UnconnectedNotices(self.transport, limit)
        # Any peer's advancing progress restarts the clock: the run is moving.
        while (left := max(began, self._advanced if patient else 0) + limit - time.monotonic()) > 0:
            slice_ = min(left, LIVENESS_POLL_SECONDS, max(note - time.monotonic(), 0.01))
            got = self._receive(slice_)
            if got is None:
                self._check_links()
                notices.tick()
                if time.monotonic() >= note:
                    note = time.monotonic() + WAIT_NOTE_SECONDS
                    self._note_wait(kinds, senders, time.monotonic() - began, limit)
                continue
            if got.header.kind in kinds and got.sender in senders:
                return got
            self._keep(got)
        raise self._gave_up(kinds, senders, limit)

    def _gave_up(
        self, kinds: Collection[Kind], senders: Collection[str], waited: float
    ) -> PeerUnavailable:
        """The error of a wait that timed out: it names the peers that never connected, if
        any (they are why nothing came), else the peers that were awaited."""
        unconnected = unconnected_of(self.transport)
        if unconnected:
            return PeerUnavailable(never_connected_message(self.name, unconnected, waited))
        wanted = "/".join(sorted(str(k) for k in kinds))
        who = ", ".join(sorted(senders))
        return PeerUnavailable(
            f"no progress: no {wanted} from {who} within {waited:g} s, and no party reported "
            f"progress in that time{self._last_heard()}; the connections stayed up (stuck, "
            f"not silent): check that {who} is running and reachable and what its log says"
            f"{self._silence(waited)}"
        )

    def _last_heard(self) -> str:
        """`` (last heard: guest-1: encrypting scores 212/426, 130 s ago)`` (or nothing)."""
        if not self._heard:
            return ""
        peer, (body, at) = max(self._heard.items(), key=lambda item: item[1][1])
        return f" (last heard: {describe(peer, body)}, {time.monotonic() - at:.0f} s ago)"

    def _keep(self, env: Envelope) -> None:
        """Queue a message we are not ready for, within the count and per-peer byte caps."""
        held = self._pending_bytes.get(env.sender, 0) + env.size
        if held > self.max_pending_bytes:
            raise ProtocolError(
                f"{env.sender} sent more than {self.max_pending_bytes} bytes of messages we are "
                f"not ready for (a {env.header.kind} of {env.size} bytes on top of "
                f"{held - env.size}); it is out of step or flooding us (limit: max_buffered_mib "
                "in the job file)"
            )
        if len(self._pending) >= MAX_PENDING:
            raise ProtocolError(
                f"more than {MAX_PENDING} unexpected messages queued, the last from {env.sender}"
            )
        self._pending.append(env)
        self._pending_bytes[env.sender] = held

    def refuse(self, env: Envelope) -> None:
        """Audit a valid message that protocol logic refused (the caller then stops)."""
        if self._observer:
            self._observer("refused", env.sender, env.header, list(env.frames))

    def _silence(self, waited: float) -> str:
        """Name the peers that stopped acknowledging us (the transport knows, if reliable)."""
        silent_peers = getattr(self.transport, "silent_peers", None)
        if silent_peers is None:
            return ""
        silent: dict[str, float] = silent_peers(min(waited, 2.0))
        return "".join(
            f"; {peer} has not acknowledged our messages for {age:.0f} s (down or hung?)"
            for peer, age in sorted(silent.items())
        )

    def _note_wait(
        self, kinds: Collection[Kind], senders: Collection[str], waited: float, limit: float
    ) -> None:
        """An operator reading the log sees which peer is holding things up, and how far
        the busy ones are."""
        log.info(
            "waiting for %s from %s for %.0f s (giving up after %.0f s without progress)",
            "/".join(sorted(str(k) for k in kinds)),
            ", ".join(sorted(senders)),
            waited,
            limit,
        )
        for peer, body in self.doing(senders).items():
            log.info("waiting for %s", describe(peer, body))

    def doing(self, first: Collection[str] = ()) -> dict[str, Progress]:
        """What the peers said they do, recently (``first``'s, if any of them said so)."""
        now = time.monotonic()
        recent = {
            peer: body
            for peer, (body, at) in self._heard.items()
            if now - at < WAIT_NOTE_SECONDS and (body.total == 0 or body.done < body.total)
        }
        mine = {peer: body for peer, body in recent.items() if peer in first}
        return mine or recent

    # --- busy is not dead -------------------------------------------------------

    @contextmanager
    def reporting(self, peers: Iterable[str]) -> Iterator[None]:
        """While the block runs, the party's ticks (privfl/pulse.py) reach ``peers``."""
        self._pulse_peers = tuple(peers)
        with pulse.reporting(self.pulse):
            yield

    def pulse(self, step: str, done: int, total: int) -> None:
        """Tell the peers how far our step is (at most every PULSE_SECONDS), and read
        what arrived meanwhile: an Abort ends the step at once (PeerAborted)."""
        now = time.monotonic()
        if now - self._pulsed < PULSE_SECONDS:
            return
        self._pulsed = now
        body = Progress(step=step[:64], done=done, total=total)
        for peer in self._pulse_peers:
            try:  # best effort, never waiting: the next pulse follows in seconds
                self._post(peer, body, 0, wait=False)
            except PrivflError as exc:
                log.debug("could not tell %s our progress: %s", peer, exc)
        if now - self._pulse_logged >= PULSE_LOG_SECONDS:
            self._pulse_logged = now
            log.info("%s", describe(self.name, body))
        self._drain()

    def _drain(self) -> None:
        """Keep whatever valid messages wait in our inbox now (raises on an Abort)."""
        for _ in range(1000):  # bounded: a flood must not stop our work
            got = self.transport.recv(0)
            if got is None:
                return
            env = self._accept(*got)
            if env is not None:
                self._keep(env)

    def _on_progress(self, sender: str, body: Progress) -> None:
        """Remember a peer's progress; a change in step or count is an advance."""
        now = time.monotonic()
        last = self._heard.get(sender)
        if last is None or last[0] != body:
            self._advanced = now
        self._heard[sender] = (body, now)

    def expect_body(
        self,
        cls: type[M],
        senders: Collection[str],
        timeout: float | None = None,
        *,
        patient: bool | None = None,
    ) -> M:
        """The body of the next message of class ``cls`` (its kind follows from the class)."""
        return body_as(self.expect({KIND_OF[cls]}, senders, timeout, patient=patient).body, cls)

    @overload
    def gather(self, kind: type[M], senders: Collection[str]) -> dict[str, M]: ...

    @overload
    def gather(self, kind: Kind, senders: Collection[str]) -> dict[str, Message]: ...

    def gather(
        self, kind: Kind | type[M], senders: Collection[str]
    ) -> dict[str, M] | dict[str, Message]:
        """One message of ``kind`` (a Kind, or a message class) from each of ``senders``."""
        cls = None if isinstance(kind, Kind) else kind
        wanted = kind if isinstance(kind, Kind) else KIND_OF[kind]
        waiting = set(senders)
        got: dict[str, Any] = {}
        while waiting:
            env = self.expect({wanted}, waiting)
            got[env.sender] = env.body if cls is None else body_as(env.body, cls)
            waiting.discard(env.sender)
        return got

    def tell(self, peer: str, body: Message) -> None:
        """Send ``body`` if ``peer`` can take it now, never waiting (audit heads)."""
        try:
            self._post(peer, body, 0, wait=False)
        except Exception:  # best effort: the peer may be gone already
            log.debug("could not send a %s to %s", kind_of(body), peer)

    # --- the closing exchange (parties/audit.py) -----------------------------------

    def settle(self, done: Callable[[], bool], timeout: float | None = None) -> bool:
        """Read until ``done()``, keeping what arrives (the observer records each message);
        False after the job's timeout without a peer's progress, or after ``timeout`` (a
        window). A peer's Abort or lost connection ends nothing here: ``done`` asks
        :meth:`gone` about that peer."""
        began = time.monotonic()
        limit = self.timeout if timeout is None else timeout
        while True:
            try:
                self._drain()  # what waits already is read before ``done`` is asked
                if done():
                    return True
                # patient without a window: a peer's advancing progress restarts the clock
                since = max(began, self._advanced) if timeout is None else began
                if time.monotonic() - since > limit:
                    return False
                env = self._receive(SETTLE_POLL_SECONDS)  # an ACK or a message: ask again
            except PeerAborted:
                continue  # remembered: gone() says so
            if env is not None:
                self._keep(env)

    def gone(self, peer: str) -> bool:
        """Whether ``peer`` told us it stopped, or its connection is lost past the grace
        (a listener: the connection of its last message closed, and it said nothing since)."""
        if peer in self._aborted:
            return True
        lost_peers: Callable[[], dict[str, float]] | None = getattr(
            self.transport, "lost_peers", None
        )
        departed: Callable[[], set[str]] | None = getattr(self.transport, "departed_peers", None)
        return (lost_peers is not None and peer in lost_peers()) or (
            departed is not None and peer in departed()
        )

    def delivered(self, peer: str) -> bool:
        """Whether ``peer`` acknowledged every message we sent it (True where the transport
        cannot tell): its channel read each, so its observer recorded each."""
        unacked: Callable[[str], int] | None = getattr(self.transport, "unacked_to", None)
        return unacked is None or unacked(peer) == 0

    def abort(self, peers: Iterable[str], error: BaseException) -> None:
        """Tell peers we stopped, so they fail fast instead of waiting out their timeout."""
        reason = abort_reason(self.name, error)
        for peer in peers:
            try:
                self._post(peer, Abort(reason=reason), 0, wait=False)
            except Exception:  # best effort: the peer may be gone already
                log.debug("could not tell %s about the abort", peer)

    def _receive(self, timeout: float) -> Envelope | None:
        """One validated message, or None if nothing valid arrived in time."""
        got = self.transport.recv(timeout)
        if got is None:
            return None
        return self._accept(*got)

    def _accept(self, sender: str, frames: list[bytes]) -> Envelope | None:
        """Validate one received message; None if refused or if it was a peer's progress."""
        try:
            env = self._validate(sender, frames)
        except codec.VersionMismatch as exc:
            if (exc.session, exc.sender) == (self.session, sender):
                raise ProtocolError(version_mismatch(sender, exc)) from exc
            self._refuse(sender, frames, exc)
            return None
        except ProtocolError as exc:
            self._refuse(sender, frames, exc)
            return None
        if self._observer:
            self._observer("received", sender, env.header, frames)
        if isinstance(env.body, Abort):
            self._aborted.add(sender)
            raise PeerAborted(f"peer {sender} stopped: {env.body.reason}")
        if isinstance(env.body, Progress):
            self._on_progress(sender, env.body)
            return None
        if isinstance(env.body, AuditHead):  # for the audit log (the observer) only
            return None
        return env

    def _refuse(self, sender: str, frames: list[bytes], exc: ProtocolError) -> None:
        """Log (rate-limited) and audit a refused message; the wait goes on."""
        self._refusals[sender] = count = self._refusals.get(sender, 0) + 1
        if should_log(count):  # a flood must not become a flood of log lines
            log.warning("refused a message from %s (%d so far): %s", sender, count, exc)
        if self._observer:
            self._observer("refused", sender, _header_or_none(frames), frames)

    def _validate(self, sender: str, frames: list[bytes]) -> Envelope:
        if len(frames) != 2:
            raise ProtocolError(f"expected 2 frames, got {len(frames)}")
        header = codec.decode_header(frames[0])
        if header.session != self.session:
            raise ProtocolError(f"session {header.session!r} is not ours ({self.session!r})")
        if header.receiver != self.name or header.sender != sender:
            raise ProtocolError(
                f"envelope says {header.sender}->{header.receiver}, "
                f"transport says {sender}->{self.name}"
            )
        if (sender, header.msg_id) in self._seen:
            raise ProtocolError(f"duplicate message id {header.msg_id}")
        body = codec.decode_body(header.kind, frames[1])
        if getattr(body, "epoch", header.round) != header.round:
            raise ProtocolError(f"envelope round {header.round} differs from the body's epoch")
        self._seen.add((sender, header.msg_id))
        return Envelope(sender=sender, header=header, body=body, frames=tuple(frames))


def version_mismatch(sender: str, exc: codec.VersionMismatch) -> str:
    """The one line that ends a session whose peer runs another protocol version."""
    return (
        f"{sender} speaks protocol {exc.protocol!r} v{exc.version}, this party speaks "
        f"{PROTOCOL} v{VERSION}: every party of a job must run the same protocol version "
        "(`privfl --version` names the release); upgrade the older one and start the job again"
    )


def abort_reason(name: str, error: BaseException) -> str:
    """The reason our Abort gives: our error's line (its type if it is not ours), or Ctrl-C."""
    if isinstance(error, KeyboardInterrupt):
        return interrupted(name)
    return f"{name}: {error if isinstance(error, PrivflError) else type(error).__name__}"


def interrupted(name: str) -> str:
    """What a party stopped with Ctrl-C logs, and what its peers are told."""
    return f"{name} was interrupted by its operator"


def describe(peer: str, body: Progress) -> str:
    """``guest-1: encrypting scores 212/426`` (the counts left out while there is no total)."""
    counts = f" {body.done}/{body.total}" if body.total else ""
    return f"{peer}: {body.step}{counts}"


def _header_or_none(frames: list[bytes]) -> Header | None:
    """The envelope of a refused message, if it can be read at all (for the audit log)."""
    try:
        return codec.decode_header(frames[0]) if frames else None
    except ProtocolError:
        return None
