"""Mironov's float-gap distinguisher (CCS 2012) against the clients' Laplace/Gaussian reports.

An observer of one report asks: could this exact float have come out of the
mechanism on the *other* input? On the old float32 construction most outputs for
input 0.25 are impossible under −0.25, so one report tells them apart. On the
discrete (CKS) releases every output is a grid point reachable from every input.
"""

from __future__ import annotations

import numpy as np
import torch

from privfl.config.horizontal import HflConfig
from privfl.mechanisms.noise import private_source, unit_grid
from privfl.mechanisms.randomize import calibrate, randomize

SCALE = 2.0  # Laplace scale of one coordinate in [−1, 1] (ε = 1)


def old_float32_laplace(t: float, u: torch.Tensor) -> torch.Tensor:
    """The replaced construction: inverse-CDF Laplace in float32 from torch.rand's uniforms."""
    x = torch.full_like(u, t)
    v = u - 0.5
    return x - SCALE * torch.sign(v) * torch.log1p(-2 * v.abs().clamp(max=0.5 - 1e-7))


def test_the_distinguisher_wins_on_the_old_float32_laplace() -> None:
    # torch.rand(float32) yields k·2^-24: enumerate every output possible under −0.25
    every_u = torch.arange(2**24, dtype=torch.float32) * 2.0**-24
    possible = np.unique(old_float32_laplace(-0.25, every_u).numpy())
    seen = old_float32_laplace(0.25, torch.rand(5000, generator=torch.Generator().manual_seed(1)))
    impossible = ~np.isin(seen.numpy(), possible)
    assert impossible.mean() > 0.5  # one report distinguishes 0.25 from −0.25 most of the time


def _report(config: HflConfig, value: float, dims: int = 4000) -> np.ndarray:
    """A real client's top-k report whose clipped update is ``value`` on every coordinate."""
    calib = calibrate(config, dims, 50)
    weights = torch.full((dims,), value * config.delta_radius)
    indices = torch.arange(dims)
    report = randomize(config, calib, weights, torch.zeros(dims), [("w", slice(0, dims))],
                       indices, private_source())  # fmt: skip
    return report.numpy()


def _reachable(report: np.ndarray, step: float) -> np.ndarray:
    """Whether each float could be the post-processing of *some* integer: the same map any input
    goes through (``float32(n · step)``), so membership does not depend on the input."""
    n = np.round(report.astype(np.float64) / step)
    return np.any(
        [np.float32(m * step) == report for m in (n - 1, n, n + 1)], axis=0
    )  # rounding may land one step away


def test_the_distinguisher_fails_on_the_discrete_laplace_reports() -> None:
    config = HflConfig(mechanism="laplace-topk", epsilon=1.0, topk_fraction=1.0)
    k = 4000
    step = unit_grid(2.0 * k / config.epsilon) * config.delta_radius
    for value in (0.25, -0.25):
        assert _reachable(_report(config, value), step).all()


def test_the_distinguisher_fails_on_the_discrete_gaussian_reports() -> None:
    config = HflConfig(mechanism="gaussian-topk", epsilon=1.0, topk_fraction=1.0)
    calib = calibrate(config, 4000, 50)
    step = unit_grid(calib.sigma_coord) * config.delta_radius
    for value in (0.25, -0.25):
        assert _reachable(_report(config, value), step).all()
