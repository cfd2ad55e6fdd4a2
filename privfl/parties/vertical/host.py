"""The Host's driver: handshake, the epoch loop of docs/protocol.md §6.2, evaluation and outputs."""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from privfl import pulse
from privfl.config.vertical import JobConfig
from privfl.crypto import packing
from privfl.crypto.engine import POOL, Engine
from privfl.crypto.paillier import PublicKey
from privfl.data.views import PartyData
from privfl.errors import ConfigError, TrainingDiverged
from privfl.learning import glm as glms
from privfl.learning.metrics import plot_history
from privfl.learning.taylor import batch_sizes, learning_rate
from privfl.models.registry import kind_of
from privfl.parties import checkpoint, label_draws
from privfl.parties.files import append_jsonl, open_private, write_json
from privfl.parties.label_draws import LabelDraw
from privfl.parties.session import PartyContext
from privfl.parties.vertical import host_steps as steps
from privfl.parties.vertical.batches import check_batch, job_least_batch, job_plan
from privfl.parties.vertical.handshake import (
    announce,
    check_hello,
    check_rows,
    receive_key_message,
    rows_digest,
    save_model,
)
from privfl.parties.vertical.host_steps import HostState
from privfl.parties.vertical.joint_plan import commit, host_exchange, own_share, require_commit
from privfl.protocol.messages import (
    Batch,
    CrossTerm,
    Decrypted,
    DecryptRequest,
    EpochResult,
    Finish,
    Forward,
    Hello,
    ScoreRequest,
    Scores,
)

log = logging.getLogger("privfl.host")
EpochHook = Callable[[dict[str, Any]], None]
T = TypeVar("T")


def run_host(
    ctx: PartyContext,
    data: PartyData,
    on_epoch: EpochHook | None = None,
    *,
    workers: int = 1,
    label_rng: np.random.Generator | None = None,
    redraw_labels: bool = False,
    engine: Engine = POOL,
) -> dict[str, Any]:
    """Train with every guest and the Server, evaluate each epoch, write the outputs.

    ``workers`` processes compute the Host's obfuscators ahead (0 = one per core), on
    this machine or on the party's own Ray cluster (``engine``).
    ``label_rng``: None (always, outside experiments) flips the labels with a generator
    seeded from the OS CSPRNG; a seeded one makes the run reproducible and not private.
    The job's public ``seed`` chooses only the batch order. The labels are drawn once
    per job and reused on every start; ``redraw_labels`` draws anew (and books the ε).
    """
    start = time.monotonic()
    job = ctx.job
    drawn = draw_once(ctx, data, label_rng, redraw_labels)  # saved before our first message
    key, guests, least, seed = handshake(ctx, data)
    noise = engine.pool(key.n, workers, key.h_s)
    try:
        state = steps.init_state(data, key, guests, job, label_rng, noise, drawn)
        state.least_batch, state.plan_seed = least, seed
        noise.prefetch(first_epoch_obfuscations(state, job))
        return train(ctx, state, on_epoch, start, drawn)
    finally:
        noise.close()


def draw_once(
    ctx: PartyContext, data: PartyData, label_rng: np.random.Generator | None, redraw: bool
) -> LabelDraw:
    """The job's one label draw: loaded from OUT, or drawn and saved now (label_draws.py)."""
    return label_draws.take(
        ctx.out,
        ctx.job.fingerprint(),
        ctx.job.label_dp.epsilon,
        lambda: steps.draw_labels(data, ctx.job, label_rng),
        rows=len(data.x_train),
        resume=ctx.resume,
        redraw=redraw,
        book=ctx.draws,
    )


def first_epoch_obfuscations(state: HostState, job: JobConfig) -> int:
    """What the workers compute while the guests encrypt: a batch, and the test scores."""
    batch = max(batch_sizes(len(state.labels), job.training.batch_size, state.least_batch))
    return steps.batch_obfuscations(state, batch) + packing.packed_length(
        len(state.x_test), state.key.n
    )


def train(
    ctx: PartyContext,
    state: HostState,
    on_epoch: EpochHook | None,
    start: float,
    drawn: LabelDraw | None = None,
) -> dict[str, Any]:
    """The epoch loop (after the handshake and the flip), then Finish and the outputs."""
    job, guests = ctx.job, state.guests
    rng = np.random.default_rng(job.seed)  # public: batch order only
    metrics_path = ctx.out / "metrics.jsonl"
    records = resume_host(ctx, state, rng, drawn)
    drawn_plan = job_plan(job, state.x_train, state.least_batch, state.plan_seed)
    plan, state.plan_attempt = drawn_plan.batches, drawn_plan.attempt  # the same every epoch
    reason = "max_epochs"
    for epoch in range(len(records), job.training.epochs):
        began = time.monotonic()
        result = train_epoch(ctx, state, epoch, plan)
        if result.reason == "diverged":
            why = (
                "the Taylor approximation only holds for small scores"
                if state.glm.taylor
                else "the step is too large for these features"
            )
            raise TrainingDiverged(
                f"training diverged at epoch {epoch + 1} (loss {result.loss:.4g}): {why}; "
                "lower training.learning_rate"
            )
        flipped = maybe_flipback(ctx, state, epoch, result.stop)
        record = {
            "epoch": epoch,
            "loss": result.loss,
            "flipped_back": flipped,
            "lr": learning_rate(job.training, epoch),
        }
        record.update(evaluate(ctx, state, epoch))
        record["seconds"] = round(time.monotonic() - began, 3)
        records.append(record)
        append_jsonl(metrics_path, record)
        save_host(ctx, state, rng, records)
        if on_epoch:
            on_epoch(record)
        if result.stop:
            reason = result.reason
            break
    ctx.channel.broadcast([*guests, job.server], Finish(epochs=len(records), reason=reason))
    return finish(ctx, state, records, time.monotonic() - start, reason)


def handshake(ctx: PartyContext, data: PartyData) -> tuple[PublicKey, list[str], int, bytes]:
    """Greet the Server, hear every guest (same job, same rows), get the public key, and
    draw the batch plan's seed jointly with the guests (joint_plan.py).

    Also returns the least batch size the guests' declared feature counts allow (batches.py).
    """
    job = ctx.job
    digest = rows_digest(ctx, data.train_ids, data.test_ids)
    share = own_share(ctx)
    commits = {job.host: commit(job.session, job.host, share)}
    announce(
        ctx,
        "host",
        data.rows,
        data.x_train.shape[1] + 1,
        [job.server],
        digest,
        len(data.x_train),
        commits[job.host],
    )
    for sender, hello in ctx.channel.gather(Hello, job.guests).items():
        check_hello(ctx, sender, hello)
        commits[sender] = require_commit(sender, hello.plan_commit)
        if hello.rows != data.rows:
            raise ConfigError(
                f"{sender} has {hello.rows} rows, the host {data.rows}: every party must hold "
                "the same rows in the same order"
            )
        check_rows(sender, hello.rows_digest, digest, "the host's")
    least = job_least_batch(job, len(data.x_train))  # the Server derives the same
    key, relayed = receive_key_message(ctx)
    ordered = {p: commits[p] for p in [job.host, *job.guests]}
    return key, list(job.guests), least, host_exchange(ctx, share, ordered, relayed)


def train_epoch(
    ctx: PartyContext, state: HostState, epoch: int, plan: list[np.ndarray | None]
) -> EpochResult:
    """Every batch of one epoch (steps 1–7) in ``plan``, then the Server's verdict on the loss."""
    channel, job = ctx.channel, ctx.job
    server = job.server
    lr = learning_rate(job.training, epoch)
    for number, idx in enumerate(plan):
        rows: slice | np.ndarray = slice(None) if idx is None else idx
        check_batch(len(state.labels[rows]), state.least_batch)
        channel.broadcast(state.guests, Batch(epoch, number, len(plan), idx), epoch)
        forwards = channel.gather(Forward, state.guests)
        with pulse.step("computing residuals"):
            residual, total = steps.combine(state, rows, forwards)
            replies = steps.residuals(state, epoch, number, residual, forwards)
        for guest, message in replies.items():
            channel.send(guest, message, epoch)
        crosses: dict[str, CrossTerm] = {}
        if len(state.guests) > 1:
            crosses = channel.gather(CrossTerm, state.guests)
        with pulse.step("computing its encrypted gradient"):
            request_values, masks = steps.own_gradient(state, rows, residual)
        channel.send(server, DecryptRequest(epoch, number, "gradient", request_values), epoch)
        with pulse.step("computing the encrypted loss"):
            loss = steps.assemble_loss(
                state, rows, total, forwards, crosses, epoch, (number, len(plan))
            )
        channel.send(server, loss, epoch)
        reply = channel.expect_body(Decrypted, {server})
        steps.apply_gradient(state, reply, masks, lr, len(state.labels[rows]))
    verdict = channel.expect_body(EpochResult, {server})
    return verdict


def masked_scores(
    ctx: PartyContext,
    state: HostState,
    epoch: int,
    split: str,
    rows: int,
    ciphertexts: list[int] | None = None,
) -> np.ndarray:
    """``Σ_g z_g`` for a split, decrypted by the Server under a mask only the Host knows."""
    channel = ctx.channel
    packed = ciphertexts is None  # the guests pack their Scores; the cache is per row
    if ciphertexts is None:
        channel.broadcast(state.guests, ScoreRequest(epoch=epoch, split=split), epoch)
        replies = channel.gather(Scores, state.guests)
        ciphertexts = steps.sum_scores(state, replies, rows * state.glm.outputs)
    with pulse.step("masking evaluation scores"):
        request, masks = steps.masked_request(state, ciphertexts, epoch, packed)
    channel.send(ctx.job.server, request, epoch)
    reply = channel.expect_body(Decrypted, {ctx.job.server})
    terms = len(state.guests) if packed else 1
    k = 1 if ciphertexts is not None and not packed else state.glm.outputs
    return steps.unmask_scores(state, reply, masks, rows * k, terms)


def maybe_flipback(ctx: PartyContext, state: HostState, epoch: int, last: bool) -> int:
    """Every ``flipback_every`` epochs (not after the last, nor without noise to undo)."""
    cfg = ctx.job.label_dp
    due = cfg.flipback_every and (epoch + 1) % cfg.flipback_every == 0
    if not due or last or not math.isfinite(cfg.epsilon) or not state.glm.flipback:
        return 0
    guest_scores = masked_scores(ctx, state, epoch, "train", len(state.labels), state.z_cache)
    changed = steps.apply_flipback(state, guest_scores, cfg.flipback_fraction)
    log.info("epoch %d: flipback changed %d noisy labels", epoch + 1, changed)
    return changed


def evaluate(ctx: PartyContext, state: HostState, epoch: int) -> dict[str, Any]:
    """Joint-model metrics on the held-out rows (logistic: and seed 004's bottom models)."""
    y = state.data.y_test
    assert y is not None
    glm = state.glm
    guests = masked_scores(ctx, state, epoch, "test", len(y)).reshape(len(y), glm.outputs)
    return glm.evaluate(y, state.x_test @ state.theta, guests, state.offset_test)


def finish(
    ctx: PartyContext, state: HostState, records: list[dict[str, Any]], wall: float, reason: str
) -> dict[str, Any]:
    """Save the Host's own weights, the plot and summary.json."""
    data = state.data
    save_model(
        ctx,
        "host",
        data.feature_names,
        state.theta[:-1],
        data.mean,
        data.scale,
        bias=state.theta[-1],
        extra={
            "start": {"weights": state.start[:-1].tolist(), "bias": state.start[-1].tolist()},
            # public to every party of the job; the plaintext twin draws the same plan from it
            "plan": {"seed": state.plan_seed.hex(), "attempt": state.plan_attempt},
        },
    )
    if ctx.plots:
        draw_training(ctx.job, records, ctx.out / "training.png")
    summary = steps.summary_of(ctx.job, state, records, round(wall, 3), reason)
    write_json(ctx.out / "summary.json", summary)
    return summary


def draw_training(
    job: JobConfig,
    records: Sequence[dict[str, Any]],
    path: Path,
    references: Sequence[dict[str, Any]] = (),
) -> None:
    """training.png (0600): loss by its real name, headline metric, centralised references.

    ``references`` are known only to a harness that holds every column (run-local); it
    redraws the Host's plot with them (summary.json's ``references``).
    """
    with open_private(path, "wb") as handle:
        plot_history(records, handle, **plot_options(job), references=references)


def plot_options(job: JobConfig) -> dict[str, Any]:
    """What the job says about its plot: title, headline metric, the loss's name, label noise."""
    glm = glms.glm_of(job)
    return {
        "title": title_of(job),
        "headline": kind_of(job).headline,
        "loss_name": glm.loss_name,
        "noised": math.isfinite(job.label_dp.epsilon),
    }


def title_of(job: JobConfig) -> str:
    """Plot title: the settings a reader needs to interpret the curves."""
    eps = job.label_dp.epsilon
    return (
        f"privfl vertical {job.model.kind}, {len(job.guests)} guest(s), label ε={eps:g}, "
        f"λ={job.training.l2:g}, lr={job.training.learning_rate:g}"
    )


def resume_host(
    ctx: PartyContext, state: HostState, rng: np.random.Generator, drawn: LabelDraw | None = None
) -> list[dict[str, Any]]:
    """Agree, restore the Host's state and its metrics so far; returns the epoch records.

    A ``--resume`` start that finds no common checkpoint for a job whose labels were
    drawn before is refused before any peer hears where to resume (label_draws.py).
    """

    def check(completed: int) -> None:
        if drawn is not None:
            label_draws.check_agreement(drawn, ctx.resume, completed)

    completed = checkpoint.agree(ctx, check=check)
    metrics = ctx.out / "metrics.jsonl"
    if not completed:
        metrics.unlink(missing_ok=True)
        return []
    saved = checkpoint.load(ctx, completed)
    state.theta = np.array(saved["theta"], dtype=np.float64).reshape(state.theta.shape)
    state.start = np.array(saved["start"], dtype=np.float64).reshape(state.start.shape)
    # The flipped labels are the Host's own secret state: a resumed run continues with
    # the same noisy labels, never with a fresh draw (that would spend ε twice).
    state.labels = np.array(saved["labels"], dtype=state.labels.dtype)
    if "flip" in saved:
        state.flip = replace(state.flip, **saved["flip"])
    log.info("continuing with the interrupted run's %d flipped labels", state.flip.flipped)
    state.zh_cache = np.array(saved["zh_cache"], dtype=np.float64)
    state.flipped_back = int(saved["flipped_back"])
    rng.bit_generator.state = saved["rng"]
    records: list[dict[str, Any]] = saved["records"]
    with open_private(metrics) as handle:
        handle.write("".join(json.dumps(r) + "\n" for r in records))
    return records


def save_host(
    ctx: PartyContext, state: HostState, rng: np.random.Generator, records: list[dict[str, Any]]
) -> None:
    """The Host's state after ``len(records)`` epochs."""
    checkpoint.save(
        ctx,
        len(records),
        {
            "theta": state.theta.tolist(),
            "start": state.start.tolist(),
            "labels": state.labels.tolist(),
            "flip": {"flipped": state.flip.flipped, "rows": state.flip.rows},
            "zh_cache": state.zh_cache.tolist(),
            "flipped_back": state.flipped_back,
            "rng": rng.bit_generator.state,
            "records": records,
        },
    )
