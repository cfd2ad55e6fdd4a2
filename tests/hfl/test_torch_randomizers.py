"""The torch randomizers used in training agree with the numpy reference mechanisms."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from privfl.hfl.config import HflConfig
from privfl.hfl.perturb import (
    calibrate,
    duchi_t,
    laplace_t,
    layer_ranges,
    piecewise_t,
    pnpm_t,
    randomize,
)
from privfl.mechanisms.ldp import duchi_variance, piecewise_variance, pnpm_variance

N = 200_000


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("t", [-0.6, 0.0, 0.9])
def test_torch_duchi_and_pm_are_unbiased_with_the_numpy_variance(t: float) -> None:
    x = torch.full((N,), t, dtype=torch.float64)
    for fn, var in ((duchi_t, duchi_variance), (piecewise_t, piecewise_variance)):
        out = fn(x, 1.0, gen(1)).numpy()
        expected_var = float(var(t, 1.0))
        assert abs(out.mean() - t) < 5 * math.sqrt(expected_var / N)
        assert out.var() == pytest.approx(expected_var, rel=0.03)


def test_torch_pnpm_is_unbiased_with_the_stated_variance() -> None:
    w = torch.full((N,), -0.25, dtype=torch.float64)
    out = pnpm_t(w, 2.0, gen(2)).numpy()
    var = 0.25**2 * pnpm_variance(2.0)
    assert abs(out.mean() + 0.25) < 5 * math.sqrt(var / N)
    assert out.var() == pytest.approx(var, rel=0.03)


def test_torch_laplace_has_the_laplace_variance() -> None:
    out = laplace_t(torch.zeros(N, dtype=torch.float64), 3.0, gen(3)).numpy()
    assert abs(out.mean()) < 5 * math.sqrt(18 / N)
    assert out.var() == pytest.approx(2 * 3.0**2, rel=0.03)


def test_randomize_reports_topk_update_only_on_public_indices() -> None:
    config = HflConfig(mechanism="laplace-topk", epsilon=2.0, topk_fraction=0.25)
    weights, global_w = torch.arange(8, dtype=torch.float32) / 10, torch.zeros(8)
    calib = calibrate(config, 8, 10)
    indices = torch.tensor([1, 5])
    slices = [("w", slice(0, 8))]
    report = randomize(config, calib, weights, global_w, slices, indices, gen(4))
    assert calib.k == 2
    assert torch.count_nonzero(report[[0, 2, 3, 4, 6, 7]]) == 0
    assert torch.count_nonzero(report[indices]) == 2


def test_adaptive_layer_ranges_come_from_the_public_model() -> None:
    reference = torch.tensor([0.0, 1.0, 2.0, 10.0, 10.0, 14.0])
    ranges = layer_ranges(reference, [("a", slice(0, 3)), ("b", slice(3, 6))], 0.0)
    assert ranges[0][1:] == pytest.approx((1.0, 1.0))
    assert ranges[1][1:] == pytest.approx((34 / 3, 14 - 34 / 3))
    assert layer_ranges(reference, [("a", slice(0, 6))], 0.5)[0][1:] == (0.0, 0.5)


def test_duchi_reports_stay_in_the_mapped_range() -> None:
    config = HflConfig(mechanism="duchi", epsilon=1.0)
    global_w = torch.from_numpy(np.linspace(-1, 1, 100).astype(np.float32))
    report = randomize(
        config,
        calibrate(config, 100, 10),
        global_w * 3,
        global_w,
        [("w", slice(0, 100))],
        torch.zeros(0, dtype=torch.long),
        gen(5),
    )
    bound = (math.e + 1) / (math.e - 1)
    assert float(report.abs().max()) == pytest.approx(bound, rel=1e-5)
