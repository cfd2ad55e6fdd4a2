"""The Host's strongest linear read of its guests' scores, from everything its gradients give.

Per batch the Host holds ``X_Bᵀ·Z_B`` exactly (its decrypted gradient less what it knows:
``z_H``, its labels, its bias column), ``Z`` the guests' summed scores. This attacker
stacks every batch of every epoch it was given into one system over all training rows —
one unknown per row, which is exact once the scores have settled and averages their drift
before — and also solves each batch alone. A row is **read** when the stacked system pins
it (its null weight, the most a unit change along the unknown directions can move it, is
under ``PIN``) and the estimate is within ``READ`` of its batch's spread: the Host then
*knows* the score. A row whose estimate is merely close by chance is not read: the Host
cannot tell it from the rows its equations leave open (it is counted apart, as ``lucky``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from privfl.learning.pinning import PIN, RCOND

READ = 1e-3  # within this fraction of the batch's spread


@dataclass(frozen=True)
class Equations:
    """One batch as the Host holds it, and (for the verdict only) the true scores."""

    epoch: int
    rows: np.ndarray  # training-row positions
    x: np.ndarray  # (b, F_H + 1): the Host's columns on these rows, bias included
    rhs: np.ndarray  # X_Bᵀ·Z_B
    truth: np.ndarray  # Z_B, never shown to the attack


@dataclass(frozen=True)
class Reading:
    """Rows of the last epoch judged, read (pinned and right) and lucky (right, not pinned)."""

    tried: int
    read: int
    lucky: int
    rank: int  # of the stacked system
    unknowns: int


def null_weights(a: np.ndarray) -> tuple[np.ndarray, int]:
    """Per unknown of ``a x = r``: how far the unseen directions reach it (0: pinned); rank."""
    _, s, vt = np.linalg.svd(a, full_matrices=False)
    rank = int((s > s[0] * RCOND).sum())
    return np.sqrt(np.clip(1.0 - np.sum(vt[:rank] ** 2, axis=0), 0.0, None)), rank


def stacked(batches: list[Equations], rows: int) -> tuple[np.ndarray, np.ndarray, int]:
    """The least-squares scores, null weights and rank of every batch's equations at once."""
    a = np.zeros((sum(b.x.shape[1] for b in batches), rows))
    at = 0
    for b in batches:
        a[at : at + b.x.shape[1], b.rows] = b.x.T
        at += b.x.shape[1]
    r = np.concatenate([b.rhs for b in batches])
    estimate = np.linalg.lstsq(a, r, rcond=RCOND)[0]
    weights, rank = null_weights(a)
    return estimate, weights, rank


def attack(batches: list[Equations], rows: int) -> Reading:
    """Read the last epoch's rows: from each batch alone, and from the batches of the last
    two epochs and of every epoch stacked (the scores settle late, so the attacker tries
    both). Rank and unknowns are those of every epoch stacked."""
    last = max(b.epoch for b in batches)
    windows = [stacked(batches, rows)]
    if min(b.epoch for b in batches) < last - 1:
        windows.append(stacked([b for b in batches if b.epoch >= last - 1], rows))
    tried = read = lucky = 0
    for b in (b for b in batches if b.epoch == last):
        alone = np.linalg.lstsq(b.x.T, b.rhs, rcond=RCOND)[0]
        spread = b.truth.std()
        right = np.abs(alone - b.truth) < READ * spread
        pinned = right & (null_weights(b.x.T)[0] < PIN)
        for estimate, weights, _ in windows:
            close = np.abs(estimate[b.rows] - b.truth) < READ * spread
            pinned |= close & (weights[b.rows] < PIN)
            right |= close
        tried += len(b.rows)
        read += int(pinned.sum())
        lucky += int((right & ~pinned).sum())
    return Reading(tried, read, lucky, windows[0][2], rows)
