"""Where the Host's GLM weights start: a private draw, then a short warm-up on its own columns.

From ``θ_H = 0`` every score of the first batch is 0 and the residual a known function of
the label alone (``2 − 4y`` for the Taylor kinds), so a guest's first gradient
``X_gᵀ·4d`` is a subset-sum instance over the batch's binary labels: meet-in-the-middle
or lattice reduction recovers them even with many more rows than features
(``tests/attacks/test_first_batch.py``). The Host therefore starts where no guest can
know: weights drawn from its OS CSPRNG, then ``WARMUP_EPOCHS`` of plain mini-batch steps
on its own features and its already-noised labels (post-processing: no further ε). The
draw makes every row's ``z_H`` a continuous unknown; the warm-up makes the first
residual look like a trained one, ``z_H`` tracking ``4ỹ − 2``, so the first batch is no
easier to read than any later batch (numbers in docs/security.md). Guests start at 0.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from privfl.config.vertical import TrainingConfig
from privfl.learning.glm import Glm, reference_train

START_SCALE = 0.5
"""Spread of each row's drawn ``z_H`` on standardised features. Measured
(benchmarks/first_batch.py): 1.0 hid no more labels after the warm-up and cost breast
cancer 0.6 points of accuracy more; Poisson's ``exp(z_H)`` overflowed at 1.0."""
WARMUP_EPOCHS = 1
START_TRIES = 8
"""Draws tried until the warm-up stays finite and in the kind's range (``Glm.start_fits``):
Poisson's ``exp(z)`` diverged after about 1 draw in 1,000 on the counts table
(benchmarks/assert_tails.py), and on Laplace-noised counts (ε = 1) ran to finite but
unencodable rates in 3 of 40; each try is a fresh draw from the same CSPRNG, so the start
stays the Host's secret."""
WARMUP_BATCH = 64


def draw(glm: Glm, columns: int, rng: np.random.Generator) -> np.ndarray:
    """``(columns, k)`` weights ``N(0, σ²/columns)``, ``σ = START_SCALE``."""
    scale = START_SCALE / np.sqrt(columns)
    return np.asarray(rng.normal(0.0, scale, (columns, glm.outputs)))


def host_start(
    glm: Glm,
    x: np.ndarray,
    labels: np.ndarray,
    *,
    offset: np.ndarray | None,
    penalised: np.ndarray,
    training: TrainingConfig,
    rng: np.random.Generator,
) -> np.ndarray:
    """The Host's initial ``(columns, k)`` weights (bias row last), private to the Host.

    ``x``: its training features with the bias column; ``labels``: its noised labels.
    The warm-up takes the job's learning rate and λ, in batches of ``WARMUP_BATCH``
    rows ordered by ``rng``; a warm-up that diverges is drawn again (``START_TRIES``).
    ``rng`` must come from the OS CSPRNG
    (``mechanisms.label_dp.private_generator``), never from the job's public seed.
    """
    warmup = replace(training, epochs=WARMUP_EPOCHS, batch_size=WARMUP_BATCH, lr_decay=0.0)
    warmup = replace(warmup, allow_small_batches=True)  # its own columns: no plan to unpin
    for _ in range(START_TRIES):
        start = draw(glm, x.shape[1], rng)
        with np.errstate(over="ignore", invalid="ignore"):
            thetas, _ = reference_train(
                [x], labels, warmup, rng, glm, offset, [penalised], start=start
            )
        with np.errstate(over="ignore", invalid="ignore"):
            eta = x @ thetas[0]
        if np.isfinite(thetas[0]).all() and glm.start_fits(eta, offset):
            return thetas[0]
    return start  # every warm-up diverged: the last draw alone, finite and as private
