"""Privacy accountants (docs/security.md): calibration, composition, amplification; pure maths.

Units: every function states whether its ε is per release (one report of one
client in one round) or composed. Nothing here knows about rounds or clients;
:mod:`privfl.parties.horizontal.ledger` keeps that bookkeeping.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
from scipy import special

# Opacus' default RDP orders.
DEFAULT_ORDERS: tuple[float, ...] = tuple(
    [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64))
)


def classic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """``σ = √(2 ln(1.25/δ)) Δ / ε`` — (ε, δ)-DP only for ε < 1 (Dwork & Roth, Thm A.1)."""
    return math.sqrt(2 * math.log(1.25 / delta)) * sensitivity / epsilon


def gaussian_delta(epsilon: float, sigma: float, sensitivity: float) -> float:
    """The exact δ of the Gaussian mechanism at ε (Balle & Wang 2018, Theorem 8).

    ``δ = Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ)``, the second term in log space.
    """
    a = sensitivity / (2 * sigma)
    b = epsilon * sigma / sensitivity
    first = float(special.ndtr(a - b))
    second = math.exp(epsilon + float(special.log_ndtr(-a - b)))
    return max(0.0, first - second)


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """The smallest σ for which ``N(0, σ²)`` noise is (ε, δ)-DP (Balle & Wang's analytic Gaussian).

    Valid for every ε > 0 (the classic constant is not for ε ≥ 1). Bisection on the
    exact δ(σ), which decreases in σ; the answer errs on the safe (larger) side.
    """
    if not (epsilon > 0 and 0 < delta < 1 and sensitivity > 0):
        raise ValueError("need epsilon > 0, 0 < delta < 1 and sensitivity > 0")
    low, high = 1e-12, sensitivity
    while gaussian_delta(epsilon, high, sensitivity) > delta:
        high *= 2
    for _ in range(200):
        mid = (low + high) / 2
        if gaussian_delta(epsilon, mid, sensitivity) > delta:
            low = mid
        else:
            high = mid
        if high - low <= 1e-12 * high:
            break
    return high


def nbafl_sigmas(
    *, C: float, m: int, N: int, T: int, L: int, epsilon: float, delta: float
) -> tuple[float, float]:
    """NbAFL's client and server noise (seed 001): ``(σ_U, σ_D)``.

    ``σ_U = c L Δs_U / ε`` with ``Δs_U = 2C/m`` and ``c = √(2 ln(1.25/δ))``;
    ``σ_D = 2cC√(T² − L²N)/(mNε)`` when ``T > L√N``, else 0. ``C`` clip norm, ``m``
    the smallest local dataset, ``N`` clients, ``T`` aggregation rounds, ``L``
    exposures. The seed's classic constant holds for ε < 1 only; use
    :func:`analytic_gaussian_sigma` above that.
    """
    if min(C, m, N, T, L, epsilon, delta) <= 0:
        raise ValueError("every NbAFL parameter must be > 0")
    c = math.sqrt(2 * math.log(1.25 / delta))
    sigma_u = c * L * (2 * C / m) / epsilon
    sigma_d = 0.0
    if L * math.sqrt(N) < T:
        sigma_d = 2 * c * C * math.sqrt(T**2 - L**2 * N) / (m * N * epsilon)
    return sigma_u, sigma_d


def subsampling_amplification(epsilon: float, q: float) -> float:
    """ε of an ε-DP release run on a q-subsample: ``log(1 + q(e^ε − 1))``."""
    if not 0 <= q <= 1:
        raise ValueError(f"sampling rate must lie in [0, 1], got {q}")
    if epsilon == math.inf:
        return math.inf if q > 0 else 0.0
    if q == 0:
        return 0.0
    if epsilon > 30:  # log(1 − q + q e^ε) = ε + log(q + (1 − q) e^−ε), no overflow
        return epsilon + math.log(q + (1 - q) * math.exp(-epsilon))
    return math.log1p(q * math.expm1(epsilon))


def advanced_composition(
    epsilon: float, delta: float, k: int, delta_prime: float
) -> tuple[float, float]:
    """k-fold composition of (ε, δ)-DP releases (Dwork, Rothblum, Vadhan 2010).

    ``ε' = √(2k ln(1/δ')) ε + k ε (e^ε − 1)``, ``δ_total = k δ + δ'``.
    """
    if k < 0 or not 0 < delta_prime < 1:
        raise ValueError("need k >= 0 and 0 < delta_prime < 1")
    if epsilon > 700:  # e^ε overflows a float; the bound is useless there anyway
        return math.inf, k * delta + delta_prime
    eps = math.sqrt(2 * k * math.log(1 / delta_prime)) * epsilon + k * epsilon * math.expm1(epsilon)
    return eps, k * delta + delta_prime


def _log_add(a: float, b: float) -> float:
    high, low = max(a, b), min(a, b)
    if low == -math.inf:
        return high
    return high + math.log1p(math.exp(low - high))


def _log_sub(a: float, b: float) -> float:
    """``log(e^a − e^b)`` for ``a ≥ b``."""
    if b == -math.inf:
        return a
    if a <= b:
        return -math.inf
    return a + math.log1p(-math.exp(b - a))


def _log_erfc(x: float) -> float:
    return math.log(2) + float(special.log_ndtr(-x * math.sqrt(2)))


def _log_a_int(q: float, sigma: float, alpha: int) -> float:
    """``log E_{μ0}[(μ/μ0)^α]`` for integer α, μ = (1−q)N(0,σ²) + qN(1,σ²) (binomial expansion)."""
    total = -math.inf
    for i in range(alpha + 1):
        log_coef = (
            math.log(special.binom(alpha, i)) + i * math.log(q) + (alpha - i) * math.log1p(-q)
        )
        total = _log_add(total, log_coef + (i * i - i) / (2 * sigma**2))
    return total


def _log_a_frac(q: float, sigma: float, alpha: float) -> float:
    """The same for fractional α (Mironov, Talwar, Zhang 2019, §3.3): two converging series."""
    log_a0, log_a1 = -math.inf, -math.inf
    z0 = sigma**2 * math.log(1 / q - 1) + 0.5
    i = 0
    while True:
        coef = float(special.binom(alpha, i))
        log_coef = math.log(abs(coef))
        j = alpha - i
        log_t0 = log_coef + i * math.log(q) + j * math.log1p(-q)
        log_t1 = log_coef + j * math.log(q) + i * math.log1p(-q)
        log_e0 = math.log(0.5) + _log_erfc((i - z0) / (math.sqrt(2) * sigma))
        log_e1 = math.log(0.5) + _log_erfc((z0 - j) / (math.sqrt(2) * sigma))
        log_s0 = log_t0 + (i * i - i) / (2 * sigma**2) + log_e0
        log_s1 = log_t1 + (j * j - j) / (2 * sigma**2) + log_e1
        if coef > 0:
            log_a0, log_a1 = _log_add(log_a0, log_s0), _log_add(log_a1, log_s1)
        else:
            log_a0, log_a1 = _log_sub(log_a0, log_s0), _log_sub(log_a1, log_s1)
        i += 1
        if max(log_s0, log_s1) < -30:
            return _log_add(log_a0, log_a1)


# A pure function of three numbers that the callers ask again and again: a training run's
# ε after each epoch (the same q and z, more steps), and the noise calibration's bisection
# repeated for each model trained at the same ε (DP-SGD beside FSDP in an experiment).
@lru_cache(maxsize=8192)
def rdp_subsampled_gaussian(q: float, noise_multiplier: float, order: float) -> float:
    """RDP at ``order`` of one step of the Poisson-subsampled Gaussian mechanism."""
    if q == 0:
        return 0.0
    if q == 1.0:
        return order / (2 * noise_multiplier**2)
    if noise_multiplier == 0:
        return math.inf
    if float(order).is_integer():
        return _log_a_int(q, noise_multiplier, int(order)) / (order - 1)
    return _log_a_frac(q, noise_multiplier, order) / (order - 1)


def rdp_to_epsilon(
    rdp: Sequence[float] | np.ndarray, orders: Sequence[float], delta: float
) -> tuple[float, float]:
    """(ε, best order) from RDP values, with the conversion Opacus uses (Balle et al. 2020)."""
    orders_arr = np.asarray(orders, dtype=np.float64)
    rdp_arr = np.asarray(rdp, dtype=np.float64)
    eps = (
        rdp_arr
        - (math.log(delta) + np.log(orders_arr)) / (orders_arr - 1)
        + np.log((orders_arr - 1) / orders_arr)
    )
    eps = np.where(np.isnan(eps), np.inf, eps)
    best = int(np.argmin(eps))
    return max(0.0, float(eps[best])), float(orders_arr[best])


def rdp_gaussian_epsilon(
    q: float,
    noise_multiplier: float,
    steps: int,
    delta: float,
    orders: Sequence[float] = DEFAULT_ORDERS,
) -> float:
    """ε after ``steps`` Poisson-subsampled Gaussian releases (rate q, σ/Δ = noise_multiplier).

    Renyi DP per order composed additively, converted to (ε, δ) as Opacus does.
    """
    if steps == 0:
        return 0.0
    rdp = [steps * rdp_subsampled_gaussian(q, noise_multiplier, a) for a in orders]
    return rdp_to_epsilon(rdp, orders, delta)[0]


def _clone_divergence_terms(
    epsilon0: float, n: int, tail: float
) -> tuple[np.ndarray, np.ndarray, float]:
    """Weighted pmfs of the 'hiding among the clones' pair (P, Q), flattened over the clone count.

    C ~ Bin(n−1, e^{−ε0}) clones, A ~ Bin(C, ½), Δ ~ Bern(e^{ε0}/(e^{ε0}+1)); the pair
    differs only in the first coordinate given C, P = A + Δ and Q = A + 1 − Δ.
    Clone counts outside the central range carry at most ``tail`` mass, returned to
    be added to δ (an upper bound: a divergence never exceeds 1).
    """
    from scipy import stats  # ~2 CPU s to import: only the shuffle bound needs it

    p_clone = math.exp(-epsilon0)
    alpha = math.exp(epsilon0) / (math.exp(epsilon0) + 1)
    clones = stats.binom(n - 1, p_clone)
    low = int(clones.ppf(tail / 2))
    high = int(clones.ppf(1 - tail / 2))
    left_out = float(clones.cdf(low - 1) + clones.sf(high))
    ps, qs = [], []
    for c in range(low, high + 1):
        weight = float(clones.pmf(c))
        b = np.concatenate([stats.binom.pmf(np.arange(c + 1), c, 0.5), [0.0]])
        shifted = np.concatenate([[0.0], b[:-1]])
        ps.append(weight * (alpha * shifted + (1 - alpha) * b))
        qs.append(weight * (alpha * b + (1 - alpha) * shifted))
    return np.concatenate(ps), np.concatenate(qs), left_out


def shuffle_amplification(epsilon0: float, n: int, delta: float) -> float:
    """Central ε of n shuffled ε0-LDP reports (Feldman, McMillan, Talwar 2021, numerical bound).

    The hockey-stick divergence of their dominating pair is computed exactly (up to a
    tail of mass δ/1000 counted as fully private loss) and ε found by bisection, so
    the result upper-bounds the true shuffled ε. Never above ε0; δ is the δ of the
    result. Pure ε0-LDP randomizers only.
    """
    if epsilon0 < 0 or n < 1 or not 0 < delta < 1:
        raise ValueError("need epsilon0 >= 0, n >= 1 and 0 < delta < 1")
    if epsilon0 == 0 or n == 1 or epsilon0 > 50:
        return epsilon0
    p, q, tail = _clone_divergence_terms(epsilon0, n, delta / 1000)

    def delta_at(eps: float) -> float:
        return float(np.maximum(p - math.exp(eps) * q, 0.0).sum()) + tail

    if delta_at(epsilon0) > delta:
        return epsilon0
    low, high = 0.0, epsilon0
    for _ in range(60):
        mid = (low + high) / 2
        if delta_at(mid) > delta:
            low = mid
        else:
            high = mid
    return high


def zcdp_epsilon(rho: float, delta: float, orders: Sequence[float] = DEFAULT_ORDERS) -> float:
    """(ε at δ) of a ρ-zCDP release: RDP ``α·ρ`` at every order, Opacus' conversion.

    The discrete Gaussian with integer L2 sensitivity Δ is ρ = Δ²/(2σ²)-zCDP (Canonne,
    Kamath, Steinke 2020), and zCDP composes by adding ρ.
    """
    if rho == 0:
        return 0.0
    if not math.isfinite(rho):
        return math.inf
    return rdp_to_epsilon([a * rho for a in orders], orders, delta)[0]


def zcdp_rho_for(epsilon: float, delta: float) -> float:
    """The largest ρ whose zCDP guarantee converts to at most ε at δ (bisection)."""
    if not (epsilon > 0 and 0 < delta < 1):
        raise ValueError("need epsilon > 0 and 0 < delta < 1")
    low, high = 0.0, max(epsilon, 1.0)
    while zcdp_epsilon(high, delta) <= epsilon:
        high *= 2
    for _ in range(100):
        mid = (low + high) / 2
        if zcdp_epsilon(mid, delta) > epsilon:
            high = mid
        else:
            low = mid
        if high - low <= 1e-10 * high:
            break
    return low
