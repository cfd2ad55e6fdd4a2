"""Plain maths of Taylor-approximated logistic regression: residual, loss, gradient, SGD.

The encrypted protocol computes exactly these quantities piece by piece;
``reference_train`` runs them in the clear and is the oracle the tests compare with.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from privfl.config.vertical import TrainingConfig

LOG2 = math.log(2.0)


def sigmoid(z: np.ndarray) -> np.ndarray:
    """The logistic function, stable for large |z|."""
    return np.asarray(0.5 * (1.0 + np.tanh(0.5 * np.asarray(z, dtype=np.float64))))


def learning_rate(cfg: TrainingConfig, epoch: int) -> float:
    """Inverse-time decay: ``lr / (1 + decay · epoch)``."""
    return cfg.learning_rate / (1.0 + cfg.lr_decay * epoch)


def residual_offset(z_host: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """The Host's plain part of ``4d = Σ_g z_g + z_H − 4ỹ + 2`` (4× the Taylor residual)."""
    return np.asarray(z_host - 4.0 * labels + 2.0)


def taylor_loss(z: np.ndarray, labels: np.ndarray) -> float:
    """Mean second-order Taylor loss ``log 2 − ½ y'z + ⅛ z²`` with ``y' = 2ỹ − 1``."""
    signed = 2.0 * labels - 1.0
    return float(np.mean(LOG2 - 0.5 * signed * z + 0.125 * z * z))


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
    """One epoch's batches: ``[None]`` for full batch, else a shuffled partition of rows.

    Sizes as :func:`batch_sizes` (a too-small remainder folded into the last batch).
    """
    sizes = batch_sizes(rows, batch_size, min_rows)
    if len(sizes) == 1:
        return [None]
    order = rng.permutation(rows).astype(np.int64)
    ends = np.cumsum(sizes)
    return [order[end - size : end] for size, end in zip(sizes, ends.tolist(), strict=True)]


def reference_train(
    parts: Sequence[np.ndarray],
    labels: np.ndarray,
    cfg: TrainingConfig,
    rng: np.random.Generator,
    penalised: Sequence[np.ndarray] | None = None,
    min_rows: int = 1,
) -> tuple[list[np.ndarray], list[float]]:
    """Train every party's block in the clear exactly as the protocol does.

    ``parts[0]`` is the Host's matrix (bias column included), the rest the guests'.
    Returns the weights per part and the mean Taylor loss per epoch (before each
    epoch's updates, as the Server reports it). No early stopping. ``min_rows``: the
    Host's least batch (a smaller remainder is folded, see :func:`batch_sizes`).
    """
    thetas = [np.zeros(p.shape[1]) for p in parts]
    masks = list(penalised) if penalised is not None else [np.ones(p.shape[1]) for p in parts]
    losses: list[float] = []
    for epoch in range(cfg.epochs):
        lr = learning_rate(cfg, epoch)
        total, count = 0.0, 0
        for idx in batch_plan(parts[0].shape[0], cfg.batch_size, rng, min_rows):
            rows = slice(None) if idx is None else idx
            xs = [p[rows] for p in parts]
            y = labels[rows]
            z = np.sum([x @ t for x, t in zip(xs, thetas, strict=True)], axis=0)
            four_d = z - 4.0 * y + 2.0
            total += taylor_loss(z, y) * len(y)
            count += len(y)
            for k, x in enumerate(xs):
                thetas[k] = thetas[k] - lr * gradient(
                    x.T @ four_d, thetas[k], len(y), cfg.l2, masks[k]
                )
        losses.append(total / count)
    return thetas, losses
