"""Scripts against a running guest and a running server."""

from __future__ import annotations

import numpy as np

from privfl.config import JobConfig
from privfl.conformance.peer import Peer, Report, expect, expect_abort, quiet
from privfl.crypto.encoding import VALUE_BITS, decode, encode
from privfl.crypto.paillier import PrivateKey, generate_keypair
from privfl.crypto.paillier import PublicKey as PaillierKey
from privfl.errors import ConfigError
from privfl.protocol.messages import (
    Batch,
    BigInts,
    Decrypted,
    DecryptRequest,
    EpochResult,
    Finish,
    Forward,
    Hello,
    Kind,
    Loss,
    PublicKey,
    Residual,
    Resume,
    ScoreRequest,
    Scores,
)


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


