"""What the GLM classifiers' label ε costs in accuracy and what it leaves a deviating guest.

For each ε and each of ``--draws`` draws (flips and the Host's private start from
``default_rng(draw)``, the batch plan's joint seed from the same generator) it trains
the job ``privfl vfl init`` writes for the kind (logistic on breast cancer: 30 epochs,
full batch, flipback every 5 epochs on 2 %; multiclass on wine and digits: 30 epochs,
batches of 64, the separable sigmoid) in the clear, exactly as the protocol does —
``learning.glm.reference_train``'s steps plus the Host's flipback
(``host_steps.apply_flipback``: the joint scores of the epoch's forward passes, capped
at the expected number of flips) — and prints held-out accuracy and AUC (logistic) or
accuracy (multiclass), mean and sd, beside the plaintext run.

The deviating guest of ``tests/attacks/test_packed_requests.py`` (dense packing, least
batch, one epoch, its own weights at 0 and the Host's at its private start) reads
``z_H + 2 − 4ỹ`` of every training row; thresholding at 0 it guesses ``ỹ``. The
``read`` column counts its guesses that equal the true label (of 426); ``final`` counts
the labels the Host trains on after the last flipback that equal the true label (what
a guest reading late in the run, knowing ``z``, could at best read).

``--check`` first runs the real protocol (512-bit keys, in memory) once per kind with a
seeded label generator and compares its held-out metrics with this twin's.

    python benchmarks/glm_label_epsilon.py --draws 20
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from privfl.config.vertical import MULTICLASS_BATCH, JobConfig, ModelConfig
from privfl.data.views import PartyData
from privfl.learning.glm import glm_of, gradient, mean_of, residual, targets
from privfl.learning.start import host_start
from privfl.learning.taylor import learning_rate, sigmoid
from privfl.mechanisms.label_dp import flipback
from privfl.parties.vertical.batches import job_least_batch, job_plan
from privfl.parties.vertical.host_steps import private_labels
from privfl.parties.vertical.runner import load_data

EPSILONS = (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, math.inf)


def memory(**kw: Any) -> JobConfig:
    """tests/helpers.memory_job (one guest), importable from here."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from helpers import memory_job

    return memory_job(1, **kw)


def kind_job(kind: str, epsilon: float) -> JobConfig:
    """The job ``privfl vfl init --model KIND`` writes, at label ε ``epsilon``."""
    if kind == "logistic":
        return memory(epochs=30, epsilon=epsilon, flipback_every=5)
    classes = {"wine": 3, "digits": 10}[kind]
    model = ModelConfig(kind="multiclass", classes=classes)
    return memory(
        epochs=30, epsilon=epsilon, dataset=kind, model=model, batch_size=MULTICLASS_BATCH,
        flipback_every=5,
    )  # fmt: skip


@dataclass
class Run:
    """One draw's held-out metrics and what the labels give away."""

    metrics: dict[str, float]
    read: int  # the deviating guest's thresholded epoch-0 read equal to the true label
    final: int  # training labels after the last flipback equal to the true label
    rows: int


def views(job: JobConfig) -> dict[str, PartyData]:
    """Each data holder's rows as a party loads them."""
    return {n: load_data(job, n, None, None) for n in [job.host, *job.guests]}


def twin(
    job: JobConfig,
    data: dict[str, PartyData],
    seed: int,
    plan: list[np.ndarray | None] | None = None,
    start: np.ndarray | None = None,
) -> Run:
    """One draw of the job's run in the clear, flipback included (no early stopping)."""
    glm, cfg = glm_of(job), job.training
    host = data[job.host]
    assert host.y_train is not None and host.y_test is not None
    x_host = np.hstack([host.x_train, np.ones((len(host.x_train), 1))])
    parts = [x_host] + [data[g].x_train for g in job.guests]
    masks = [np.r_[np.ones(host.x_train.shape[1]), 0.0]]
    masks += [np.ones(data[g].x_train.shape[1]) for g in job.guests]
    rng = np.random.default_rng(seed)
    drawn, report = private_labels(glm, job, host.y_train, rng)
    drawn_start = host_start(
        glm, x_host, drawn, offset=host.offset_train, penalised=masks[0], training=cfg, rng=rng
    )
    start = drawn_start if start is None else start
    if plan is None:
        plan = job_plan(job, x_host, job_least_batch(job, len(x_host)), rng.bytes(32)).batches
    # The guest's epoch-0 read (its weights at 0): the residual at the Host's start.
    r0 = residual(glm, x_host @ start, targets(glm, drawn), None, x_host @ start)
    guess = (r0[:, 0] < 0) if glm.outputs == 1 else np.argmin(r0, axis=1)
    read = int(np.sum(guess == host.y_train))
    thetas, labels = train(job, parts, masks, drawn, start, plan, report.probability)
    tests = [np.hstack([host.x_test, np.ones((len(host.x_test), 1))])]
    tests += [data[g].x_test for g in job.guests]
    eta = np.sum([x @ t for x, t in zip(tests, thetas, strict=True)], axis=0)
    metrics = glm.metrics(host.y_test, mean_of(glm, eta, None))
    final = int(np.sum(labels == host.y_train))
    scalars = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))}
    return Run(scalars, read, final, len(labels))


def train(
    job: JobConfig,
    parts: list[np.ndarray],
    masks: list[np.ndarray],
    drawn: np.ndarray,
    start: np.ndarray,
    plan: list[np.ndarray | None],
    flip_probability: float,
) -> tuple[list[np.ndarray], np.ndarray]:
    """``reference_train``'s steps with the Host's flipback (host_steps.apply_flipback:
    the joint scores of the epoch's forward passes, the flips capped at the expected
    number); returns every part's weights and the labels trained on last."""
    glm, cfg = glm_of(job), job.training
    labels = drawn.copy()
    thetas = [np.array(start, dtype=np.float64)] + [
        np.zeros((p.shape[1], glm.outputs)) for p in parts[1:]
    ]
    for epoch in range(cfg.epochs):
        lr = learning_rate(cfg, epoch)
        y_all = targets(glm, labels)
        joint = np.zeros((len(labels), glm.outputs))
        for idx in plan:
            rows: Any = slice(None) if idx is None else idx
            xs = [p[rows] for p in parts]
            scores = [x @ t for x, t in zip(xs, thetas, strict=True)]
            eta = np.sum(scores, axis=0)
            joint[rows] = eta
            r = residual(glm, eta, y_all[rows], None, scores[0])
            thetas = [
                t - lr * gradient(glm, x.T @ r, t, len(x), cfg.l2, m)
                for x, t, m in zip(xs, thetas, masks, strict=True)
            ]
        due = job.label_dp.flipback_every and (epoch + 1) % job.label_dp.flipback_every == 0
        last = epoch == cfg.epochs - 1
        if due and not last and math.isfinite(job.label_dp.epsilon) and glm.flipback:
            left = round(flip_probability * len(labels)) - int(np.count_nonzero(labels != drawn))
            labels = flipback(
                labels, sigmoid(joint[:, 0]), job.label_dp.flipback_fraction, max_flips=left
            )
    return thetas, labels


def check(kind: str, epsilon: float, seed: int) -> str:
    """The real protocol (512-bit keys, in memory) against the twin at one seeded draw."""
    from privfl.tools.experiments import vfl_models

    job = kind_job(kind, epsilon)
    job = replace(job, timeout_seconds=600.0)
    data = views(job)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        began = time.monotonic()
        summary = vfl_models.run_threads(job, out, label_rng=np.random.default_rng(seed))
        seconds = time.monotonic() - began
        host = data[job.host]
        x_host = np.hstack([host.x_train, np.ones((len(host.x_train), 1))])
        plan = vfl_models.host_plan(out / "host" / "model.json", job, x_host)
        start = vfl_models.host_start(out / "host" / "model.json")
    mine = twin(job, data, seed, plan=plan, start=start)
    got = summary.get("metrics", summary)
    keys = [k for k in mine.metrics if k in got]
    pairs = ", ".join(f"{k} {float(got[k]):.4f} / {mine.metrics[k]:.4f}" for k in keys)
    return f"check {kind} ε={epsilon:g} draw {seed}: protocol / twin {pairs} ({seconds:.0f} s)"


def sweep(kind: str, draws: int, epsilons: tuple[float, ...]) -> None:
    """Print one line per ε: every metric's mean (sd) and the label reads."""
    data = views(kind_job(kind, math.inf))
    for eps in epsilons:
        job = kind_job(kind, eps)
        began = time.process_time()
        runs = [twin(job, data, seed) for seed in range(draws)]
        cells = []
        for key in runs[0].metrics:
            values = np.array([r.metrics[key] for r in runs])
            if values.ndim == 1 and key in ("accuracy", "auc", "f1"):
                cells.append(
                    f"{key} {values.mean():.4f} ({values.std(ddof=1):.4f}) min {values.min():.4f}"
                )
        reads = np.array([r.read for r in runs])
        finals = np.array([r.final for r in runs])
        labels = (
            f"read {reads.mean():.1f} (min {reads.min()}, max {reads.max()}) / final "
            f"{finals.mean():.1f} (max {finals.max()}) of {runs[0].rows}"
        )
        seconds = time.process_time() - began
        print(
            f"{kind} ε={eps:g}: {'; '.join(cells)}; {labels}; {draws} draws, {seconds:.0f} s",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kinds", nargs="*", default=["logistic", "wine", "digits"])
    parser.add_argument("--draws", type=int, default=20)
    parser.add_argument("--epsilon", type=float, action="append")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    epsilons = tuple(args.epsilon) if args.epsilon else EPSILONS
    for kind in args.kinds:
        if args.check:
            print(check(kind, 2.0, 7), flush=True)
        sweep(kind, args.draws, epsilons)


if __name__ == "__main__":
    main()
