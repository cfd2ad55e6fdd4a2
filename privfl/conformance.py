"""``privfl conformance``: a scripted peer that checks a running party against the protocol.

The party under test runs with its ordinary command. This tool plays every
party that one talks to (binding their endpoints with their keys from the kit),
walks it through the protocol (docs/protocol.md), sends it invalid messages that
must be refused without effect, checks every answer, and ends either with a
Finish (the party must exit cleanly) or with a fatal protocol violation (the
party must Abort, naming it). Every role can be checked; the host needs a job
with demo columns (the tool must know each guest's row counts).
"""

from __future__ import annotations

import itertools
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
    Checkpoints,
    CrossTerm,
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


def host_script(job: JobConfig, party: str, ending: str, report: Report) -> None:
    """Play the Server and every Guest against a running host (demo-data jobs only)."""
    from privfl.parties.runner import load_data

    try:
        shapes = {g: load_data(job, g, None, None) for g in job.guests}
    except ConfigError as exc:
        raise ConfigError(f"host conformance needs demo columns for every guest: {exc}") from exc
    server = Peer(job, job.server, job.timeout_seconds)
    guests = {g: Peer(job, g, job.timeout_seconds) for g in job.guests}
    try:
        env = expect(report, server, Kind.HELLO, party, "Hello from the host to the server")
        if env is None:
            return
        assert isinstance(env.body, Hello)
        report.check("Hello says host", env.body.role == "host")
        for name, peer in guests.items():
            features = shapes[name].x_train.shape[1]
            peer.channel.send(party, Hello("guest", job.fingerprint(), env.body.rows, features))
        public, private = generate_keypair(job.key_bits)
        server.channel.send(party, PublicKey(n=public.n, bits=public.bits))
        # While it waits for every Checkpoints offer, the host must ignore this one:
        first = next(iter(guests.values()))
        first.raw(party, Checkpoints(np.array([1], dtype=np.int64)), session="another-session")
        quiet(report, [server, *guests.values()], party, "an offer of another session is refused")
        for peer in [server, *guests.values()]:
            peer.channel.send(party, Checkpoints(np.zeros(0, dtype=np.int64)))
        for peer in [server, *guests.values()]:
            got = expect(report, peer, Kind.RESUME, party, f"Resume sent to {peer.name}")
            if got is None:
                return
            assert isinstance(got.body, Resume)
            report.check("resume from scratch", got.body.completed == 0)
        _serve_host(job, party, ending, report, server, guests, private, shapes)
    finally:
        server.close()
        for peer in guests.values():
            peer.close()


def _serve_host(
    job: JobConfig,
    party: str,
    ending: str,
    report: Report,
    server: Peer,
    guests: dict[str, Peer],
    private: PrivateKey,
    shapes: dict[str, Any],
) -> None:
    """Answer the host as Server and Guests until it finishes (or, on purpose, breaks it)."""
    key, n = private.public_key, private.public_key.n
    zero = [0]
    losses: list[tuple[float, int]] = []
    epochs = 0
    finished: set[str] = set()
    deadline = time.monotonic() + job.timeout_seconds * (job.training.epochs + 3)
    peers = [server, *guests.values()]
    while len(finished) < len(peers) and time.monotonic() < deadline:
        for peer in peers:
            try:
                env = peer.channel._receive(0.02)
            except PeerAborted as exc:
                if ending == "violation":
                    report.check("a Forward of the wrong length makes it Abort", True, str(exc))
                else:
                    report.check("the host runs to the end", False, str(exc))
                return
            if env is None:
                continue
            body, epoch = env.body, env.header.round
            if isinstance(body, Finish):
                finished.add(peer.name)
            elif isinstance(body, Batch):
                train = len(shapes[peer.name].x_train)
                rows = len(body.indices) if body.indices is not None else train
                if ending == "violation":
                    rows += 1
                scores = BigInts(tuple(key.encrypt([0] * rows)))
                peer.channel.send(party, Forward(epoch, body.batch, scores, BigInts(tuple(
                    key.encrypt(zero)))), epoch)  # fmt: skip
            elif isinstance(body, Residual):
                if epoch == 0 and body.batch == 0:
                    four_d = decode(private.decrypt(body.residual.values), VALUE_BITS, n)
                    ok = bool(np.all(np.isin(four_d, (-2.0, 2.0))))
                    report.check("first residual is 4d = −4ỹ + 2 ∈ {−2, 2}", ok, str(four_d[:4]))
                if body.others is not None:
                    value = BigInts(tuple(key.encrypt(zero)))
                    peer.channel.send(party, CrossTerm(epoch, body.batch, value), epoch)
            elif isinstance(body, ScoreRequest):
                data = shapes[peer.name]
                rows = len(data.x_test if body.split == "test" else data.x_train)
                values = BigInts(tuple(key.encrypt([0] * rows)))
                peer.channel.send(party, Scores(epoch, body.split, values), epoch)
            elif isinstance(body, DecryptRequest):
                plain = private.decrypt(body.values.values)
                reply = Decrypted(body.epoch, body.batch, body.purpose, BigInts(tuple(plain)))
                server.channel.send(party, reply, epoch)
            elif isinstance(body, Loss):
                (residue,) = private.decrypt(body.value.values)
                loss = float(decode([residue], body.scale_bits, n)[0]) / body.denominator
                rows_in_batch = body.denominator // 8  # the Host sends [[8·b·L]]
                losses.append((loss * rows_in_batch, rows_in_batch))
                if body.batch + 1 == body.n_batches:
                    mean = sum(v for v, _ in losses) / sum(r for _, r in losses)
                    losses.clear()
                    if epoch == 0:
                        ok = abs(mean - math.log(2)) < 1e-6
                        report.check("first epoch's Taylor loss is log 2 (z = 0)", ok, str(mean))
                    epochs += 1
                    stop = epochs >= job.training.epochs
                    result = EpochResult(epoch, mean, stop, "max_epochs" if stop else "")
                    server.channel.send(party, result, epoch)
    if ending == "violation":
        report.check("a Forward of the wrong length makes it Abort", False, "no Abort came")
        return
    report.check("Finish reached the server and every guest", len(finished) == len(peers))
    report.check("the host trained every epoch", epochs == job.training.epochs, str(epochs))


SCRIPTS: dict[str, Callable[[JobConfig, str, str, Report], None]] = {
    "guest": guest_script,
    "host": host_script,
    "server": server_script,
}


def run(job: JobConfig, role: str, party: str, ending: str) -> Report:
    """Run the scripted peer for ``role`` against the running ``party``."""
    spec = job.party(party)
    if spec.role != role:
        raise ConfigError(f"party {party} is a {spec.role}, not a {role}")
    if role not in SCRIPTS:
        raise ConfigError(f"no conformance script for role {role!r}")
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
