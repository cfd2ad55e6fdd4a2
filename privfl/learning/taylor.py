"""Plain maths shared by the Taylor-approximated GLMs: sigmoid, learning rate, gradient, batches.

The encrypted protocol computes exactly these quantities piece by piece;
``learning.glm.reference_train`` runs them in the clear (kind logistic) and is the oracle
the tests compare with.
"""

from __future__ import annotations

import math

import numpy as np

from privfl.config.vertical import TrainingConfig

LOG2 = math.log(2.0)


def sigmoid(z: np.ndarray) -> np.ndarray:
    """The logistic function, stable for large |z|."""
    return np.asarray(0.5 * (1.0 + np.tanh(0.5 * np.asarray(z, dtype=np.float64))))


def learning_rate(cfg: TrainingConfig, epoch: int) -> float:
    """Inverse-time decay: ``lr / (1 + decay · epoch)``."""
    return cfg.learning_rate / (1.0 + cfg.lr_decay * epoch)


def gradient(
    x_t_4d: np.ndarray, theta: np.ndarray, batch: int, l2: float, penalised: np.ndarray
) -> np.ndarray:
    """``(1/b)(Xᵀd + λθ)`` from ``Xᵀ(4d)``; ``penalised`` marks weights under the L2 term."""
    return np.asarray(x_t_4d / (4.0 * batch) + l2 * theta * penalised / batch)


def batch_sizes(rows: int, batch_size: int, min_rows: int = 1) -> list[int]:
    """The sizes of one epoch's batches: ``batch_size`` each, a last one of the remainder.

    A remainder smaller than ``min_rows`` is folded into the batch before it rather
    than sent on its own (``[rows]`` for full batch, ``batch_size`` 0 or ≥ rows).
    """
    if batch_size <= 0 or batch_size >= rows:
        return [rows]
    sizes = [batch_size] * (rows // batch_size)
    remainder = rows - sum(sizes)
    if remainder >= min_rows:
        sizes.append(remainder)
    elif remainder:
        sizes[-1] += remainder
    return sizes


def batch_plan(
    rows: int, batch_size: int, rng: np.random.Generator, min_rows: int = 1
) -> list[np.ndarray | None]:
    """The batches: ``[None]`` for full batch, else a shuffled partition of rows.

    Sizes as :func:`batch_sizes` (a too-small remainder folded into the last batch).
    Drawn once per job and repeated every epoch: reshuffled row sets would give the Host
    a new set of equations on its guests' scores each epoch (``learning/pinning.py``).
    """
    sizes = batch_sizes(rows, batch_size, min_rows)
    if len(sizes) == 1:
        return [None]
    order = rng.permutation(rows).astype(np.int64)
    ends = np.cumsum(sizes)
    return [order[end - size : end] for size, end in zip(sizes, ends.tolist(), strict=True)]
