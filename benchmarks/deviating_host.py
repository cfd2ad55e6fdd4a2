"""What a deviating HeteroLR Host reads of its guests' scores, and what score noise costs.

A Host computes its own encrypted gradient, so it may apply any ``F_H + 1`` linear maps it
likes to each batch's encrypted residual (crafted columns, or crafted arithmetic): with
indicator columns it reads ``F_H`` guest scores per batch exactly, other rows each epoch
if it rotates them. ``training.score_noise = σ`` makes each guest add ``N(0, σ²)`` (OS
CSPRNG) to every training score it sends, so every such read is off by that noise.

This script measures, on the plaintext twin (which the encrypted protocol equals in
distribution), the test accuracy of breast cancer at the demo settings (Host 10 columns,
guest 20, full batch, 30 epochs) and with mini-batches (Host 21 columns, b = 23), over
``--draws`` noise draws per σ, zero start; and the guests' score spread, to put σ in scale.

    python benchmarks/deviating_host.py --draws 20
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path[:0] = [str(TESTS), str(TESTS / "attacks")]

from helpers import memory_job, party_data  # noqa: E402
from test_host_reads_scores import wide_host_job  # noqa: E402

from privfl.config.vertical import JobConfig  # noqa: E402
from privfl.learning.glm import glm_of, reference_train  # noqa: E402
from privfl.parties.vertical.batches import job_least_batch, job_plan  # noqa: E402

SIGMAS = (0.0, 0.1, 0.3, 1.0, 3.0)


def accuracy(job: JobConfig, noise: np.random.Generator | None) -> tuple[float, float]:
    """Test accuracy of the twin, and the spread (sd) of the guests' final training scores."""
    data = party_data(job)
    host = data[job.host]
    x_host = np.hstack([host.x_train, np.ones((len(host.x_train), 1))])
    parts = [x_host] + [data[g].x_train for g in job.guests]
    least = job_least_batch(job, len(x_host))
    plan = job_plan(job, x_host, least, bytes(32)).batches
    penalised = [np.r_[np.ones(host.x_train.shape[1]), 0.0]]
    penalised += [np.ones(data[g].x_train.shape[1]) for g in job.guests]
    glm = glm_of(job)
    thetas, _ = reference_train(
        parts,
        host.y_train,
        job.training,
        np.random.default_rng(0),
        glm,
        penalised=penalised,
        plan=plan,
        noise=noise,
    )
    tests = [np.hstack([host.x_test, np.ones((len(host.x_test), 1))])]
    tests += [data[g].x_test for g in job.guests]
    eta = np.sum([x @ t for x, t in zip(tests, thetas, strict=True)], axis=0)[:, 0]
    acc = float(np.mean((eta > 0) == host.y_test))
    spread = float(
        np.std(sum(data[g].x_train @ t for g, t in zip(job.guests, thetas[1:], strict=True)))
    )
    return acc, spread


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--draws", type=int, default=20)
    args = parser.parse_args()
    cases = {
        "demo (Host 10 cols, full batch, 30 epochs)": memory_job(1, epochs=30),
        "Host 21 cols, b = 23, 30 epochs": wide_host_job(23, epochs=30),
    }
    for name, job in cases.items():
        for sigma in SIGMAS:
            noisy = replace(job, training=replace(job.training, score_noise=sigma))
            runs = [
                accuracy(noisy, np.random.default_rng(d) if sigma else None)
                for d in range(args.draws if sigma else 1)
            ]
            accs = np.array([a for a, _ in runs])
            spread = np.mean([s for _, s in runs])
            print(
                f"{name}: σ = {sigma}: accuracy mean {accs.mean():.4f} "
                f"(min {accs.min():.4f}, max {accs.max():.4f}, {len(runs)} draws); "
                f"guest score spread {spread:.3f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
