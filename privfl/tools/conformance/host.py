"""Script against a running host: the tool plays the Server and every Guest.

Any GLM kind (models/registry.py): the played guests keep θ_g = 0 and send the kind's
``forward`` blocks of zero scores (learning/kinds), so the first batch's residual and
loss are known where the kind's rules make them so (Taylor: ``4d = z_H − 4ỹ + 2`` and
its loss; linear: ``r = z_H − y`` and ``½ mean Σr²``; Poisson and separable:
host_answers.py); every request is sized by ``k``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from privfl.config.vertical import JobConfig
from privfl.crypto import packing
from privfl.crypto.encoding import LOSS_FACTOR, VALUE_BITS, decode, encode
from privfl.crypto.paillier import PrivateKey
from privfl.crypto.paillier import PublicKey as PaillierKey
from privfl.data.alignment import row_commitment
from privfl.errors import PeerAborted, ProtocolError
from privfl.learning.glm import Glm, glm_of
from privfl.learning.kinds.base import Additive
from privfl.parties.vertical import joint_plan
from privfl.parties.vertical.batches import job_least_batch
from privfl.protocol import fresh
from privfl.protocol.channel import body_as
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
    PlanReveal,
    Residual,
    Resume,
    ScoreRequest,
    Scores,
)
from privfl.tools.conformance import host_answers as answers
from privfl.tools.conformance.peer import (
    Peer,
    Report,
    exits_nonzero,
    expect,
    finished_cleanly,
    host_counterparts,
    quiet,
    server_key,
)
from privfl.tools.conformance.target import Target


def host_script(target: Target) -> None:
    """Play the Server and every Guest against a running host (demo-data jobs only)."""
    job, party, ending, report, process = target.parts()
    shapes, server, guests = host_counterparts(job)
    try:
        env = expect(report, server, Kind.HELLO, party, "Hello from the host to the server")
        if env is None:
            return
        body = body_as(env.body, Hello)
        report.check("Hello says host", body.role == "host")
        data = next(iter(shapes.values()))
        digest = row_commitment(job.session, data.train_ids, data.test_ids)
        report.check(
            "the host's row commitment is the demo split's (§2.3)",
            body.rows_digest == digest,
            f"got {body.rows_digest[:16] or 'none'}, expected {digest[:16]}",
        )
        report.check(
            "Hello carries a batch-plan commitment (plan_commit, §6.1a)", bool(body.plan_commit)
        )
        shares = {name: joint_plan.contribution() for name in guests}
        commits = {party: body.plan_commit}
        for name, peer in guests.items():
            features = shapes[name].x_train.shape[1]
            commits[name] = joint_plan.commit(job.session, name, shares[name])
            hello = Hello("guest", job.fingerprint(), body.rows, features, digest)
            peer.channel.send(party, replace(hello, plan_commit=commits[name]))
        message, private = server_key(job)
        server.channel.send(party, replace(message, plan_commits=joint_plan.encode_pairs(commits)))
        seed = _plan_reveal(job, party, report, guests, commits, shares)
        if seed is None:
            return
        rows = len(next(iter(shapes.values())).x_train)
        least = 1 if job.training.allow_small_batches else job_least_batch(job, rows)
        free = job.training.allow_small_batches
        checks = {
            name: joint_plan.PlanCheck(party, seed, rows, job.training.batch_size, least, free)
            for name in guests
        }
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
            got_body = body_as(got.body, Resume)
            report.check("resume from scratch", got_body.completed == 0)
        rules = ServerRules(job, body.features, shapes, glm_of(job), plans=checks)
        _serve_host(job, party, ending, report, server, guests, private, rules)
        if ending == "violation":
            exits_nonzero(report, party, process)
        elif report.passed:
            endpoint = job.party(party).endpoint
            finished_cleanly(report, [server, *guests.values()], party, endpoint, process)
    finally:
        server.close()
        for peer in guests.values():
            peer.close()


def _plan_reveal(
    job: JobConfig,
    party: str,
    report: Report,
    guests: dict[str, Peer],
    commits: dict[str, str],
    shares: dict[str, bytes],
) -> bytes | None:
    """Every played guest's share to the host; the host's reveal of every share back, checked
    at each guest (§6.1a). The joint seed, or None once the host fails."""
    for name, peer in guests.items():
        peer.channel.send(party, PlanReveal(joint_plan.encode_pairs({name: shares[name].hex()})))
    order = [party, *guests]
    seeds = set()
    for name, peer in guests.items():
        env = expect(report, peer, Kind.PLAN_REVEAL, party, f"plan_reveal of every share to {name}")
        if env is None:
            return None
        theirs = joint_plan.decode_pairs(body_as(env.body, PlanReveal).shares)
        host_share = bytes.fromhex(theirs.get(party, "")) if list(theirs) == order else b""
        opened = (
            bool(host_share) and joint_plan.commit(job.session, party, host_share) == commits[party]
        )
        same = all(theirs.get(g) == shares[g].hex() for g in guests)
        if not report.check(
            f"plan_reveal to {name} holds the host's share (opening its commitment), then every "
            "guest's in job order",
            opened and same,
            f"shares of {list(theirs)}",
        ):
            return None
        seeds.add(joint_plan.joint_seed(job.session, order, {**shares, party: host_share}))
    return seeds.pop() if len(seeds) == 1 else None


@dataclass
class ServerRules:
    """What the played Server expects of the host's decryption requests (§6.2, §6.0).

    Gradients: ⌈features / slots(n)⌉ values, once per batch. Scores: at most two per
    epoch, ⌈test rows / slots(n)⌉ for evaluation (after a ``score_request``) and
    ⌈training rows / slots(n)⌉ for flipback (the Host packs its cached sums itself).
    """

    job: JobConfig
    features: int  # the host's Hello: its columns + the bias
    shapes: dict[str, Any]
    glm: Glm  # the job's kind: k outputs per row, flipback or not
    gradients: set[tuple[int, int]] = field(default_factory=set)
    losses: set[tuple[int, int]] = field(default_factory=set)
    asked_test: set[int] = field(default_factory=set)  # epochs with a score_request(test)
    scores: dict[int, list[str]] = field(default_factory=dict)  # epoch → splits decrypted
    problems: list[str] = field(default_factory=list)
    forwards: dict[tuple[str, int, int], tuple[int, ...]] = field(default_factory=dict)
    readable: list[str] = field(default_factory=list)  # residual rows a guest could read
    residuals_seen: dict[tuple[int, int], set[tuple[int, ...]]] = field(default_factory=dict)
    first_rows: np.ndarray | None = None  # the first batch's batch.indices (None: all rows)
    plans: dict[str, joint_plan.PlanCheck] = field(default_factory=dict)  # per played guest
    lowest_loss: float = math.inf  # of every loss the host sent

    def residual(self, guest: str, epoch: int, body: Residual, key: PaillierKey) -> None:
        """Attack the residual as an honest-but-curious guest would (issue 11).

        Divide ``[[4d]]`` by every played guest's Forward ciphertexts (and ``others`` by
        the other guests'): a host that did not re-randomise leaves ``1 + n·m``, which
        reads ``m`` in the clear. Each guest must also get its own ciphertexts.
        """
        names = list(self.shapes)
        batch = [self.forwards.get((g, epoch, body.batch)) for g in names]
        if any(f is None for f in batch):
            return
        # Only an additive residual ([[r]] = Σ forwards · (1 + n·plain)) divides out:
        # Poisson's and the separable sigmoid's multiply the forwards by secret weights.
        additive = isinstance(self.glm, Additive)
        parts = [("residual", body.residual.values, names)] if additive else []
        if body.others is not None and additive:
            parts.append(("others", body.others.values, [g for g in names if g != guest]))
        for what, values, senders in parts:
            divisor = [self.forwards[(g, epoch, body.batch)] for g in senders]
            rows = readable_rows(key, values, divisor)
            if rows:
                self.readable.append(f"{guest} reads {rows} {what} rows of ({epoch}, {body.batch})")
        seen = self.residuals_seen.setdefault((epoch, body.batch), set())
        if body.residual.values in seen:
            self.readable.append(f"{guest} got the same residual ciphertexts as another guest")
        seen.add(body.residual.values)

    def check(self, body: DecryptRequest, epoch: int, n: int) -> None:
        """Note every way ``body`` differs from what a correct host sends."""
        if epoch != body.epoch:
            self.problems.append(f"round {epoch} for a request of epoch {body.epoch}")
        if body.purpose == "gradient":
            key = (body.epoch, body.batch)
            want = packing.packed_length(self.features * self.glm.outputs, n)
            if key in self.gradients or len(body.values) != want:
                self.problems.append(
                    f"gradient {key}: {len(body.values)} values (expected {want}), "
                    f"{'repeated' if key in self.gradients else 'first'}"
                )
            self.gradients.add(key)
            return
        data = next(iter(self.shapes.values()))
        split = "test" if body.epoch in self.asked_test else "train"
        rows = len(data.x_test if split == "test" else data.x_train)
        want = packing.packed_length(rows * self.glm.outputs, n)
        done = self.scores.setdefault(body.epoch, [])
        if body.purpose != "scores" or len(body.values) != want or split in done:
            self.problems.append(
                f"{body.purpose} request in epoch {body.epoch} ({split} split, {rows} rows): "
                f"{len(body.values)} values, expected {want}"
            )
        done.append(split)

    def flipbacks_due(self, epochs: int) -> int:
        """Epochs after which the host must ask for the training rows' scores (flipback)."""
        cfg = self.job.label_dp
        if not self.glm.flipback or not cfg.flipback_every or not math.isfinite(cfg.epsilon):
            return 0
        return sum((e + 1) % cfg.flipback_every == 0 for e in range(epochs - 1))


def _serve_host(
    job: JobConfig,
    party: str,
    ending: str,
    report: Report,
    server: Peer,
    guests: dict[str, Peer],
    private: PrivateKey,
    rules: ServerRules,
) -> None:
    """Answer the host as Server and Guests until it finishes (or, on purpose, breaks it).

    The played Guests keep θ_g = 0: every Forward and Scores encrypts zeros (Scores
    packed as a guest packs them), so the first epoch's loss is known.
    """
    key, n = private.public_key, private.public_key.n
    shapes, glm, k = rules.shapes, rules.glm, rules.glm.outputs
    zero = [0]
    losses: list[tuple[float, int]] = []
    first = np.zeros(0)  # the first residual, decrypted: its loss is checked against it
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
                if (epoch, body.batch) == (0, 0):
                    rules.first_rows = body.indices
                if peer.name in rules.plans:
                    try:
                        rules.plans[peer.name].check(epoch, body.batch, body.indices)
                    except ProtocolError as exc:
                        report.check(
                            "every batch follows the jointly drawn plan (§6.2)", False, str(exc)
                        )
                        return
                train = len(shapes[peer.name].x_train)
                rows = len(body.indices) if body.indices is not None else train
                if ending == "violation":
                    rows += 1
                # θ_g = 0: the kind's blocks of zero scores, one per row and class, not packed
                scores = fresh.encrypt(key, glm.forward_plain(np.zeros(rows * k), n))
                rules.forwards[(peer.name, epoch, body.batch)] = scores.values
                forward = Forward(epoch, body.batch, scores, fresh.encrypt(key, zero))
                peer.channel.send(party, forward, epoch)
            elif isinstance(body, Residual):
                rules.residual(peer.name, epoch, body, key)
                if epoch == 0 and body.batch == 0:
                    first = decode(private.decrypt(body.residual.values), VALUE_BITS, n)
                    answers.first_residual(report, glm, first)
                if epoch == 0 and body.batch == 0 and glm.taylor:
                    ok = not np.all(np.isin(first, (-2.0, 2.0)))  # z_H = 0 would give ±2
                    what = "first residual 4d = z_H − 4ỹ + 2 is not ±2: the host starts private"
                    report.check(what, ok, str(first[:4]))
                if body.others is not None:
                    value = fresh.encrypt(key, zero)
                    peer.channel.send(party, CrossTerm(epoch, body.batch, value), epoch)
            elif isinstance(body, ScoreRequest):
                if body.split == "test":
                    rules.asked_test.add(body.epoch)
                data = shapes[peer.name]
                rows = len(data.x_test if body.split == "test" else data.x_train)
                packed = packing.pack_plain(encode(np.zeros(rows * k), VALUE_BITS, n), n)
                values = fresh.encrypt(key, packed)
                peer.channel.send(party, Scores(epoch, body.split, values), epoch)
            elif isinstance(body, DecryptRequest):
                rules.check(body, epoch, n)
                plain = private.decrypt(body.values.values)
                reply = Decrypted(body.epoch, body.batch, body.purpose, BigInts(tuple(plain)))
                server.channel.send(party, reply, epoch)
            elif isinstance(body, Loss):
                rules.losses.add((body.epoch, body.batch))
                (residue,) = private.decrypt(body.value.values)
                loss = float(decode([residue], body.scale_bits, n)[0]) / body.denominator
                rows_in_batch = body.denominator // LOSS_FACTOR  # the Host sends [[8·b·L]]
                losses.append((loss * rows_in_batch, rows_in_batch))
                rules.lowest_loss = min(rules.lowest_loss, loss)
                if (epoch, body.batch) == (0, 0):  # θ_H moves after each batch; θ_g stays 0
                    first_loss(report, glm, first, loss)
                    if (host := answers.known_host(job, glm)) is not None:
                        answers.poisson_first(report, host, rules.first_rows, first, loss)
                if body.batch + 1 == body.n_batches:
                    mean = sum(v for v, _ in losses) / sum(r for _, r in losses)
                    losses.clear()
                    epochs += 1
                    stop = epochs >= job.training.epochs
                    result = EpochResult(epoch, mean, stop, "max_epochs" if stop else "")
                    server.channel.send(party, result, epoch)
    if ending == "violation":
        report.check("a Forward of the wrong length makes it Abort", False, "no Abort came")
        return
    report.check("Finish reached the server and every guest", len(finished) == len(peers))
    report.check("the host trained every epoch", epochs == job.training.epochs, str(epochs))
    _report_requests(report, rules, epochs)


def first_loss(report: Report, glm: Glm, first: np.ndarray, loss: float) -> None:
    """The first batch's loss from its residual where the kind makes it a function of it.

    With z_g = 0: Taylor, each entry's loss is ``log 2 + (4d)²/8 − 1/2`` whatever ỹ;
    linear, ``½ r²`` with ``r = z_H − y``. Poisson and the separable fit need the labels.
    """
    rows = len(first) // glm.outputs
    if glm.taylor:
        k = glm.outputs
        want = k * math.log(2) + float(np.sum(first**2)) / (8 * rows) - k / 2
        what = "first batch's Taylor loss is mean(log 2 + (4d)²/8 − 1/2) (z_g = 0)"
    elif glm.regression and isinstance(glm, Additive):
        want = float(np.sum(first**2)) / (2 * rows)
        what = "first batch's squared loss is mean(½ r²), r = z_H − y (z_g = 0)"
    else:
        return
    if glm.outputs > 1:
        what += ", summed over the k classes"
    report.check(what, abs(loss - want) < 1e-6 * max(1.0, abs(want)), f"{loss} vs {want}")


def readable_rows(
    key: PaillierKey, values: Sequence[int], divisors: Sequence[Sequence[int]]
) -> int:
    """How many ``values_i / Π divisors_i`` are trivial encryptions ``1 + n·m`` (readable)."""
    n, n2 = key.n, key.nsquare
    count = 0
    for i, value in enumerate(values):
        product = 1
        for divisor in divisors:
            product = product * divisor[i] % n2
        quotient = value * pow(product, -1, n2) % n2
        count += (quotient - 1) % n == 0
    return count


def _report_requests(report: Report, rules: ServerRules, epochs: int) -> None:
    """The host's decryption requests against the Server's rules, once the run is over."""
    report.check(
        "every residual and others is re-randomised for its guest (no row readable "
        "by dividing out the guests' Forward ciphertexts)",
        not rules.readable and bool(rules.residuals_seen),
        "; ".join(rules.readable[:3]) or "no residual was checked",
    )
    report.check(
        "every decryption request is packed and allowed (⌈count / slots(n)⌉ values)",
        not rules.problems,
        "; ".join(rules.problems[:3]),
    )
    report.check(
        "one packed gradient decryption per batch",
        rules.gradients == rules.losses,
        f"{len(rules.gradients)} gradients for {len(rules.losses)} batches",
    )
    if rules.glm.separable:  # its loss fit is held ≥ 0 (learning/separable.py, §6.8)
        report.check(
            "every loss the host sends is ≥ 0 (the separable fit of the cross-entropy)",
            rules.lowest_loss >= -1e-9,
            f"lowest loss {rules.lowest_loss}",
        )
    tests = sum(splits.count("test") for splits in rules.scores.values())
    flips = sum(splits.count("train") for splits in rules.scores.values())
    due = rules.flipbacks_due(epochs)
    report.check(
        "packed test scores every epoch, training scores at each flipback",
        (tests, flips) == (epochs, due),
        f"{tests} test and {flips} flipback requests, expected {epochs} and {due}",
    )
