"""Script against a running guest: the tool plays the Server and the Host."""

from __future__ import annotations

import numpy as np

from privfl.config import JobConfig
from privfl.conformance.peer import (
    Peer,
    Report,
    expect,
    expect_abort,
    quiet,
    server_key,
)
from privfl.crypto import packing
from privfl.crypto.encoding import VALUE_BITS, decode, encode
from privfl.crypto.paillier import PrivateKey
from privfl.data.views import PartyData
from privfl.errors import ConfigError, CryptoError
from privfl.parties.taylor import gradient, learning_rate
from privfl.protocol.messages import (
    Batch,
    BigInts,
    Decrypted,
    DecryptRequest,
    Finish,
    Forward,
    Hello,
    Kind,
    Residual,
    Resume,
    ScoreRequest,
    Scores,
)


def handshake_with(
    report: Report, job: JobConfig, party: str, server: Peer, host: Peer
) -> tuple[PrivateKey, Hello] | None:
    """Hellos in, the public key out, the resume agreement (from scratch)."""
    hellos: list[Hello] = []
    for peer in (server, host):
        env = expect(report, peer, Kind.HELLO, party, f"Hello from {party} to {peer.name}")
        if env is not None:
            hello = env.body
            assert isinstance(hello, Hello)
            hellos.append(hello)
            report.check(
                "Hello carries the job fingerprint and role",
                hello.job_fingerprint == job.fingerprint() and hello.role == "guest",
                f"{hello.role} {hello.job_fingerprint[:12]}",
            )
    if not hellos:
        return None
    message, private = server_key(job)
    server.channel.send(party, message)
    if expect(report, host, Kind.CHECKPOINTS, party, "Checkpoints offer to the host") is None:
        return None
    host.channel.send(party, Resume(completed=0))
    return private, hellos[0]


def four_d(rows: int) -> np.ndarray:
    """The played Host's first residual ``4d``: it varies by row, so the step it causes
    is not zero (standardised columns sum to 0, so a constant residual would be)."""
    return np.linspace(-2.0, 2.0, rows)


def demo_data(job: JobConfig, party: str) -> PartyData | None:
    """The party's demo columns, for known answers; None for a job with data files."""
    from privfl.parties.runner import load_data

    try:
        return load_data(job, party, None, None)
    except ConfigError:
        return None


def guest_script(job: JobConfig, party: str, ending: str, report: Report) -> None:
    """Play the Server and the Host against a running guest."""
    server = Peer(job, job.server, job.timeout_seconds)
    host = Peer(job, job.host, job.timeout_seconds)
    try:
        agreed = handshake_with(report, job, party, server, host)
        if agreed is None:
            return
        private, hello = agreed
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
        rows = len(fwd.scores)  # one ciphertext per batch row: Forward is never packed
        scores = decode(private.decrypt(fwd.scores.values), VALUE_BITS, n)
        zero = bool(np.all(scores == 0)) and private.decrypt(fwd.sum_squares.values) == [0]
        report.check("first Forward encrypts z = Xθ = 0 and Σz² = 0", zero, str(scores[:3]))
        if ending == "violation":
            bad = private.public_key.encrypt(encode(np.zeros(rows + 1), VALUE_BITS, n))
            host.channel.send(party, Residual(0, 0, BigInts(tuple(bad)), None), 0)
            expect_abort(report, host, party, "a Residual of the wrong length makes it Abort")
            return
        residual = private.public_key.encrypt(encode(four_d(rows), VALUE_BITS, n))
        host.channel.send(party, Residual(0, 0, BigInts(tuple(residual)), None), 0)
        env = expect(report, server, Kind.DECRYPT_REQUEST, party, "Residual → DecryptRequest")
        if env is None:
            return
        request = env.body
        assert isinstance(request, DecryptRequest)
        report.check("DecryptRequest is for a gradient", request.purpose == "gradient")
        packed = packing.packed_length(hello.features, n)
        report.check(
            "the gradient is packed: ⌈features / slots(n)⌉ ciphertexts",
            len(request.values) == packed,
            f"{len(request.values)} for {hello.features} features, expected {packed}",
        )
        plain = private.decrypt(request.values.values)
        reply = Decrypted(request.epoch, request.batch, request.purpose, BigInts(tuple(plain)))
        server.channel.send(party, reply, 0)
        host.raw(party, ScoreRequest(0, "test"), session=job.session, msg_id=7777)
        host.raw(party, ScoreRequest(0, "test"), session=job.session, msg_id=7777)
        env = expect(report, host, Kind.SCORES, party, "ScoreRequest is answered with Scores")
        if env is not None:
            assert isinstance(env.body, Scores)
            _check_scores(report, job, party, private, hello, rows, env.body)
        quiet(report, [host], party, "a repeated message id is refused")
        host.channel.send(party, Finish(epochs=1, reason="conformance"))
        report.check("Finish sent; the guest must now exit 0", True)
    finally:
        host.close()
        server.close()


def _check_scores(
    report: Report,
    job: JobConfig,
    party: str,
    private: PrivateKey,
    hello: Hello,
    train_rows: int,
    got: Scores,
) -> None:
    """Packed test scores: the right count, every slot in range, and (demo data) the values.

    Hello's ``rows`` counts training and test rows; the full-batch Forward had one
    ciphertext per training row. The guest took one step from θ = 0 with the residual
    :func:`four_d`, so when it runs on the job's demo columns its test scores are known:
    ``X_test θ`` with ``θ = −lr·(X_trainᵀ·4d)/(4·rows)`` (no L2 term at θ = 0).
    """
    n = private.public_key.n
    test_rows = hello.rows - train_rows
    expected = packing.packed_length(test_rows, n)
    ok = report.check(
        "Scores are packed: ⌈test rows / slots(n)⌉ ciphertexts",
        got.split == "test" and len(got.scores) == expected,
        f"{len(got.scores)} for {test_rows} test rows, expected {expected}",
    )
    if not ok:
        return
    try:
        values = decode(
            packing.unpack(private.decrypt(got.scores.values), test_rows, n), VALUE_BITS, n
        )
    except CryptoError as exc:
        report.check("every packed slot holds v + 2^88 with |v| < 2^88", False, str(exc))
        return
    data = demo_data(job, party)
    shape = (hello.rows, hello.features, train_rows)
    if data is None or shape != (data.rows, data.x_train.shape[1], len(data.x_train)):
        report.check("every packed slot holds v + 2^88 with |v| < 2^88", True)
        return
    x_t_4d = data.x_train.T @ four_d(train_rows)
    theta0 = np.zeros(data.x_train.shape[1])
    step = gradient(x_t_4d, theta0, len(data.x_train), job.training.l2, np.ones_like(theta0))
    want = data.x_test @ (-learning_rate(job.training, 0) * step)
    error = float(np.max(np.abs(values - want), initial=0.0))
    report.check(
        "unpacked test scores are X_test θ after the known first step",
        error < 1e-4,
        f"max error {error:.3g} on scores up to {float(np.max(np.abs(want), initial=0.0)):.3g}",
    )
