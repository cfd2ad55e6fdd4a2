"""Known-answer and cross-check tests for the accountants (independent numerical computations)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from privfl.mechanisms.accountants import (
    advanced_composition,
    analytic_gaussian_sigma,
    classic_gaussian_sigma,
    nbafl_sigmas,
    rdp_gaussian_epsilon,
    rdp_subsampled_gaussian,
    shuffle_amplification,
    subsampling_amplification,
)


def hockey_stick_gaussian(epsilon: float, sigma: float, sensitivity: float) -> float:
    """δ(ε) of N(0,σ²) vs N(Δ,σ²) by integrating max(0, p − e^ε q) on a fine grid."""
    x = np.linspace(-40 * sigma, 40 * sigma + sensitivity, 2_000_001)
    p = stats.norm.pdf(x, 0, sigma)
    q = stats.norm.pdf(x, sensitivity, sigma)
    return float(np.trapezoid(np.maximum(p - math.exp(epsilon) * q, 0), x))


@pytest.mark.parametrize(
    ("epsilon", "delta"), [(0.5, 1e-5), (1.0, 1e-5), (4.0, 1e-6), (20.0, 1e-3)]
)
def test_analytic_gaussian_meets_delta_exactly(epsilon: float, delta: float) -> None:
    sigma = analytic_gaussian_sigma(epsilon, delta, 1.0)
    assert hockey_stick_gaussian(epsilon, sigma, 1.0) == pytest.approx(delta, rel=1e-3)
    # A slightly smaller σ is no longer (ε, δ)-DP: the calibration is tight.
    assert hockey_stick_gaussian(epsilon, sigma * 0.98, 1.0) > delta


def test_analytic_gaussian_known_value_and_beats_classic() -> None:
    # Balle & Wang (2018), Fig. 1: ε = 1, δ = 1e-5 needs σ ≈ 3.73 (classic: 4.84).
    assert analytic_gaussian_sigma(1.0, 1e-5, 1.0) == pytest.approx(3.73, abs=0.01)
    assert classic_gaussian_sigma(1.0, 1e-5, 1.0) == pytest.approx(4.84, abs=0.01)
    assert analytic_gaussian_sigma(0.5, 1e-5, 2.0) == pytest.approx(
        2 * analytic_gaussian_sigma(0.5, 1e-5, 1.0)
    )


def test_nbafl_sigmas_known_answer() -> None:
    # c = √(2 ln 1250) = 3.7764795; σ_U = c·1·(2/100)/0.5; σ_D = 2c√(100² − 10)/(100·10·0.5)
    sigma_u, sigma_d = nbafl_sigmas(C=1.0, m=100, N=10, T=100, L=1, epsilon=0.5, delta=1e-3)
    assert sigma_u == pytest.approx(0.15105918, rel=1e-6)
    assert sigma_d == pytest.approx(1.5098363, rel=1e-6)
    assert nbafl_sigmas(C=1.0, m=100, N=10, T=3, L=1, epsilon=0.5, delta=1e-3)[1] == 0.0


def test_subsampling_and_advanced_composition_known_answers() -> None:
    assert subsampling_amplification(1.0, 0.1) == pytest.approx(math.log(1 + 0.1 * (math.e - 1)))
    assert subsampling_amplification(2.0, 1.0) == pytest.approx(2.0)
    assert subsampling_amplification(2.0, 0.0) == 0.0
    # Per-report ε of PNPM on a whole model is huge (d·ε): no overflow, ≈ ε + log q.
    assert subsampling_amplification(40_000.0, 0.5) == pytest.approx(40_000 + math.log(0.5))
    assert subsampling_amplification(35.0, 0.2) == pytest.approx(math.log1p(0.2 * math.expm1(35.0)))
    assert advanced_composition(40_000.0, 0.0, 3, 1e-5)[0] == math.inf
    eps, delta = advanced_composition(0.1, 1e-6, 100, 1e-5)
    assert eps == pytest.approx(
        math.sqrt(200 * math.log(1e5)) * 0.1 + 100 * 0.1 * (math.exp(0.1) - 1)
    )
    assert eps == pytest.approx(5.850, abs=1e-3)
    assert delta == pytest.approx(1e-4 + 1e-5)


def log_a_numeric(q: float, sigma: float, alpha: float) -> float:
    """log E_{z~N(0,σ²)}[((1−q) + q·N(z;1,σ²)/N(z;0,σ²))^α] by quadrature."""
    z = np.linspace(-30 * sigma, 30 * sigma + 1, 1_000_001)
    mu0 = stats.norm.pdf(z, 0, sigma)
    ratio = (1 - q) + q * np.exp((2 * z - 1) / (2 * sigma**2))
    return math.log(float(np.trapezoid(mu0 * ratio**alpha, z)))


@pytest.mark.parametrize(
    ("q", "sigma", "alpha"), [(0.01, 1.0, 2), (0.05, 1.5, 8), (0.1, 2.0, 3.5), (0.02, 0.8, 1.7)]
)
def test_rdp_of_subsampled_gaussian_matches_quadrature(
    q: float, sigma: float, alpha: float
) -> None:
    expected = log_a_numeric(q, sigma, alpha) / (alpha - 1)
    assert rdp_subsampled_gaussian(q, sigma, alpha) == pytest.approx(expected, rel=1e-6)


def test_rdp_without_subsampling_is_the_gaussian_rdp() -> None:
    assert rdp_subsampled_gaussian(1.0, 2.0, 5.0) == pytest.approx(5 / 8)
    # One full-batch release: ε = min_α α/(2σ²) + log((α−1)/α) − (log δ + log α)/(α − 1).
    orders = np.arange(2, 200, dtype=float)
    by_hand = np.min(
        orders / 8 + np.log((orders - 1) / orders) - (np.log(1e-5) + np.log(orders)) / (orders - 1)
    )
    assert rdp_gaussian_epsilon(1.0, 2.0, 1, 1e-5, orders=orders) == pytest.approx(by_hand)


def test_rdp_epsilon_grows_with_steps_and_sampling_rate() -> None:
    base = rdp_gaussian_epsilon(0.01, 1.1, 1000, 1e-5)
    assert rdp_gaussian_epsilon(0.01, 1.1, 4000, 1e-5) > base
    assert rdp_gaussian_epsilon(0.02, 1.1, 1000, 1e-5) > base
    assert rdp_gaussian_epsilon(0.01, 1.1, 0, 1e-5) == 0.0
    assert 0 < base < 5


def exact_shuffled_rr_epsilon(epsilon0: float, n: int, ones: int, delta: float) -> float:
    """Exact central ε of n shuffled binary randomized responses for one pair of neighbours."""
    keep = math.exp(epsilon0) / (1 + math.exp(epsilon0))
    counts = np.arange(n + 1)
    others = np.convolve(
        stats.binom.pmf(counts[: ones + 1], ones, keep),
        stats.binom.pmf(counts[: n - ones], n - 1 - ones, 1 - keep),
    )
    p = keep * np.concatenate([[0], others]) + (1 - keep) * np.concatenate([others, [0]])
    q = (1 - keep) * np.concatenate([[0], others]) + keep * np.concatenate([others, [0]])

    def delta_at(eps: float) -> float:
        return max(
            float(np.maximum(p - math.exp(eps) * q, 0).sum()),
            float(np.maximum(q - math.exp(eps) * p, 0).sum()),
        )

    low, high = 0.0, epsilon0
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if delta_at(mid) > delta else (low, mid)
    return high


@pytest.mark.parametrize(("epsilon0", "n"), [(1.0, 100), (2.0, 1000), (4.0, 1000)])
def test_shuffle_bound_is_never_below_the_exact_shuffled_randomized_response(
    epsilon0: float, n: int
) -> None:
    bound = shuffle_amplification(epsilon0, n, 1e-6)
    exact = max(
        exact_shuffled_rr_epsilon(epsilon0, n, ones, 1e-6) for ones in (0, n // 4, n // 2, n - 1)
    )
    assert exact <= bound < epsilon0


def test_shuffle_bound_beats_the_closed_form_and_shrinks_with_n() -> None:
    eps0, delta = 1.0, 1e-6
    values = [shuffle_amplification(eps0, n, delta) for n in (100, 1000, 10_000)]
    assert values[0] > values[1] > values[2]
    for n, value in zip((1000, 10_000), values[1:], strict=True):
        # FMT Theorem 3.1 (closed form, valid here): the numerical bound is tighter.
        e = math.exp(eps0)
        closed = math.log1p(
            (e - 1) / (e + 1) * (8 * math.sqrt(e * math.log(4 / delta)) / math.sqrt(n) + 8 * e / n)
        )
        assert value <= closed
    assert shuffle_amplification(3.0, 1, 1e-6) == 3.0
    assert shuffle_amplification(30.0, 50, 1e-6) > 29.99  # next to no amplification for huge ε0
