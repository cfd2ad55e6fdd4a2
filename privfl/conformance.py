"""``privfl conformance``: a scripted peer that checks a running party against the protocol.

The party under test runs with its ordinary command. This tool plays every
party that one talks to (binding their endpoints with their keys from the kit),
walks it through the protocol (docs/protocol.md), sends it invalid messages that
must be refused without effect, checks every answer, and ends either with a
Finish (the party must exit cleanly) or with a fatal protocol violation (the
party must Abort, naming it). Roles supported: guest and server.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import click
import numpy as np

from privfl.config import JobConfig, load_job
from privfl.crypto.encoding import VALUE_BITS, decode, encode
from privfl.crypto.paillier import PrivateKey, generate_keypair
from privfl.crypto.paillier import PublicKey as PaillierKey
from privfl.errors import ConfigError, PeerAborted, PeerUnavailable, PrivflError
from privfl.parties.channel import Channel, Envelope
from privfl.parties.runner import open_transport
from privfl.protocol import codec
from privfl.protocol.messages import (
    PROTOCOL,
    VERSION,
    Batch,
    BigInts,
    Decrypted,
    DecryptRequest,
    EpochResult,
    Finish,
    Forward,
    Header,
    Hello,
    Kind,
    Loss,
    Message,
    PublicKey,
    Residual,
    Resume,
    ScoreRequest,
    Scores,
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


def handshake_with(
    report: Report, job: JobConfig, party: str, server: Peer, host: Peer
) -> PrivateKey | None:
    """Hellos in, the public key out, the resume agreement (from scratch)."""
    for peer in (server, host):
        env = expect(report, peer, Kind.HELLO, party, f"Hello from {party} to {peer.name}")
        if env is not None:
            hello = env.body
            assert isinstance(hello, Hello)
            report.check(
                "Hello carries the job fingerprint and role",
                hello.job_fingerprint == job.fingerprint() and hello.role == "guest",
                f"{hello.role} {hello.job_fingerprint[:12]}",
            )
    public, private = generate_keypair(job.key_bits)
    server.channel.send(party, PublicKey(n=public.n, bits=public.bits))
    if expect(report, host, Kind.CHECKPOINTS, party, "Checkpoints offer to the host") is None:
        return None
    host.channel.send(party, Resume(completed=0))
    return private


def guest_script(job: JobConfig, party: str, ending: str, report: Report) -> None:
    """Play the Server and the Host against a running guest."""
    server = Peer(job, job.server, job.timeout_seconds)
    host = Peer(job, job.host, job.timeout_seconds)
    try:
        private = handshake_with(report, job, party, server, host)
        if private is None:
            return
        n = private.public_key.n
        host.raw(party, Batch(0, 0, 1, None), session="another-session")
        quiet(report, [host, server], party, "a Batch from another session is refused")
        host.garbage(party, job.session)
        quiet(report, [host, server], party, "a malformed Batch body is refused")
        host.channel.send(party, Batch(0, 0, 1, None), 0)
        env = expect(report, host, Kind.FORWARD, party, "Batch is answered with a Forward")
        if env is None:
            return
        fwd = env.body
        assert isinstance(fwd, Forward)
        rows = len(fwd.scores)
        scores = decode(private.decrypt(fwd.scores.values), VALUE_BITS, n)
        zero = bool(np.all(scores == 0))
        report.check("first Forward encrypts z = Xθ = 0", zero, str(scores[:3]))
        if ending == "violation":
            bad = private.public_key.encrypt(encode(np.zeros(rows + 1), VALUE_BITS, n))
            host.channel.send(party, Residual(0, 0, BigInts(tuple(bad)), None), 0)
            expect_abort(report, host, party, "a Residual of the wrong length makes it Abort")
            return
        residual = private.public_key.encrypt(encode(np.full(rows, 0.5), VALUE_BITS, n))
        host.channel.send(party, Residual(0, 0, BigInts(tuple(residual)), None), 0)
        env = expect(report, server, Kind.DECRYPT_REQUEST, party, "Residual → DecryptRequest")
        if env is None:
            return
        request = env.body
        assert isinstance(request, DecryptRequest)
        report.check("DecryptRequest is for a gradient", request.purpose == "gradient")
        plain = private.decrypt(request.values.values)
        reply = Decrypted(request.epoch, request.batch, request.purpose, BigInts(tuple(plain)))
        server.channel.send(party, reply, 0)
        host.raw(party, ScoreRequest(0, "test"), session=job.session, msg_id=7777)
        host.raw(party, ScoreRequest(0, "test"), session=job.session, msg_id=7777)
        env = expect(report, host, Kind.SCORES, party, "ScoreRequest is answered with Scores")
        if env is not None:
            assert isinstance(env.body, Scores)
            report.check("Scores cover the split", len(env.body.scores) > 0)
        quiet(report, [host], party, "a repeated message id is refused")
        host.channel.send(party, Finish(epochs=1, reason="conformance"))
        report.check("Finish sent; the guest must now exit 0", True)
    finally:
        host.close()
        server.close()


def server_script(job: JobConfig, party: str, ending: str, report: Report) -> None:
    """Play the Host and one Guest against a running server."""
    if len(job.guests) != 1:
        raise ConfigError("server conformance needs a job with exactly one guest")
    guest_name = job.guests[0]
    host = Peer(job, job.host, job.timeout_seconds)
    guest = Peer(job, guest_name, job.timeout_seconds)
    fingerprint = job.fingerprint()
    try:
        host.channel.send(party, Hello("host", fingerprint, 100, 4))
        guest.channel.send(party, Hello("guest", fingerprint, 100, 3))
        keys = {}
        for peer in (host, guest):
            env = expect(report, peer, Kind.PUBLIC_KEY, party, f"public key sent to {peer.name}")
            if env is None:
                return
            assert isinstance(env.body, PublicKey)
            keys[peer.name] = env.body.n
            report.check("key is as large as the job asks", env.body.bits >= job.key_bits)
        report.check("every party gets the same key", len(set(keys.values())) == 1)
        key = PaillierKey.from_n(keys[host.name])
        if expect(report, host, Kind.CHECKPOINTS, party, "Checkpoints offer to the host") is None:
            return
        host.channel.send(party, Resume(completed=0))
        values = [5, 0, key.n - 1]
        request = DecryptRequest(0, 0, "gradient", BigInts(tuple(key.encrypt(values))))
        guest.raw(party, request, session="another-session")
        quiet(report, [guest, host], party, "a request from another session is refused")
        guest.channel.send(party, request, 0)
        env = expect(report, guest, Kind.DECRYPTED, party, "DecryptRequest → Decrypted")
        if env is not None and hasattr(env.body, "values"):
            got = list(env.body.values.values)
            report.check("decryption is correct", got == values, str(got))
        loss = encode([8 * 10 * 0.25], VALUE_BITS, key.n)
        host.channel.send(party, Loss(0, 0, 1, BigInts(tuple(key.encrypt(loss))), 80, VALUE_BITS))
        env = expect(report, host, Kind.EPOCH_RESULT, party, "Loss → EpochResult")
        if env is not None:
            assert isinstance(env.body, EpochResult)
            report.check("loss is decrypted and averaged", abs(env.body.loss - 0.25) < 1e-9)
        if ending == "violation":
            guest.channel.send(party, request, 0)  # the same gradient twice: not allowed
            expect_abort(report, guest, party, "a repeated gradient decryption makes it Abort")
            return
        host.channel.send(party, Finish(epochs=1, reason="conformance"))
        report.check("Finish sent; the server must now exit 0", True)
    finally:
        host.close()
        guest.close()


SCRIPTS: dict[str, Callable[[JobConfig, str, str, Report], None]] = {
    "guest": guest_script,
    "server": server_script,
}


def run(job: JobConfig, role: str, party: str, ending: str) -> Report:
    """Run the scripted peer for ``role`` against the running ``party``."""
    spec = job.party(party)
    if spec.role != role:
        raise ConfigError(f"party {party} is a {spec.role}, not a {role}")
    if role not in SCRIPTS:
        raise ConfigError(f"no conformance script for role {role!r} yet; try guest or server")
    report = Report()
    SCRIPTS[role](job, party, ending, report)
    return report


@click.command("conformance")
@click.option("--role", type=click.Choice(sorted(SCRIPTS)), required=True, help="Role under test.")
@click.option(
    "--job",
    "job_file",
    type=click.Path(path_type=Path),
    required=True,
    help="The kit's job file (the tool needs the other parties' keys from its keys folder).",
)
@click.option("--party", required=True, help="Name of the running party under test.")
@click.option(
    "--ending",
    type=click.Choice(["finish", "violation"]),
    default="finish",
    help="End with a Finish (party must exit 0) or a fatal violation (party must Abort).",
)
def command(role: str, job_file: Path, party: str, ending: str) -> None:
    """Check a running party against the protocol by playing every party it talks to.

    Start the party under test first, with its usual command and the same kit;
    this tool then binds the other parties' endpoints. Prints PASS/FAIL per check;
    exits 0 only if every check passed. See docs/protocol.md.

    \b
    Example:
      privfl vfl guest --job kit/job.toml --party guest-1 --out run/g &
      privfl conformance --role guest --job kit/job.toml --party guest-1
    """
    from privfl.cli import friendly_errors

    @friendly_errors
    def go() -> None:
        report = run(load_job(job_file), role, party, ending)
        passed = sum(ok for _, ok, _ in report.checks)
        click.echo(f"{passed}/{len(report.checks)} checks passed")
        if not report.passed:
            sys.exit(1)

    go()
