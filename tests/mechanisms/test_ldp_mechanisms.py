"""Statistical tests of the LDP randomizers: unbiased, stated variance, likelihood-ratio bound.

Each test draws 200 000 samples from a seeded generator; the tolerances are five
standard errors, so a correct mechanism fails with probability < 1e-6 while a
wrong constant (e.g. ε/2 for ε) is far outside them.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from privfl.mechanisms.ldp import (
    duchi,
    duchi_bound,
    duchi_variance,
    from_unit,
    piecewise,
    piecewise_c,
    piecewise_variance,
    pnpm,
    pnpm_c,
    pnpm_sign,
    pnpm_variance,
    to_unit,
    topk_indices,
)

N = 200_000
EPSILONS = (0.5, 1.0, 2.0)


def check_moments(sample: np.ndarray, mean: float, variance: float) -> None:
    se_mean = math.sqrt(variance / sample.size)
    assert abs(sample.mean() - mean) < 5 * se_mean
    # Var of the sample variance ≈ (μ4 − σ⁴)/n; bounded here by the observed 4th moment.
    centred = sample - sample.mean()
    se_var = math.sqrt((np.mean(centred**4) - variance**2) / sample.size)
    assert abs(sample.var() - variance) < 5 * se_var + 1e-12


def density_ratio(a: np.ndarray, b: np.ndarray, bins: np.ndarray) -> float:
    """Largest ratio of two histograms over bins where both have ≥ 2000 samples."""
    ha, _ = np.histogram(a, bins)
    hb, _ = np.histogram(b, bins)
    ok = (ha >= 2000) & (hb >= 2000)
    return float(np.max(np.maximum(ha[ok] / hb[ok], hb[ok] / ha[ok])))


@pytest.mark.parametrize("epsilon", EPSILONS)
@pytest.mark.parametrize("t", [-1.0, -0.3, 0.0, 0.7, 1.0])
def test_duchi_is_unbiased_with_stated_variance(epsilon: float, t: float) -> None:
    out = duchi(np.full(N, t), epsilon, np.random.default_rng(1))
    assert set(np.unique(out)) <= {duchi_bound(epsilon), -duchi_bound(epsilon)}
    check_moments(out, t, float(duchi_variance(t, epsilon)))


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_duchi_likelihood_ratio_is_e_to_epsilon(epsilon: float) -> None:
    rng = np.random.default_rng(2)
    hi = np.mean(duchi(np.ones(N), epsilon, rng) > 0)
    lo = np.mean(duchi(-np.ones(N), epsilon, rng) > 0)
    assert hi / lo == pytest.approx(math.exp(epsilon), rel=0.03)
    assert (1 - lo) / (1 - hi) == pytest.approx(math.exp(epsilon), rel=0.03)


@pytest.mark.parametrize("epsilon", EPSILONS)
@pytest.mark.parametrize("t", [-1.0, -0.5, 0.0, 0.2, 1.0])
def test_piecewise_is_unbiased_with_stated_variance(epsilon: float, t: float) -> None:
    out = piecewise(np.full(N, t), epsilon, np.random.default_rng(3))
    c = piecewise_c(epsilon)
    assert out.min() >= -c and out.max() <= c
    check_moments(out, t, float(piecewise_variance(t, epsilon)))


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_piecewise_likelihood_ratio_bounded_by_e_to_epsilon(epsilon: float) -> None:
    rng = np.random.default_rng(4)
    c = piecewise_c(epsilon)
    a = piecewise(np.ones(N), epsilon, rng)
    b = piecewise(-np.ones(N), epsilon, rng)
    ratio = density_ratio(a, b, np.linspace(-c, c, 21))
    # The bound is attained (one input's high region is the other's low region).
    assert ratio == pytest.approx(math.exp(epsilon), rel=0.1)
    assert ratio < math.exp(epsilon) * 1.1


@pytest.mark.parametrize("epsilon", EPSILONS)
@pytest.mark.parametrize("sign", [-1.0, 1.0])
def test_pnpm_sign_is_unbiased_with_stated_variance(epsilon: float, sign: float) -> None:
    out = pnpm_sign(np.full(N, sign), epsilon, np.random.default_rng(5))
    c = pnpm_c(epsilon)
    assert np.all((np.abs(out) >= 1) & (np.abs(out) <= c))
    check_moments(out, sign, pnpm_variance(epsilon))


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_pnpm_likelihood_ratio_is_e_to_epsilon(epsilon: float) -> None:
    rng = np.random.default_rng(6)
    c = pnpm_c(epsilon)
    a = pnpm_sign(np.ones(N), epsilon, rng)
    b = pnpm_sign(-np.ones(N), epsilon, rng)
    ratio = density_ratio(a, b, np.linspace(-c, c, 21))
    assert ratio == pytest.approx(math.exp(epsilon), rel=0.1)


def test_pnpm_on_weights_is_unbiased_and_keeps_magnitude_scale() -> None:
    w = np.array([-0.8, -0.01, 0.0, 0.3, 2.0])
    rng = np.random.default_rng(7)
    draws = np.stack([pnpm(w, 1.0, rng) for _ in range(40_000)])
    assert np.allclose(
        draws.mean(axis=0), w, atol=5 * np.abs(w) * math.sqrt(pnpm_variance(1.0) / 40_000) + 1e-12
    )
    ratio = np.abs(draws[:, w != 0]) / np.abs(w[w != 0])
    assert ratio.min() >= 1 - 1e-12 and ratio.max() <= pnpm_c(1.0) + 1e-12
    assert np.all(draws[:, 2] == 0)  # |0| · t* = 0: magnitudes are not hidden


def test_mechanisms_are_deterministic_under_a_seed() -> None:
    t = np.linspace(-1, 1, 50)
    for mech in (duchi, piecewise):
        assert np.array_equal(
            mech(t, 1.0, np.random.default_rng(9)), mech(t, 1.0, np.random.default_rng(9))
        )


def test_out_of_range_inputs_are_refused() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="to_unit"):
        duchi(np.array([1.5]), 1.0, rng)
    with pytest.raises(ValueError, match="epsilon"):
        piecewise(np.array([0.5]), 0.0, rng)
    with pytest.raises(ValueError, match="signs"):
        pnpm_sign(np.array([0.5]), 1.0, rng)


def test_range_mapping_clips_and_round_trips() -> None:
    w = np.array([-3.0, -0.3, 0.1, 0.4, 9.0])
    t = to_unit(w, 0.1, 0.5)
    assert t.min() == -1 and t.max() == 1
    assert np.allclose(from_unit(t, 0.1, 0.5)[1:4], w[1:4])


def test_topk_picks_largest_magnitudes_in_order() -> None:
    assert topk_indices(np.array([0.1, -5.0, 3.0, 0.0, 4.0]), 3).tolist() == [1, 2, 4]
    with pytest.raises(ValueError):
        topk_indices(np.ones(3), 0)
