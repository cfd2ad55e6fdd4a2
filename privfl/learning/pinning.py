"""Rows a batch pins: guest scores the Host's own gradient would give away.

For a batch ``B`` the Host reads ``X_Bᵀ·Z`` exactly (its gradient, less the terms it
knows), ``X_B`` its ``b × (F_H + 1)`` columns with the bias and ``Z`` the guests' summed
scores. Any score vector ``Z + N·c`` — ``N`` an orthonormal basis of the ``b − rank``
directions ``X_Bᵀ`` does not see — fits the same equations, so row ``i`` stays open by its
*null weight* ``‖N_i‖ = √(1 − h_ii)`` (``h`` the hat matrix of ``X_B``): a unit change
along the unknown directions moves that row's score by up to ``‖N_i‖``. A weight of 0
means the columns single the row out — with the bias, one column constant on the other
rows and different on row ``i`` does it — and the equations give its score exactly, at
any batch size. Near-collinear columns make weights small rather than 0; both are caught.

Equations from different epochs add no direction as long as every epoch repeats the same
row sets (``taylor.batch_plan`` draws them once per job): then a row is exactly as open
after the last epoch as after the first. :func:`unpin` swaps rows between batches, keeping
every size, until no row's weight is under :data:`PIN`.
"""

from __future__ import annotations

import numpy as np

PIN = 1e-3  # pinned: a unit change along the unknown directions moves the row under 0.1 %
TRIES = 6  # rows tried in each role per swap: the search stays a few hundred small SVDs
RCOND = 1e-9  # singular values above this fraction of the largest are directions the Host solves


def null_weights(x: np.ndarray) -> np.ndarray:
    """``√(1 − h_ii)`` per row of ``x`` (a batch's Host columns, bias included)."""
    u, s, _ = np.linalg.svd(np.asarray(x, dtype=np.float64), full_matrices=False)
    rank = int((s > s[0] * RCOND).sum()) if s.size and s[0] > 0 else 0
    seen = np.sum(u[:, :rank] ** 2, axis=1)
    return np.asarray(np.sqrt(np.clip(1.0 - seen, 0.0, None)))


def pinned(x: np.ndarray, plan: list[np.ndarray | None]) -> int:
    """How many rows of ``plan`` (``None``: every row) have a null weight under :data:`PIN`."""
    return sum(count(x[slice(None) if idx is None else idx]) for idx in plan)


def count(x: np.ndarray) -> int:
    """Rows of one batch's columns ``x`` under :data:`PIN`."""
    return int((null_weights(x) < PIN).sum())


def unpin(x: np.ndarray, plan: list[np.ndarray | None]) -> list[np.ndarray | None]:
    """``plan`` with rows swapped between batches until none is pinned, or no swap helps.

    Deterministic in ``x`` and ``plan`` (the plaintext twin repeats it). A swap is kept
    only if it lowers the pinned rows of the two batches it touches, so the total falls
    at every step and the loop ends. Sizes are kept, so every party's batch
    sizes still hold; whatever stays pinned the caller counts with :func:`pinned`.
    """
    if len(plan) < 2 or any(idx is None for idx in plan):
        return plan
    batches = [np.array(idx) for idx in plan if idx is not None]
    counts = [count(x[idx]) for idx in batches]
    for k in range(len(batches)):
        while counts[k] and swap(x, batches, counts, k):
            pass
    return list(batches)


def swap(x: np.ndarray, batches: list[np.ndarray], counts: list[int], k: int) -> bool:
    """One move between batch ``k`` and others that lowers their pinned rows together."""
    weights = null_weights(x[batches[k]])
    return any(unpin_row(x, batches, counts, k, int(i)) for i in np.flatnonzero(weights < PIN))


def unpin_row(x: np.ndarray, batches: list[np.ndarray], counts: list[int], k: int, i: int) -> bool:
    """Unpin row ``i`` of batch ``k`` by bringing in rows that share its pattern.

    It is pinned because some direction ``u`` of the columns sees it and none of its
    batch-mates (``u``: what of ``x_i`` the others do not span). A row that ``u`` sees — one
    sharing the rare pattern (a rare pixel, a rare category) — unpins it: the rows outside
    the batch are tried by ``|x_j·u|``, largest first, each in place of one of the batch's
    least pinned rows; failing that, all the rows ``u`` sees at once; failing that, the row
    itself in place of any row outside.
    """
    rows = batches[k]
    weights = null_weights(x[rows])
    others = x[np.delete(rows, i)]
    u = x[rows[i]] - others.T @ np.linalg.lstsq(others.T, x[rows[i]], rcond=RCOND)[0]
    outside = [(m, j) for m in range(len(batches)) if m != k for j in range(len(batches[m]))]
    reach = np.array([abs(float(x[batches[m][j]] @ u)) for m, j in outside])
    leaving = np.argsort(-weights, kind="stable")[:TRIES]
    order = np.argsort(-reach, kind="stable")
    for pick in order[: TRIES * TRIES]:
        m, j = outside[pick]
        if any(trade(x, batches, counts, (k, int(q)), (m, j)) for q in leaving):
            return True
    sharing = [outside[p] for p in order if reach[p] > RCOND * reach[order[0]]]
    if gather(x, batches, counts, k, sharing[: len(rows) // 4]):
        return True
    return any(trade(x, batches, counts, (k, i), there) for there in outside)


def trade(
    x: np.ndarray,
    batches: list[np.ndarray],
    counts: list[int],
    at: tuple[int, int],
    to: tuple[int, int],
) -> bool:
    """Swap row ``at`` with row ``to`` (batch, position); keep it if the two batches' pinned
    rows fall together."""
    (k, q), (m, j) = at, to
    here, there = batches[k].copy(), batches[m].copy()
    here[q], there[j] = there[j], here[q]
    fewer, other = count(x[here]), count(x[there])
    if fewer + other >= counts[k] + counts[m]:
        return False
    batches[k], batches[m] = here, there
    counts[k], counts[m] = fewer, other
    return True


def gather(
    x: np.ndarray, batches: list[np.ndarray], counts: list[int], k: int, rows: list[tuple[int, int]]
) -> bool:
    """Bring every row in ``rows`` (batch, position) into batch ``k`` at once, each for one of
    its least pinned rows: a pattern shared by a few rows only hides them all together."""
    trial = [b.copy() for b in batches]
    leaving = np.argsort(-null_weights(x[batches[k]]), kind="stable")
    for (m, j), q in zip(rows, leaving.tolist(), strict=False):
        trial[k][q], trial[m][j] = batches[m][j], batches[k][q]
    touched = {k, *(m for m, _ in rows)}
    after = {m: count(x[trial[m]]) for m in touched}
    if sum(after.values()) >= sum(counts[m] for m in touched):
        return False
    for m in touched:
        batches[m], counts[m] = trial[m], after[m]
    return True
