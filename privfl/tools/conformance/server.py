"""Script against a running server: the tool plays the Host and every Guest.

Any GLM kind (models/registry.py): every request is sized by the kind's ``k`` outputs
per row, and flipback's training scores are asked for only where the kind has flipback.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from privfl.config.vertical import JobConfig
from privfl.crypto import packing
from privfl.crypto.encoding import LOSS_BITS, VALUE_BITS, encode, loss_denominator
from privfl.crypto.guest_masks import decode_seeds
from privfl.crypto.paillier import PublicKey as PaillierKey
from privfl.crypto.paillier import unmask
from privfl.data.alignment import positions, row_commitment
from privfl.errors import CryptoError
from privfl.learning.glm import glm_of
from privfl.learning.taylor import batch_sizes
from privfl.parties.vertical import joint_plan
from privfl.parties.vertical.batches import job_least_batch
from privfl.parties.vertical.server_rules import split_sizes
from privfl.protocol import fresh
from privfl.protocol.channel import body_as
from privfl.protocol.messages import (
    Decrypted,
    DecryptRequest,
    EpochResult,
    Finish,
    Hello,
    Kind,
    Loss,
    PublicKeyMessage,
    Resume,
)
from privfl.tools.conformance.peer import (
    Peer,
    Report,
    check_public_key,
    exits_nonzero,
    expect,
    expect_abort,
    finished_cleanly,
    quiet,
)
from privfl.tools.conformance.target import Target


def server_script(target: Target) -> None:
    """Play the Host and every Guest against a running server, for two epochs.

    Each epoch: every party's gradient (packed to the job's feature counts), the loss
    at the protocol's scale and denominator, the verdict, then the score requests the
    Server must allow — the test rows each epoch, the training rows at a flipback epoch.
    """
    job, party, ending, report, process = target.parts()
    host = Peer(job, job.host, job.timeout_seconds)
    guests = [Peer(job, name, job.timeout_seconds) for name in job.guests]
    guest = guests[0]
    try:
        key = _server_handshake(job, party, report, host, guests)
        if key is None:
            return
        plan = _ServerPlan.of(job)
        for epoch in range(2):
            if not _server_epoch(report, party, host, guests, key, plan, epoch):
                return
        if ending == "violation":
            request = _gradient_request(key, plan.features[guest.name], 2)[0]
            guest.channel.send(party, request, 2)
            # The same gradient twice: not allowed (raw: our channel sends a vector once).
            guest.raw(party, request, session=job.session)
            what = "a repeated gradient decryption makes it Abort"
            exits_nonzero(report, party, process, expect_abort(report, guest, party, what))
            return
        host.channel.send(party, Finish(epochs=2, reason="conformance"))
        finished_cleanly(report, [host, *guests], party, job.party(party).endpoint, process)
    finally:
        host.close()
        for peer in guests:
            peer.close()


@dataclass(frozen=True)
class _ServerPlan:
    """What the played parties announce and what the job then fixes."""

    rows: int
    train: int
    test: int
    features: dict[str, int]  # per played party, the job's count (the Host's with the bias)
    batches: tuple[int, ...]  # the Host's plan: a too-short last batch folded
    flipback_every: int
    outputs: int  # k: each gradient and score request carries k values per feature / row

    @staticmethod
    def of(job: JobConfig) -> _ServerPlan:
        rows = 100
        train, test = split_sizes(rows, job.data.test_size, job.data.split_seed)
        batches = batch_sizes(train, job.training.batch_size, job_least_batch(job, train))
        glm = glm_of(job)
        flipback = glm.flipback and math.isfinite(job.label_dp.epsilon)
        return _ServerPlan(
            rows,
            train,
            test,
            {
                name: job.party(name).declared_features + (name == job.host)
                for name in (job.host, *job.guests)
            },
            tuple(batches),
            job.label_dp.flipback_every if flipback else 0,
            glm.outputs,
        )


def _server_handshake(
    job: JobConfig, party: str, report: Report, host: Peer, guests: list[Peer]
) -> PaillierKey | None:
    """Every Hello (the job's feature counts, one row commitment), the public key, resume."""
    fingerprint = job.fingerprint()
    plan = _ServerPlan.of(job)
    digest = row_commitment(job.session, positions(range(plan.rows)), ())
    commits = {
        peer.name: joint_plan.commit(job.session, peer.name, joint_plan.contribution())
        for peer in (host, *guests)
    }
    for peer in (host, *guests):
        role = "host" if peer is host else "guest"
        hello = Hello(role, fingerprint, plan.rows, plan.features[peer.name], digest)
        peer.channel.send(party, replace(hello, plan_commit=commits[peer.name]))
    keys, seeds = {}, {}
    relayed = joint_plan.encode_pairs(commits)
    for peer in (host, *guests):
        env = expect(report, peer, Kind.PUBLIC_KEY, party, f"public key sent to {peer.name}")
        if env is None:
            return None
        body = body_as(env.body, PublicKeyMessage)
        keys[peer.name] = (body.n, body.h_s)
        seeds[peer.name] = decode_seeds(body.mask_seeds)
        if not check_public_key(report, job, body, party):
            return None
        report.check(
            f"public_key to {peer.name} relays every plan commitment, the host's first (§6.1a)",
            body.plan_commits == relayed,
            f"plan_commits {body.plan_commits[:40] or 'none'}",
        )
    report.check("every party gets the same key (n and h_s)", len(set(keys.values())) == 1)
    _check_mask_seeds(report, host.name, [g.name for g in guests], seeds)
    if expect(report, host, Kind.CHECKPOINTS, party, "Checkpoints offer to the host") is None:
        return None
    host.channel.send(party, Resume(completed=0))
    return PaillierKey.from_n(*keys[host.name])


def _check_mask_seeds(
    report: Report, host: str, guests: list[str], seeds: dict[str, dict[str, bytes]]
) -> None:
    """§6.2: no seed to the Host; to each guest one per other guest, both ends of a pair
    the same seed, and no two pairs alike (32 bytes from a CSPRNG never collide)."""
    report.check("public_key to the host carries no mask_seeds", not seeds[host])
    pairs = {(a, b) for a in guests for b in guests if a < b}
    ok = all(set(seeds[g]) == set(guests) - {g} for g in guests) and all(
        seeds[a][b] == seeds[b][a] for a, b in pairs
    )
    report.check(
        "public_key to each guest carries one mask seed per other guest, the same at both "
        "ends of a pair, every pair its own",
        ok and len({seeds[a][b] for a, b in pairs}) == len(pairs),
        ", ".join(f"{g}: {sorted(seeds[g])}" for g in guests),
    )


def _gradient_request(
    key: PaillierKey, features: int, epoch: int, batch: int = 0
) -> tuple[DecryptRequest, list[int], list[int]]:
    """A gradient as a correct party sends it: packed, re-randomised, masked."""
    values = ([5, 0, key.n - 1] * features)[:features]  # 5, 0 and −1 as residues mod n
    masked, masks = fresh.mask(key, packing.pack(key, key.encrypt(values)))
    return DecryptRequest(epoch, batch, "gradient", masked), masks, values


def _server_epoch(
    report: Report,
    party: str,
    host: Peer,
    guests: list[Peer],
    key: PaillierKey,
    plan: _ServerPlan,
    epoch: int,
) -> bool:
    """Every batch's gradients and loss, the verdict, the due score requests."""
    mean = 0.25 - 0.01 * epoch  # changes by more than the tolerance: no early stop
    for batch, rows in enumerate(plan.batches):
        for peer in (*guests, host):
            size = plan.features[peer.name] * plan.outputs
            request, masks, values = _gradient_request(key, size, epoch, batch)
            if epoch == 0 and batch == 0 and peer is guests[0]:
                peer.raw(party, request, session="another-session")
                quiet(report, [peer, host], party, "a request from another session is refused")
            peer.channel.send(party, request, epoch)
            env = expect(report, peer, Kind.DECRYPTED, party, "DecryptRequest → Decrypted")
            if env is None or not isinstance(env.body, Decrypted):
                return False
            _check_decrypted(report, env.body, request, masks, values, key.n)
        loss = encode([loss_denominator(rows) * mean], LOSS_BITS, key.n)
        value = fresh.encrypt(key, loss)
        n_batches = len(plan.batches)
        host.channel.send(
            party, Loss(epoch, batch, n_batches, value, loss_denominator(rows), LOSS_BITS), epoch
        )
    env = expect(report, host, Kind.EPOCH_RESULT, party, "Loss → EpochResult")
    if env is None:
        return False
    body = body_as(env.body, EpochResult)
    report.check("loss is decrypted and averaged", abs(body.loss - mean) < 1e-9)
    _score_requests(report, party, host, key, plan, epoch)
    return True


def _score_requests(
    report: Report, party: str, host: Peer, key: PaillierKey, plan: _ServerPlan, epoch: int
) -> None:
    """The Host's score decryptions of an epoch, packed as a correct Host packs them.

    Flipback (a flipback epoch only): every training row, packed by the Host under
    encryption. Evaluation: the test rows, packed by the guests before encryption.
    """
    n = key.n
    every = plan.flipback_every
    k = plan.outputs
    train = encode(np.linspace(-3.0, 3.0, plan.train * k), VALUE_BITS, n)
    test = encode(np.linspace(2.0, -1.0, plan.test * k), VALUE_BITS, n)
    requests = []
    if every and (epoch + 1) % every == 0:
        requests.append(("flipback", packing.pack(key, key.encrypt(train)), train))
    requests.append(("test", key.encrypt(packing.pack_plain(test, n)), test))
    for what, ciphertexts, values in requests:
        masked, masks = fresh.mask(key, ciphertexts)
        request = DecryptRequest(epoch, 0, "scores", masked)
        host.channel.send(party, request, epoch)
        env = expect(report, host, Kind.DECRYPTED, party, f"packed {what} scores → Decrypted")
        if env is None or not isinstance(env.body, Decrypted):
            return
        _check_decrypted(report, env.body, request, masks, values, n)


def _check_decrypted(
    report: Report,
    got: Decrypted,
    request: DecryptRequest,
    masks: list[int],
    values: list[int],
    n: int,
) -> None:
    """The echo, one plaintext per packed ciphertext, and the values behind mask and packing."""
    echo = (got.epoch, got.batch, got.purpose) == (request.epoch, request.batch, request.purpose)
    if not report.check(
        f"{request.purpose} decryption echoes the request, one plaintext per ciphertext",
        echo and len(got.values) == len(request.values),
        f"{len(got.values)} values for {len(request.values)}",
    ):
        return
    try:
        plain = packing.unpack(unmask(got.values.values, masks, n), len(values), n)
    except CryptoError as exc:
        report.check(f"{request.purpose} decryption is correct", False, str(exc))
        return
    report.check(f"{request.purpose} decryption is correct", plain == values, str(plain[:3]))
