"""Script against a running guest: the tool plays the Server and the Host of a GLM job.

Every GLM kind (logistic, linear, Poisson, multiclass by the Taylor residual or the
separable sigmoid; models/registry.py) gets the same two batches, with the kind's own
known answers (its ``learning/kinds`` object: the blocks of ``forward.scores``, k
outputs per row, the gradient's scale ``s``):

1. epoch 0, batch 0 of the joint plan (the whole training set for a full-batch job),
   from θ = 0: ``forward`` must encrypt ``z = 0`` in each of the kind's blocks (Poisson:
   ``exp(z)`` then ``z``; separable: its basis) and ``Σz² = 0``; the residual ``r``
   (b·k values) and the other guests' scores ``O`` are known values.
2. epoch 1, the same batch (every epoch repeats the plan): the scores ``z`` decrypt to
   ``X[idx]·θ₁`` (demo data), every other block is its function of ``z`` at its scale,
   ``sum_squares`` must be ``Σz²`` at 2^48, and the ``cross_term`` must be ``Σ z·O`` at
   2^48 for the ``others`` the kit sent (with two or more guests; with one, the residual
   carries no ``others`` and no cross term).

Before them the kit plays the batch plan's commit and reveal (docs/protocol.md §6.1a):
the guest's Hello must commit to a share, its ``plan_reveal`` must open it, and the kit's
Host derives the plan from every share as the guest does.

A ``score_request`` arrives while the guest still waits for its second gradient: it
must answer with the weights after that step (θ₂; demo data: ``X_test·θ₂`` decoded).
Every ciphertext is checked for a fresh obfuscator of the session's mode
(:mod:`privfl.tools.conformance.randomness`), every message the kit sends for an ACK, and
after ``finish`` the guest must stay silent, close its inbox and exit 0.
"""

from __future__ import annotations

import functools
import subprocess
from dataclasses import replace

import numpy as np

from privfl.config.core import encode_sections
from privfl.config.vertical import JobConfig
from privfl.crypto import packing
from privfl.crypto.encoding import LOSS_BITS, VALUE_BITS, decode, encode
from privfl.crypto.guest_masks import label
from privfl.data.alignment import row_commitment
from privfl.data.views import PartyData
from privfl.errors import ConfigError, CryptoError
from privfl.learning.glm import Glm, glm_of
from privfl.learning.taylor import learning_rate
from privfl.parties.vertical import joint_plan
from privfl.parties.vertical.batches import job_least_batch
from privfl.protocol.channel import body_as
from privfl.protocol.messages import (
    Batch,
    BigInts,
    CrossTerm,
    Decrypted,
    DecryptRequest,
    Finish,
    Forward,
    Hello,
    Kind,
    PlanReveal,
    Residual,
    Resume,
    ScoreRequest,
    Scores,
)
from privfl.tools.conformance.peer import (
    Peer,
    Report,
    acknowledged,
    exits_nonzero,
    expect,
    expect_abort,
    finished_cleanly,
    key_message,
    played_masks,
    quiet,
    unmasked,
)
from privfl.tools.conformance.randomness import Freshness, checkable_key, trivial
from privfl.tools.conformance.target import Target


def demo_data(job: JobConfig, party: str) -> PartyData | None:
    """The party's demo columns, for known answers; None for a job with data files."""
    from privfl.parties.vertical.runner import load_data

    try:
        return load_data(job, party, None, None)
    except ConfigError:
        return None


class GuestRun:
    """The played Server and Host, the key, and what the guest has been sent so far."""

    def __init__(self, job: JobConfig, party: str, report: Report) -> None:
        self.job, self.party, self.report = job, party, report
        self.server = Peer(job, job.server, job.timeout_seconds)
        self.host = Peer(job, job.host, job.timeout_seconds)
        self.private, order = checkable_key(job.key_bits, job.obfuscation)
        self.key = self.private.public_key
        self.fresh = Freshness(self.private, order)
        self.data = demo_data(job, party)
        self.hello: Hello | None = None
        self.key_sender = self.server  # the Server's key (the Host's for SecureBoost)
        self.train_rows = 0  # the guest's training rows
        self.plan: list[np.ndarray | None] = [None]  # the joint plan's attempt 0 (§6.1a)
        # The seeds the played Server gives the guest, and its zero-sum masks (§6.2).
        self.seeds, self.masks = played_masks(job, party)

    @functools.cached_property
    def glm(self) -> Glm:
        """The GLM kind's known answers (learning/kinds); the SecureBoost guest script,
        which reuses this class for the set-up, never asks."""
        return glm_of(self.job)

    @property
    def k(self) -> int:
        """Outputs per row of the job's GLM."""
        return self.glm.outputs

    @property
    def x_train(self) -> np.ndarray:
        assert self.data is not None
        return self.data.x_train

    def close(self) -> None:
        self.host.close()
        self.server.close()

    # --- set-up ------------------------------------------------------------------

    def handshake(self) -> bool:
        """Hellos in (fingerprint, role, row commitment), the key out, resume from scratch."""
        job, party, report = self.job, self.party, self.report
        digests = []
        for peer in (self.server, self.host):
            env = expect(report, peer, Kind.HELLO, party, f"Hello from {party} to {peer.name}")
            if env is None:
                return False
            hello = body_as(env.body, Hello)
            self.hello = hello
            digests.append(hello.rows_digest)
            report.check(
                f"Hello to {peer.name} carries the job's fingerprint and role guest",
                hello.job_fingerprint == job.fingerprint() and hello.role == "guest",
                f"{hello.role}, fingerprint {hello.job_fingerprint}, expected {job.fingerprint()}",
            )
            if hello.job_sections:  # optional (§2.1): when sent, they are the job's own
                report.check(
                    f"Hello to {peer.name} carries the job's section digests",
                    hello.job_sections == encode_sections(job.sections()),
                    f"job_sections {hello.job_sections}",
                )
        self._check_rows(digests)
        glm_session = self.key_sender is self.server  # SecureBoost draws no batch plan
        commits, shares = self._plan_commits() if glm_session else ({}, {})
        key = replace(
            key_message(self.job, self.key_sender.name, self.private),
            plan_commits=joint_plan.encode_pairs(commits),
            mask_seeds=self.seeds if glm_session else "",
        )
        self.key_sender.channel.send(party, key)
        if glm_session and not self._plan_reveal(commits, shares):
            return False
        if expect(report, self.host, Kind.CHECKPOINTS, party, "Checkpoints offer to the host"):
            self.host.channel.send(party, Resume(completed=0))
            return True
        return False

    def _plan_commits(self) -> tuple[dict[str, str], dict[str, bytes]]:
        """The guest's commitment from its Hellos, the played Host's and other guests' (§6.1a)."""
        job, hello = self.job, self.hello
        assert hello is not None
        self.report.check(
            "Hello carries a batch-plan commitment (plan_commit, §6.1a)",
            bool(hello.plan_commit),
            "none",
        )
        order = [job.host, *job.guests]
        shares = {p: joint_plan.contribution() for p in order if p != self.party}
        commits = {p: joint_plan.commit(job.session, p, r) for p, r in shares.items()}
        commits[self.party] = hello.plan_commit
        return {p: commits[p] for p in order}, shares

    def _plan_reveal(self, commits: dict[str, str], shares: dict[str, bytes]) -> bool:
        """The guest's share to the Host, every share back; the plan's attempt 0 (§6.1a)."""
        job, report, party = self.job, self.report, self.party
        what = "after public_key: plan_reveal of the guest's own share to the host"
        env = expect(report, self.host, Kind.PLAN_REVEAL, party, what)
        if env is None:
            return False
        theirs = joint_plan.decode_pairs(body_as(env.body, PlanReveal).shares)
        share = bytes.fromhex(theirs.get(party, "")) if set(theirs) == {party} else b""
        if not report.check(
            "plan_reveal holds the guest's share alone, and it opens its commitment",
            bool(share) and joint_plan.commit(job.session, party, share) == commits[party],
            f"shares of {sorted(theirs)}",
        ):
            return False
        shares = {**shares, party: share}
        order = [job.host, *job.guests]
        everything = joint_plan.encode_pairs({p: shares[p].hex() for p in order})
        self.host.channel.send(party, PlanReveal(everything))
        seed = joint_plan.joint_seed(job.session, order, shares)
        assert self.hello is not None
        rows = self.hello.train_rows or (len(self.x_train) if self.data is not None else 0)
        least = job_least_batch(job, rows)
        self.plan = joint_plan.drawn(seed, 0, rows, job.training.batch_size, least)
        self.train_rows = rows
        return True

    def _check_rows(self, digests: list[str]) -> None:
        """Both Hellos commit to the same rows; on demo data, to the demo split (§2.3)."""
        ok = self.report.check(
            "Hello carries a row commitment (rows_digest), the same to server and host",
            len(set(digests)) == 1 and bool(digests[0]),
            f"{digests}",
        )
        if ok and self.data is not None:
            want = row_commitment(self.job.session, self.data.train_ids, self.data.test_ids)
            self.report.check(
                "the row commitment is the demo split's (§2.2, §2.3)",
                digests[0] == want,
                f"got {digests[0][:16]}, expected {want[:16]}",
            )

    def invalid_messages(self) -> None:
        """Messages the guest must refuse without answering."""
        report, host, party = self.report, self.host, self.party
        host.raw(party, Batch(0, 0, 1, None), session="another-session")
        quiet(report, [host, self.server], party, "a Batch from another session is refused")
        host.garbage(party, self.job.session)
        quiet(report, [host, self.server], party, "a malformed Batch body is refused")

    # --- one batch -------------------------------------------------------------------

    def forward(self, epoch: int, indices: np.ndarray | None) -> np.ndarray | None:
        """Send ``batch``; return the decrypted scores after checking the kind's blocks and
        ``sum_squares``'s scale."""
        # Batch 0 of the joint plan in both epochs: a guest holds every Batch to the plan
        # and every epoch to the first one's row sets (docs/protocol.md §6.1a, §6.2).
        batch = Batch(epoch, 0, len(self.plan), indices)
        self.host.channel.send(self.party, batch, epoch)
        what = f"epoch {epoch}: Batch is answered with a Forward"
        env = expect(self.report, self.host, Kind.FORWARD, self.party, what)
        if env is None:
            return None
        fwd = body_as(env.body, Forward)
        n = self.key.n
        plain = self.fresh.observe("forward.scores", fwd.scores.values)
        plain = unmasked(self.masks, n, label("forward", epoch, 0), plain)
        z, bits = self._blocks(epoch, plain, indices)
        if z is None:
            return None
        squares = self.fresh.observe("forward.sum_squares", fwd.sum_squares.values)
        squares = unmasked(self.masks, n, label("squares", epoch, 0), squares)
        sum_squares = float(_decoded(squares, LOSS_BITS, n)[0])
        want = float(z @ z)
        slack = 2.0 ** -(bits + 1)  # each score's rounding at its block's scale
        self.report.check(
            f"epoch {epoch}: forward.sum_squares is Σz² at scale 2^48 (z at 2^{bits})",
            abs(sum_squares - want)
            <= 1e-6 * max(1.0, want) + len(z) * 2.0**-30 + 2 * slack * float(np.abs(z).sum()),
            f"sum_squares decodes to {sum_squares:.9g}, the scores give Σz² = {want:.9g}",
        )
        return z

    def _blocks(
        self, epoch: int, plain: list[int], indices: np.ndarray | None
    ) -> tuple[np.ndarray | None, int]:
        """The scores ``z`` (the last block) and its scale; every other block checked
        against its function of ``z`` (docs/protocol.md §6.8)."""
        blocks = self.glm.forward_blocks()
        size = len(plain) // len(blocks) if indices is None else len(indices) * self.k
        names = " | ".join(f"{name} at 2^{bits}" for name, bits, _ in blocks)
        if not self.report.check(
            f"epoch {epoch}: forward.scores holds the {self.job.model.kind} blocks {names}, "
            "b·k values each",
            len(plain) == size * len(blocks) and size % self.k == 0,
            f"{len(plain)} values for {len(blocks)} blocks of b·k (k = {self.k})",
        ):
            return None, 0
        n = self.key.n
        parts = [
            _decoded(plain[j * size : (j + 1) * size], b, n) for j, (_, b, _) in enumerate(blocks)
        ]
        z, bits = parts[-1], blocks[-1][1]
        for (name, block_bits, func), got in zip(blocks[:-1], parts[:-1], strict=True):
            error = float(np.max(np.abs(got - func(z)), initial=0.0))
            self.report.check(
                f"epoch {epoch}: forward.scores block {name} is {name} of the scores at "
                f"scale 2^{block_bits}",
                error <= 2.0 ** -(block_bits - 2),
                f"max error {error:.3g}",
            )
        return z, bits

    def backward(
        self, epoch: int, z: np.ndarray, four_d: np.ndarray, others: np.ndarray
    ) -> DecryptRequest | None:
        """Send ``residual`` with ``others``; check the cross term and the gradient request."""
        n, report, party = self.key.n, self.report, self.party
        residual = trivial(self.key, encode(four_d, VALUE_BITS, n))  # b·k values, row-major
        alone = len(self.job.guests) == 1  # no other guests' scores, so no cross term
        # As a Host sends them: the other guests' masked scores, ``O − M_g`` (§6.2).
        sent = self.glm.forward_length(len(z) // self.k)
        mask = self.masks.masks(n, label("forward", epoch, 0), sent)[-len(z) :]
        values = [(v - m) % n for v, m in zip(encode(others, VALUE_BITS, n), mask, strict=True)]
        other = None if alone else BigInts(tuple(trivial(self.key, values)))
        message = Residual(epoch, 0, BigInts(tuple(residual)), other)
        self.host.channel.send(party, message, epoch)
        what = f"epoch {epoch}: Residual → DecryptRequest to the server"
        env = expect(report, self.server, Kind.DECRYPT_REQUEST, party, what)
        if env is None:
            return None
        request = body_as(env.body, DecryptRequest)
        features = self.hello.features if self.hello else 0
        packed = packing.packed_length(features * self.k, n)
        report.check(
            f"epoch {epoch}: the gradient request is packed: ⌈features·k / slots(n)⌉ "
            f"ciphertexts (k = {self.k})",
            request.purpose == "gradient" and len(request.values) == packed,
            f"{request.purpose}, {len(request.values)} for {features} features, expected {packed}",
        )
        self.fresh.observe("decrypt_request (gradient)", request.values.values)
        if alone:
            return request
        what = f"epoch {epoch}: Residual with others → CrossTerm to the host"
        env = expect(report, self.host, Kind.CROSS_TERM, party, what)
        if env is not None:
            body = body_as(env.body, CrossTerm)
            plain = self.fresh.observe("cross_term", body.value.values)
            plain = unmasked(self.masks, n, label("cross", epoch, 0), plain)
            got = float(_decoded(plain, LOSS_BITS, n)[0])
            want = float(z @ others)
            report.check(
                f"epoch {epoch}: cross_term is Σ z·others at scale 2^48",
                abs(got - want) <= len(z) * 2.0**-14 + 1e-9,
                f"cross_term decodes to {got:.9g}, expected {want:.9g}",
            )
        return request

    def answer(self, request: DecryptRequest, epoch: int) -> None:
        """The Server's reply to the guest's gradient request (the masked residues)."""
        plain = self.private.decrypt(request.values.values)
        reply = Decrypted(request.epoch, request.batch, request.purpose, BigInts(tuple(plain)))
        self.server.channel.send(self.party, reply, epoch)


def guest_script(target: Target) -> None:
    """Play the Server and the Host (of one or more guests) against a running guest."""
    job, party, ending, report, process = target.parts()
    run = GuestRun(job, party, report)
    try:
        if not run.handshake():
            return
        run.invalid_messages()
        _two_batches(run, ending, process)
    finally:
        run.close()


def _two_batches(run: GuestRun, ending: str, process: subprocess.Popen[bytes] | None) -> None:
    report, party, n = run.report, run.party, run.key.n
    idx = run.plan[0]  # the whole training set for a full-batch job
    z = run.forward(0, idx)
    if z is None:
        return
    report.check("epoch 0: the first Forward encrypts z = Xθ = 0", bool(np.all(z == 0)))
    k = run.k
    rows = len(z) // k  # the batch's rows
    run.train_rows = run.train_rows or rows
    if ending == "violation":
        bad = trivial(run.key, encode(np.zeros(rows * k + 1), VALUE_BITS, n))
        run.host.channel.send(party, Residual(0, 0, BigInts(tuple(bad)), None), 0)
        what = "a Residual of the wrong length makes it Abort"
        exits_nonzero(report, party, process, expect_abort(report, run.host, party, what))
        return
    first = np.linspace(-2.0, 2.0, rows * k)  # varies by row, so the step is not zero
    request = run.backward(0, z, first, np.linspace(1.0, -1.0, rows * k))
    if request is None:
        return
    run.answer(request, 0)
    z = run.forward(1, idx)  # the same batch again: every epoch repeats the plan
    if z is None:
        return
    theta = _expected_weights(run, [(first, idx, 0)])
    if theta is not None:
        what = "epoch 1: forward scores are X[batch.indices]·θ₁"
        x = run.x_train if idx is None else run.x_train[idx]
        _close(report, what, z, (x @ theta).ravel())
    second = np.linspace(2.0, -1.0, rows * k)
    others = np.sign(z) * (1.0 + 0.5 * (np.arange(len(z)) % 3))  # Σ z·O far from 0
    request = run.backward(1, z, second, others)
    if request is None:
        return
    # The score request overtakes the gradient (the Host may be ahead): answer after the step.
    run.host.raw(party, ScoreRequest(1, "test"), session=run.job.session, msg_id=7777)
    run.host.raw(party, ScoreRequest(1, "test"), session=run.job.session, msg_id=7777)
    run.answer(request, 1)
    env = expect(report, run.host, Kind.SCORES, party, "ScoreRequest is answered with Scores")
    if env is not None:
        body = body_as(env.body, Scores)
        theta = _expected_weights(run, [(first, idx, 0), (second, idx, 1)])
        _check_scores(run, body, theta)
    quiet(report, [run.host], party, "a repeated message id is refused")
    acknowledged(report, [run.host, run.server], party)
    check_randomness(report, run.fresh)
    run.host.channel.send(party, Finish(epochs=2, reason="conformance"), 1)
    finished_cleanly(report, [run.host, run.server], party, run.job.party(party).endpoint, process)


def _expected_weights(
    run: GuestRun, steps: list[tuple[np.ndarray, np.ndarray | None, int]]
) -> np.ndarray | None:
    """θ (features × k) after the given (r, batch.indices, epoch) steps from θ = 0 (demo
    data only).

    The rule of docs/protocol.md §6.8: ``θ ← θ − lr_e·(Xᵀr/(s·b) + λθ/b)`` per class,
    ``s`` the kind's scale (4 for the Taylor residual ``4d``, else 1), with
    ``lr_e = learning_rate / (1 + lr_decay·e)``.
    """
    data = run.data
    if data is None or run.hello is None:
        return None
    if (run.hello.rows, run.hello.features) != (data.rows, data.x_train.shape[1]):
        return None
    t = run.job.training
    features = data.x_train.shape[1]
    theta = np.zeros((features, run.k))
    for r, idx, epoch in steps:
        x = data.x_train if idx is None else data.x_train[idx]
        step = run.glm.gradient(x.T @ r.reshape(-1, run.k), theta, len(x), t.l2, np.ones(features))
        theta = theta - learning_rate(t, epoch) * step
    return theta


def _decoded(plain: list[int], bits: int, n: int) -> np.ndarray:
    """Residues as fixed-point values; NaN where a value is no small number (a guest whose
    zero-sum mask is not the one its seeds give sends uniform residues): the check fails."""
    try:
        return decode(plain, bits, n)
    except CryptoError:
        return np.full(len(plain), np.nan)


def _close(report: Report, what: str, got: np.ndarray, want: np.ndarray) -> bool:
    error = float(np.max(np.abs(got - want), initial=0.0))
    top = float(np.max(np.abs(want), initial=0.0))
    return report.check(what, error < 5e-5, f"max error {error:.3g} on values up to {top:.3g}")


def _check_scores(run: GuestRun, got: Scores, theta: np.ndarray | None) -> None:
    """Packed test scores: the count, every slot in range, and (demo data) ``X_test·θ₂``."""
    report, n = run.report, run.key.n
    hello = run.hello
    assert hello is not None
    values_count = (hello.rows - run.train_rows) * run.k
    plain = run.fresh.observe("scores", got.scores.values)
    plain = unmasked(run.masks, n, label("scores", got.epoch, got.split), plain)
    expected = packing.packed_length(values_count, n)
    if not report.check(
        "Scores are packed: ⌈test rows·k / slots(n)⌉ ciphertexts, plain z at 2^32",
        got.split == "test" and len(got.scores) == expected,
        f"{len(got.scores)} for {values_count} test values, expected {expected}",
    ):
        return
    try:
        values = decode(packing.unpack(plain, values_count, n), VALUE_BITS, n)
    except CryptoError as exc:
        report.check("every packed slot holds v + 2^88 with |v| < 2^88", False, str(exc))
        return
    if theta is not None and run.data is not None:
        what = "test scores are X_test·θ₂: the gradient step came before the score request"
        _close(report, what, values, (run.data.x_test @ theta).ravel())


def check_randomness(report: Report, fresh: Freshness) -> None:
    """Every ciphertext the guest sent carried a fresh obfuscator of the session's mode."""
    report.check(
        "every ciphertext has a non-trivial obfuscator (fresh encryption or re-randomised)",
        not fresh.trivial,
        f"ρ = 1 in {', '.join(fresh.trivial[:4])} (not re-randomised?)",
    )
    report.check(
        "no obfuscator is used twice",
        not fresh.repeated,
        f"repeated in {', '.join(fresh.repeated[:4])} of {fresh.count} ciphertexts",
    )
    if fresh.order and fresh.count > fresh.holder_count:
        report.check(
            "every obfuscator is h_s^a (the session's djn mode)",
            not fresh.wrong_mode,
            f"not a power of h_s in {', '.join(fresh.wrong_mode[:4])}",
        )
    if fresh.order and fresh.holder_count:
        report.check(
            "what goes back to the key holder is re-randomised with a full-length r^n, "
            "not h_s^a (§6.0)",
            not fresh.holder_djn,
            f"a power of h_s in {', '.join(fresh.holder_djn[:4])}",
        )
