"""Script against a running host: the tool plays the Server and every Guest."""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from privfl.config import JobConfig
from privfl.conformance.peer import Peer, Report, expect, quiet
from privfl.crypto.encoding import VALUE_BITS, decode
from privfl.crypto.paillier import PrivateKey, generate_keypair
from privfl.errors import ConfigError, PeerAborted
from privfl.protocol.messages import (
    Batch,
    BigInts,
    Checkpoints,
    CrossTerm,
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


