"""The clients' randomizers: right moments, discrete outputs on their grid, CSPRNG or seeded."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from privfl.config.horizontal import HflConfig
from privfl.mechanisms.accountants import zcdp_epsilon
from privfl.mechanisms.noise import (
    add_discrete_gaussian,
    add_discrete_laplace,
    laplace_release,
    private_source,
    randomized_round,
    round_by,
    seeded_source,
    unit_grid,
)
from privfl.mechanisms.randomize import PM_GRID, calibrate, layer_ranges, randomize

N = 100_000


@pytest.mark.parametrize("kind", ["opendp", "vectorised", "seeded"])
def test_discrete_laplace_and_gaussian_have_the_stated_variance(kind: str) -> None:
    sources = {"opendp": private_source(), "vectorised": private_source(exact=False)}
    source = sources.get(kind) or seeded_source(1)
    lap = add_discrete_laplace(np.zeros(N, np.int64), 20.0, source)
    gauss = add_discrete_gaussian(np.zeros(N, np.int64), 30.0, source)
    assert lap.dtype == np.int64 and gauss.dtype == np.int64
    p = math.exp(-1 / 20.0)  # discrete Laplace variance 2p/(1 − p)²
    assert lap.var() == pytest.approx(2 * p / (1 - p) ** 2, rel=0.04)
    assert gauss.var() == pytest.approx(30.0**2, rel=0.04)
    assert abs(gauss.mean()) < 5 * 30 / math.sqrt(N)


def test_randomized_rounding_is_unbiased_and_stays_in_range() -> None:
    rng = private_source().rng
    x = np.full(N, 0.3)
    n = randomized_round(x, 0.25, rng)
    assert set(np.unique(n)) == {1, 2}
    assert (n * 0.25).mean() == pytest.approx(0.3, abs=0.003)
    assert np.abs(randomized_round(np.array([-1.0, 1.0]), 2**-10, rng)).max() == 2**10


def test_round_by_known_answers_in_place_and_from_float32() -> None:
    # x/grid = 1.25, −1.25, 3.0, −0.5: floor 1, −2, 3, −1 and fractions .25, .75, 0, .5;
    # a uniform below the fraction rounds up (0.2 < .25, 0.75 is not < .75, 0 is not < 0)
    x = np.array([0.3125, -0.3125, 0.75, -0.125])
    uniforms = np.array([0.2, 0.75, 0.0, 0.4999999999999999])
    expected = np.array([2, -2, 3, 0])
    assert np.array_equal(round_by(x, 0.25, uniforms), expected)
    out = np.full(4, 99, dtype=np.int64)
    assert round_by(x, 0.25, uniforms, out=out) is out
    assert np.array_equal(out, expected)
    # float32 input divides in float64: the same integers as its float64 copy
    x32 = np.random.default_rng(0).normal(size=1000).astype(np.float32)
    u = np.random.default_rng(1).random(1000)
    assert np.array_equal(
        round_by(x32, 2**-7 / 3, u), round_by(x32.astype(np.float64), 2**-7 / 3, u)
    )


def test_laplace_release_is_on_its_grid_and_unbiased() -> None:
    out = laplace_release(np.full(N, 0.25), 3.0, private_source())
    grid = unit_grid(3.0)
    assert np.array_equal(out / grid, np.round(out / grid))
    assert abs(out.mean() - 0.25) < 5 * math.sqrt(18 / N)


def test_gaussian_calibration_meets_epsilon_in_zcdp() -> None:
    for mech in ("gaussian", "gaussian-topk"):
        config = HflConfig(mechanism=mech, epsilon=2.0, topk_fraction=0.1)
        calib = calibrate(config, 1000, 50)
        assert zcdp_epsilon(calib.rho, config.delta) == pytest.approx(2.0, rel=1e-6)
    topk = calibrate(HflConfig(mechanism="gaussian-topk", epsilon=2.0), 1000, 50)
    assert 4 * topk.k / (2 * topk.sigma_coord**2) == pytest.approx(topk.rho)


def test_randomize_reports_topk_update_only_on_public_indices() -> None:
    config = HflConfig(mechanism="laplace-topk", epsilon=2.0, topk_fraction=0.25)
    weights, global_w = torch.arange(8, dtype=torch.float32) / 10, torch.zeros(8)
    calib = calibrate(config, 8, 10)
    indices = torch.tensor([1, 5])
    report = randomize(config, calib, weights, global_w, [("w", slice(0, 8))], indices,
                       private_source())  # fmt: skip
    assert calib.k == 2 and report.dtype == torch.float32
    assert torch.count_nonzero(report[[0, 2, 3, 4, 6, 7]]) == 0


def test_pm_outputs_lie_on_its_grid_and_duchi_on_its_bound() -> None:
    global_w = torch.from_numpy(np.linspace(-1, 1, 100).astype(np.float32))
    args = ([("w", slice(0, 100))], torch.zeros(0, dtype=torch.long), private_source())
    duchi = randomize(HflConfig(mechanism="duchi"), calibrate(HflConfig(), 100, 10),
                      global_w * 3, global_w, *args)  # fmt: skip
    assert float(duchi.abs().max()) == pytest.approx((math.e + 1) / (math.e - 1), rel=1e-5)
    config = HflConfig(mechanism="pm", range_radius=1.0)
    pm = randomize(config, calibrate(config, 100, 10), global_w, global_w, *args).double()
    assert torch.equal(torch.round(pm / PM_GRID), pm / PM_GRID)


def test_adaptive_layer_ranges_come_from_the_public_model() -> None:
    reference = torch.tensor([0.0, 1.0, 2.0, 10.0, 10.0, 14.0])
    ranges = layer_ranges(reference, [("a", slice(0, 3)), ("b", slice(3, 6))], 0.0)
    assert ranges[0][1:] == pytest.approx((1.0, 1.0))
    assert ranges[1][1:] == pytest.approx((34 / 3, 14 - 34 / 3))
