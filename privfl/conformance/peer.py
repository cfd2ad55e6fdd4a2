"""The scripted peer's tools: a played party's transport, checks and the report."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import click

from privfl.config import JobConfig
from privfl.crypto.djn import check_generator
from privfl.crypto.paillier import PrivateKey, generate_keypair
from privfl.errors import CryptoError, PeerAborted, PeerUnavailable, PrivflError
from privfl.parties.channel import Channel, Envelope
from privfl.parties.runner import open_transport
from privfl.protocol import codec
from privfl.protocol.messages import (
    PROTOCOL,
    VERSION,
    Batch,
    Header,
    Kind,
    Message,
    PublicKey,
    kind_of,
)

QUIET_SECONDS = 1.0  # how long a refused message must stay unanswered


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
        self.channel = Channel(self.transport, session=job.session, timeout=timeout)
        self._ids = itertools.count(10_000)

    def raw(self, to: str, body: Message, *, session: str, msg_id: int | None = None) -> None:
        """Send a message with a hand-made envelope (wrong session, repeated id...)."""
        header = Header(
            PROTOCOL,
            VERSION,
            session,
            self.name,
            to,
            getattr(body, "epoch", 0),
            next(self._ids) if msg_id is None else msg_id,
            kind_of(body),
        )
        self.transport.send(to, codec.encode(header, body))

    def garbage(self, to: str, session: str) -> None:
        """A valid envelope of kind Batch with a body that is not a Batch."""
        header = Header(PROTOCOL, VERSION, session, self.name, to, 0, next(self._ids), Kind.BATCH)
        head = codec.encode(header, Batch(0, 0, 1, None))[0]
        self.transport.send(to, [head, b"\x81\xa1x\xc0"])  # {"x": nil}

    def close(self) -> None:
        self.transport.close()


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
    """Check that ``sender`` says nothing to any of ``peers`` for a while (it refused)."""
    for peer in peers:
        try:
            got = peer.channel._receive(QUIET_SECONDS / len(peers))
        except PrivflError as exc:
            report.check(what, False, str(exc))
            return
        if got is not None:
            report.check(what, False, f"it answered with {got.header.kind}")
            return
    report.check(what, True)


def expect_abort(report: Report, peer: Peer, sender: str, what: str) -> None:
    """The party under test must tell us it stopped."""
    try:
        env = peer.channel.expect({Kind.FINISH}, {sender})
        report.check(what, False, f"got {env.header.kind}, not an Abort")
    except PeerAborted as exc:
        report.check(what, True, str(exc))
    except PeerUnavailable as exc:
        report.check(what, False, f"no Abort: {exc}")


def server_key(job: JobConfig) -> tuple[PublicKey, PrivateKey]:
    """A played Server's key pair in the job's obfuscation mode, and its public key message.

    With ``obfuscation = "djn"`` the message carries the DJN generator ``h_s``, and the
    key's own fresh encryptions (the played parties' ciphertexts) use it, as every
    party of a DJN session must.
    """
    public, private = generate_keypair(job.key_bits, job.obfuscation)
    return PublicKey(n=public.n, bits=public.bits, h_s=public.h_s), private


def check_public_key(report: Report, job: JobConfig, msg: PublicKey) -> bool:
    """What a Host or Guest checks of the Server's public key (docs/protocol.md §6.0)."""
    ok = report.check("key is as large as the job asks", msg.bits >= job.key_bits, str(msg.bits))
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
