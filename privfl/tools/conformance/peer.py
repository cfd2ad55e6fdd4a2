"""The scripted peer's tools: a played party's transport, checks and the report."""

from __future__ import annotations

import contextlib
import itertools
import socket
import subprocess
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import click

from privfl.config.vertical import JobConfig
from privfl.crypto import guest_masks
from privfl.crypto.djn import check_generator
from privfl.crypto.guest_masks import GuestMasks
from privfl.crypto.paillier import PrivateKey, generate_keypair
from privfl.data.views import PartyData
from privfl.errors import (
    ConfigError,
    CryptoError,
    PeerAborted,
    PeerUnavailable,
    PrivflError,
    ProtocolError,
)
from privfl.parties.vertical.keyproof import check_key, prove_key
from privfl.parties.vertical.runner import open_transport
from privfl.protocol import codec
from privfl.protocol.channel import Channel, Envelope
from privfl.protocol.messages import (
    PROTOCOL,
    VERSION,
    Batch,
    Header,
    Kind,
    Message,
    Progress,
    PublicKeyMessage,
    kind_of,
)
from privfl.protocol.reliable import ReliableTransport
from privfl.protocol.transport import Closeable

QUIET_SECONDS = 1.0  # how long a refused message must stay unanswered, without barriers
ACK_SECONDS = 1.5  # a live party ACKs within milliseconds of receiving a message
READ_SECONDS = 0.05  # one read's slice while a check waits for an event
BARRIER_READ_SECONDS = 0.005  # a read ends at its slice, not at an ACK: keep it short
AFTER_FINISH_SECONDS = 2.0  # how long a finished party must stay silent (no Abort), or exit
LAST_READ_SECONDS = 0.25  # an exited party's last messages are already on our side of TCP
EXIT_SECONDS = 15.0  # how long a finished party may take to close its inbox and exit (at least)
EXIT_POLL_SECONDS = 0.05  # how often the exit status is read while waiting for it


@dataclass
class Report:
    """Every check made, in order."""

    checks: list[tuple[str, bool, str]] = field(default_factory=list)

    def check(self, name: str, ok: bool, detail: str = "") -> bool:
        self.checks.append((name, ok, detail))
        click.echo(f"{'PASS' if ok else 'FAIL'}  {name}{'' if ok else ': ' + detail}")
        return ok

    @property
    def passed(self) -> bool:
        return all(ok for _, ok, _ in self.checks)


class Peer:
    """One party this tool plays: a real transport bound at that party's endpoint."""

    def __init__(self, job: JobConfig, name: str, timeout: float) -> None:
        self.name = name
        self.transport = open_transport(job, name)
        # The kit sends trivially encrypted ciphertexts on purpose (ρ = 1), to see
        # whether the tested party re-randomises what it computes from them.
        self.channel = Channel(
            self.transport, session=job.session, timeout=timeout, fresh_rule=False
        )
        self._ids = itertools.count(10_000)
        self.aborted = ""  # the Abort the party sent us while we only read ACKs
        _PLAYED.add(self)

    def raw(
        self,
        to: str,
        body: Message,
        *,
        session: str,
        msg_id: int | None = None,
        round_: int | None = None,
        wait: bool = True,
    ) -> None:
        """Send a message with a hand-made envelope (wrong session, repeated id...).

        ``wait`` False: do not wait for a connection (a party that stopped may be gone).
        """
        header = Header(
            PROTOCOL,
            VERSION,
            session,
            self.name,
            to,
            getattr(body, "epoch", 0) if round_ is None else round_,
            next(self._ids) if msg_id is None else msg_id,
            kind_of(body),
        )
        frames = codec.encode(header, body)
        if wait:
            self.transport.send(to, frames)
        else:
            self.transport.try_send(to, frames)

    def barrier(self, to: str) -> None:
        """A message every party refuses before it reads the body (another session's
        Progress): its ACK says the party has read all this peer sent before."""
        self.raw(to, BARRIER, session=BARRIER_SESSION)

    def garbage(self, to: str, session: str) -> None:
        """A valid envelope of kind Batch with a body that is not a Batch."""
        header = Header(PROTOCOL, VERSION, session, self.name, to, 0, next(self._ids), Kind.BATCH)
        head = codec.encode(header, Batch(0, 0, 1, None))[0]
        self.transport.send(to, [head, b"\x81\xa1x\xc0"])  # {"x": nil}

    def read_ack(self, seconds: float) -> None:
        """One read of up to ``seconds`` (ACKs, messages kept, an Abort in :attr:`aborted`)."""
        try:
            env = self.channel._receive(seconds)
        except PeerAborted as exc:
            self.aborted = str(exc)
            return
        if env is not None:
            self.channel._pending.append(env)

    def close(self) -> None:
        _PLAYED.discard(self)
        self.transport.close()


_PLAYED: set[Peer] = set()  # the open Peers, which keep ACKing while a party exits
BARRIER = Progress("conformance barrier", 0, 0)
BARRIER_SESSION = "conformance-barrier"  # no party's session: refused on the envelope


class Bystanders(Closeable):
    """The job's parties no script plays (a guest's fellow guests), bound at their
    endpoints: a thread reads, and so ACKs, what the party under test tells them (its
    progress, its Abort) and drops it, so the party never waits for their ACKs to exit."""

    def __init__(self, job: JobConfig, names: Iterable[str]) -> None:
        self._transports: list[ReliableTransport] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(self._transports,), daemon=True)
        try:
            for name in names:
                self._transports.append(open_transport(job, name))
        except BaseException:
            self.close()
            raise
        self._thread.start()

    def _read(self, transports: list[ReliableTransport]) -> None:
        while transports and not self._stop.is_set():
            for transport in transports:
                with contextlib.suppress(PrivflError):
                    transport.recv(0.02)

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        for transport in self._transports:
            transport.close()


def acknowledged(report: Report, peers: list[Peer], party: str, what: str = "") -> bool:
    """Every message the played parties sent was ACKed on the party's DEALER (§3).

    The played parties wait for their ACKs together: ``ACK_SECONDS`` in all, not each.
    """
    deadline = time.monotonic() + ACK_SECONDS
    waiting = [peer for peer in peers if peer.transport.unacked()]
    while waiting and (left := deadline - time.monotonic()) > 0:
        for peer in waiting:
            peer.read_ack(min(left, READ_SECONDS) / len(waiting))
        waiting = [peer for peer in waiting if peer.transport.unacked()]
    missing = {peer.name: peer.transport.unacked() for peer in peers}
    late = {name: count for name, count in missing.items() if count}
    return report.check(
        what or f"{party} acknowledges every message it receives (link-layer ACK, §3)",
        not late,
        ", ".join(f"{count} message(s) from {name} never ACKed" for name, count in late.items()),
    )


def finished_cleanly(
    report: Report,
    peers: list[Peer],
    party: str,
    endpoint: str,
    process: subprocess.Popen[bytes] | None,
) -> None:
    """After ``finish``: ACKed, no Abort, its inbox closes, and (if we started it) exit 0."""
    acknowledged(report, peers, party, f"{party} acknowledges finish")
    aborted = next((peer.aborted for peer in peers if peer.aborted), "")
    deadline = time.monotonic() + AFTER_FINISH_SECONDS
    while not aborted and time.monotonic() < deadline:
        # A party we started that has exited can send nothing more: reading what it sent
        # before it exited ends the watch.
        exited = process is not None and process.poll() is not None
        for peer in peers:  # every peer read (and ACKed): a party's Abort to each
            wait = LAST_READ_SECONDS / len(peers) if exited else 0.02
            found = _abort_among(peer, wait, exited)
            aborted = aborted or found
        if exited:
            break
    report.check(f"{party} sends no Abort after finish", not aborted, aborted)
    # A busy machine slows a party's last writes: the job's own timeout, if longer.
    grace = max([EXIT_SECONDS, *(peer.channel.timeout for peer in peers)])
    closed = inbox_closes(endpoint, grace)
    report.check(
        f"{party} closes its inbox after finish (disconnects, §3 Closing)",
        closed,
        f"{endpoint} still accepts connections after {grace:g} s",
    )
    if process is not None:
        code = exit_code(process, grace)
        report.check(f"{party} exits 0 after finish", code == 0, f"exit status {code}")


def _abort_among(peer: Peer, seconds: float, every: bool) -> str:
    """The Abort among the next message (``every``: all, each within ``seconds``) from
    ``peer``'s party, or ""."""
    try:
        while peer.channel._receive(seconds) is not None and every:
            pass
    except PeerAborted as exc:
        return str(exc)
    return ""


def inbox_closes(endpoint: str, seconds: float) -> bool:
    """Whether nothing listens at the tcp ``endpoint`` any more within ``seconds``."""
    parts = urlsplit(endpoint)
    host = parts.hostname if parts.hostname not in (None, "*", "0.0.0.0") else "127.0.0.1"
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, parts.port or 0), timeout=0.5):
                pass
        except OSError:
            return True
        _read_played(0.2)  # ACKing what the party still sends, so its close is not held up
    return False


def exits_nonzero(
    report: Report, party: str, process: subprocess.Popen[bytes] | None, aborted: bool = True
) -> None:
    """After a fatal violation, a party we started must exit with a non-zero status.

    One that sent no Abort (``aborted`` False) accepted the violation and waits for
    the next message until its own timeout: its status is read at once, not waited for.
    """
    if process is not None:
        code = exit_code(process, EXIT_SECONDS if aborted else 0.0)
        ok = code not in (0, None)
        detail = "still running" if code is None else str(code)
        report.check(f"{party} exits non-zero after the violation", ok, detail)


def exit_code(process: subprocess.Popen[bytes], seconds: float = EXIT_SECONDS) -> int | None:
    """The party's exit status, waiting up to ``seconds``; None if it is still running.

    Meanwhile every played party reads and ACKs what it is sent (and drops it), as a live
    one would: a party that waits for the ACKs of its last messages (an Abort, its audit
    head) before it exits is not held up by us.
    """
    deadline = time.monotonic() + seconds
    while (code := process.poll()) is None and (left := deadline - time.monotonic()) > 0:
        _read_played(min(left, EXIT_POLL_SECONDS))
    return code


def _read_played(seconds: float) -> None:
    """Every played party reads (and ACKs, and drops) what it is sent, ``seconds`` in all."""
    peers = list(_PLAYED)
    if not peers:
        time.sleep(seconds)
    for peer in peers:
        with contextlib.suppress(PrivflError):
            peer.transport.recv(seconds / len(peers))


def expect(report: Report, peer: Peer, kind: Kind, sender: str, what: str) -> Envelope | None:
    """The next ``kind`` from ``sender``; a failed check (not an exception) if it never comes."""
    try:
        env = peer.channel.expect({kind}, {sender})
    except PrivflError as exc:
        report.check(what, False, str(exc))
        return None
    report.check(what, True)
    return env


def quiet(report: Report, peers: list[Peer], sender: str, what: str) -> None:
    """Check that ``sender`` says nothing to any of ``peers`` (it refused what it got).

    No fixed window: each played party in turn sends a barrier (:meth:`Peer.barrier`) and
    reads until ``sender`` ACKs it. A party reads each link in order and ACKs as it reads,
    so what it answered before it read the barrier is ahead of the ACK on the same
    connection. Two rounds: the second's barriers go out once every barrier of the first
    was ACKed, that is once the party has handled all it was sent before, on every link;
    so whatever it said because of it has reached us. A party that does not ACK (busy or
    broken) gets ``QUIET_SECONDS`` in all, as a window alone would.
    """
    deadline = time.monotonic() + QUIET_SECONDS
    for peer in [*peers, *peers]:
        peer.barrier(sender)
        while True:
            left = deadline - time.monotonic()
            try:
                got = peer.channel._receive(max(min(left, BARRIER_READ_SECONDS), 0.0))
            except PrivflError as exc:
                report.check(what, False, str(exc))
                return
            if got is not None:
                report.check(what, False, f"it answered with {got.header.kind}")
                return
            if not peer.transport.unacked() or left <= 0:
                break
    report.check(what, True)


def expect_abort(
    report: Report, peer: Peer, sender: str, what: str, probe: tuple[Message, int] | None = None
) -> bool:
    """The party under test must tell us it stopped, well before the job's timeout.

    Half the timeout: a party that accepted the message and then gave up waiting for
    the next one also sends an Abort, at the full timeout, and that is no refusal.
    ``probe`` (the session's next step and its round) goes right after the
    violation: a party that accepted the violation answers it, and any answer but an
    Abort ends the wait at once, failed. Returns whether the Abort came.
    """
    window = peer.channel.timeout / 2
    if probe is None:
        try:
            env = peer.channel.expect({Kind.FINISH}, {sender}, timeout=window)
            return report.check(what, False, f"got {env.header.kind}, not an Abort")
        except PeerAborted as exc:
            return report.check(what, True, str(exc))
        except PeerUnavailable as exc:
            return report.check(what, False, f"no Abort: {exc}")
    # Not waiting to connect: a party that stopped at once may be gone already.
    body, round_ = probe
    peer.raw(sender, body, session=peer.channel.session, round_=round_, wait=False)
    aborted, detail = _abort_or_answer(peer, sender, window)
    if not aborted and detail.startswith("with "):
        detail = f"it answered the next {kind_of(body)} {detail}: it accepted the violation"
    return report.check(what, aborted, detail)


def _abort_or_answer(peer: Peer, sender: str, seconds: float) -> tuple[bool, str]:
    """Read ``peer`` until ``sender``'s Abort (True, its reason) or any message of its
    (False, ``with KIND``), for up to ``seconds``."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            got = peer.channel._receive(min(left, READ_SECONDS))
        except PeerAborted as exc:
            return True, str(exc)
        except PrivflError as exc:
            return False, f"no Abort: {exc}"
        if got is not None and got.sender == sender:
            return False, f"with {got.header.kind}"
    return False, f"no Abort within {seconds:g} s"


def server_key(job: JobConfig) -> tuple[PublicKeyMessage, PrivateKey]:
    """A played Server's key pair in the job's obfuscation mode, and its public key message.

    With ``obfuscation = "djn"`` the message carries the DJN generator ``h_s``, and the
    key's own fresh encryptions (the played parties' ciphertexts) use it, as every
    party of a DJN session must.
    """
    _, private = generate_keypair(job.key_bits, job.obfuscation)
    return key_message(job, job.server, private), private


def key_message(job: JobConfig, sender: str, private: PrivateKey) -> PublicKeyMessage:
    """``sender``'s ``public_key`` for ``private``, with its modulus proof (§6.0)."""
    public = private.public_key
    proof = prove_key(private, session=job.session, kind=Kind.PUBLIC_KEY, sender=sender)
    return PublicKeyMessage(n=public.n, bits=public.bits, h_s=public.h_s, proof=proof)


def played_masks(job: JobConfig, party: str) -> tuple[str, GuestMasks]:
    """The played Server's mask seeds for the guest under test (``public_key.mask_seeds``,
    §6.2) and the masks they give it, which the kit removes before it checks a value."""
    seeds = guest_masks.seeds_of(party, guest_masks.draw_seeds(job.guests))
    masks = GuestMasks(job.session, party, tuple(job.guests), seeds)
    return guest_masks.encode_seeds(seeds), masks


def unmasked(masks: GuestMasks, n: int, what: str, plain: Sequence[int]) -> list[int]:
    """``plain − M_g`` mod n: a guest's value as it was before its zero-sum mask."""
    return [(p - m) % n for p, m in zip(plain, masks.masks(n, what, len(plain)), strict=True)]


def check_public_key(report: Report, job: JobConfig, msg: PublicKeyMessage, sender: str) -> bool:
    """What a Host or Guest checks of ``sender``'s public key (docs/protocol.md §6.0)."""
    ok = report.check("key is as large as the job asks", msg.bits >= job.key_bits, str(msg.bits))
    try:
        check_key(msg.n, msg.proof, session=job.session, kind=Kind.PUBLIC_KEY, sender=sender)
        ok &= report.check("key carries a valid modulus proof (gcd(n, φ(n)) = 1)", True)
    except ProtocolError as exc:
        ok &= report.check("key carries a valid modulus proof (gcd(n, φ(n)) = 1)", False, str(exc))
    mode = "djn" if msg.h_s else "standard"
    ok &= report.check(
        "key's obfuscation is the job's (h_s ≠ 0 exactly for djn)",
        mode == job.obfuscation,
        f"{mode}, the job asks for {job.obfuscation}",
    )
    if msg.h_s:
        try:
            check_generator(msg.n, msg.h_s)
            ok &= report.check("h_s is a unit in (1, n²)", True)
        except CryptoError as exc:
            ok &= report.check("h_s is a unit in (1, n²)", False, str(exc))
    return ok


def host_counterparts(job: JobConfig) -> tuple[dict[str, PartyData], Peer, dict[str, Peer]]:
    """What the kit needs to play the Server and every guest against a Host under test:
    each guest's demo columns, the Server's peer and the guests' peers."""
    from privfl.parties.vertical.runner import load_data

    try:
        data = {g: load_data(job, g, None, None) for g in job.guests}
    except ConfigError as exc:
        raise ConfigError(f"host conformance needs demo columns for every guest: {exc}") from exc
    server = Peer(job, job.server, job.timeout_seconds)
    return data, server, {g: Peer(job, g, job.timeout_seconds) for g in job.guests}
