"""The host script's known answers for the first batch of a Poisson or separable Host.

Their residuals multiply the guests' ``forward`` by the Host's own numbers, so the
first residual is not a function of itself as Taylor's and linear's are. What holds:

- **separable** (any ε): with ``z_H = 0`` every row's residual would be ``σ̂(0) − ỹ``,
  two values per class; a Host that starts private (§13) gives many. Every loss it
  sends is ``≥ 0``: its fit of the cross-entropy may not go below zero (§6.8).
- **Poisson**, when the kit knows the Host's labels (``label_dp.epsilon = inf``: the
  demo's own, unnoised): with the played guest's ``exp(z_g) = 1`` the residual is
  ``μ − y``, so ``μ = r + y`` must be a positive rate, ``z_H = log μ − offset`` a linear
  function of the Host's standardised columns (and not 0: a private start), and the
  first loss ``mean(μ − y·log μ)``. With noised labels (finite ε) ``y`` is the Host's
  secret and none of this is checked.
"""

from __future__ import annotations

import math

import numpy as np

from privfl.config.vertical import JobConfig
from privfl.data.views import PartyData
from privfl.learning.glm import Glm
from privfl.learning.kinds.poisson import Poisson
from privfl.tools.conformance.peer import Report

ROUNDING = 2.0**-16  # μ is rounded to 2^-16 in the residual (DATA_BITS), and exp(0) exactly


def known_host(job: JobConfig, glm: Glm) -> PartyData | None:
    """The Host's demo rows with its labels, where they are the labels it trains on."""
    from privfl.parties.vertical.runner import load_data

    if not isinstance(glm, Poisson) or math.isfinite(job.label_dp.epsilon):
        return None
    return load_data(job, job.host, None, None)


def first_residual(report: Report, glm: Glm, first: np.ndarray) -> None:
    """Separable: the first residual shows a private start (more than two values per class)."""
    if not glm.separable:
        return
    per_class = first.reshape(-1, glm.outputs)
    counts = [len(np.unique(np.round(per_class[:, c], 9))) for c in range(glm.outputs)]
    report.check(
        "first residual is not σ̂(0) − ỹ (two values per class): the host starts private",
        min(counts) > 2,
        f"distinct values per class: {counts}",
    )


def poisson_first(
    report: Report, host: PartyData, rows: np.ndarray | None, first: np.ndarray, loss: float
) -> None:
    """μ = r + y positive, log μ − offset linear in the Host's columns and not 0, the loss."""
    idx = np.arange(len(host.x_train)) if rows is None else rows
    assert host.y_train is not None
    y = host.y_train[idx].astype(np.float64)
    offset = np.zeros(len(idx)) if host.offset_train is None else host.offset_train[idx]
    mu = first + y
    if not report.check(
        "first residual + y is a positive rate μ = exp(z_H + offset) (z_g = 0, ε = inf)",
        len(mu) == len(idx) and bool(np.all(mu > 0)),
        f"{len(mu)} values for {len(idx)} rows, smallest μ {float(np.min(mu, initial=0)):.3g}",
    ):
        return
    z_host = np.log(mu) - offset
    x = np.hstack([host.x_train[idx], np.ones((len(idx), 1))])
    theta = np.linalg.lstsq(x, z_host, rcond=None)[0]
    error = float(np.max(np.abs(np.exp(x @ theta + offset) - mu), initial=0.0))
    report.check(
        "first residual's z_H = log μ − offset is linear in the host's columns and not 0",
        error < 4 * ROUNDING * max(1.0, float(np.max(mu))) and float(np.max(np.abs(theta))) > 1e-6,
        f"max error {error:.3g} in μ, largest weight {float(np.max(np.abs(theta))):.3g}",
    )
    want = float(np.mean(mu - y * np.log(mu)))
    slack = ROUNDING * float(np.mean(1.0 + y / mu)) + 1e-9
    report.check(
        "first batch's Poisson loss is mean(μ − y·log μ) of the first residual (z_g = 0)",
        abs(loss - want) <= slack,
        f"{loss} vs {want}",
    )
