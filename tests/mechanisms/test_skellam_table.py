"""The Skellam table sampler draws exactly the symmetric Skellam the accountant assumes."""

from __future__ import annotations

import math
from decimal import Decimal, localcontext

import numpy as np
import pytest
from scipy import stats

from privfl.mechanisms import skellam, skellam_table
from privfl.mechanisms.noise import private_source

BENCH_VARIANCE = skellam.client_variance(1.0, 19_210, 1000)  # the 1,000-client bench's share


def _chi_square_p(draws: np.ndarray, variance: float, edges: np.ndarray) -> float:
    """p-value of ``draws`` against Skellam(v/2, v/2) (scipy's, an independent formula)
    over the bins ``(−∞, e₀], (e₀, e₁], …, (e_last, ∞)``."""
    cdf = stats.skellam.cdf(edges, variance / 2, variance / 2)
    expected = np.diff(np.concatenate([[0.0], cdf, [1.0]])) * draws.size
    observed = np.bincount(np.searchsorted(edges, draws, side="left"), minlength=edges.size + 1)
    assert expected.min() > 20  # the chi-square approximation holds
    return float(stats.chisquare(observed, expected).pvalue)


@pytest.mark.parametrize("variance", [3.0, 40.0])
def test_small_tables_pass_a_chi_square_test_value_by_value(variance: float) -> None:
    # 10^6 draws, one bin per value with ≥ 20 expected draws, the tails lumped: an
    # exact sampler fails this with probability 1e-8
    source = skellam.stream(private_source(exact=False))
    draws = skellam.skellam(1_000_000, variance, source)
    below = np.arange(-100, 0)
    reach = int(below[stats.skellam.cdf(below, variance / 2, variance / 2) > 2e-5][0])
    edges = np.arange(reach, -reach)
    assert _chi_square_p(draws, variance, edges) > 1e-8


def test_the_bench_share_passes_a_chi_square_test_over_quantile_bins() -> None:
    # the 1,000-client bench's per-client variance (σ ≈ 2,077): 10^6 draws in 200 bins
    # about equally likely (edges at the normal quantiles, counted exactly by scipy)
    source = skellam.stream(private_source(exact=False))
    draws = skellam.skellam(1_000_000, BENCH_VARIANCE, source)
    quantiles = stats.norm.ppf(np.linspace(0.005, 0.995, 199)) * np.sqrt(BENCH_VARIANCE)
    edges = np.unique(np.round(quantiles))
    assert _chi_square_p(draws, BENCH_VARIANCE, edges) > 1e-8


def test_the_chi_square_test_rejects_a_rounded_gaussian_of_the_same_variance() -> None:
    # leaky arm: the usual shortcut (round a Gaussian) fails the same test at variance 3
    rng = np.random.default_rng(11)
    draws = np.rint(rng.normal(0, np.sqrt(3.0), 1_000_000)).astype(np.int64)
    assert _chi_square_p(draws, 3.0, np.arange(-7, 7)) < 1e-8


def _bessel_pmf(k: int, variance: int) -> Decimal:
    """e^{−v}·I_k(v) from its power series, in 60-digit decimal arithmetic."""
    with localcontext() as context:
        context.prec = 60
        half = Decimal(variance) / 2
        series = sum(
            half ** (2 * m + k) / (math.factorial(m) * math.factorial(m + k)) for m in range(300)
        )
        return series * (-Decimal(variance)).exp()


def test_table_probabilities_match_the_bessel_pmf_to_the_counts_precision() -> None:
    # known answers: each table entry is within 2^−64 of the exact probability plus its
    # float64 rounding (1e-14 relative)
    tab = skellam_table.table(50.0)
    cumulative = [0, *(int(b) for b in tab.bounds), 2**64]
    for k in (0, 1, 7, 20, -20, 35):
        count = cumulative[k - tab.offset + 1] - cumulative[k - tab.offset]
        exact = float(_bessel_pmf(abs(k), 50) * 2**64)
        assert abs(count - exact) <= 1 + 1e-14 * exact
    assert tab.left_out < 2**-60


@pytest.mark.parametrize("variance", [1.0, 2.5, 50.0, BENCH_VARIANCE])
def test_the_guide_finds_the_same_value_as_a_binary_search(variance: float) -> None:
    # every bound, its neighbours, every bucket's first and last word, and random words
    tab = skellam_table.table(variance)
    bits = 64 - int(tab.shift)
    starts = np.arange(2**bits, dtype=np.uint64) << tab.shift
    words = np.concatenate([
        tab.bounds, tab.bounds - np.uint64(1), tab.bounds + np.uint64(1), starts,
        starts | (np.uint64(2**64 - 1) >> np.uint64(bits)),
        np.random.default_rng(3).integers(0, 2**64, 100_000, dtype=np.uint64, endpoint=False),
    ])  # fmt: skip
    expected = np.searchsorted(tab.bounds, words, side="right") + tab.offset
    assert np.array_equal(skellam_table.lookup(tab, words), expected)


def test_wide_variances_are_refused_by_the_table_and_drawn_by_poisson_differences() -> None:
    # a client's share in a group of 4 (σ ≈ 33,000): beyond the table, still Skellam
    variance = skellam.client_variance(1.0, 19_210, 4)
    assert not skellam_table.fits(variance)
    with pytest.raises(ValueError, match="too wide"):
        skellam_table.table(variance)
    draws = skellam.skellam(200_000, variance, private_source(exact=False))
    # sample variance within 3 % (relative sd 0.32 %: 9 sd), mean within 6 sd of 0
    assert abs(float(np.var(draws)) / variance - 1) < 0.03
    assert abs(float(draws.mean())) < 6 * np.sqrt(variance / 200_000)


def test_a_clients_share_of_a_zero_update_is_exactly_the_skellam_share() -> None:
    # the path a client takes (one AES-CTR keystream for rounding and noise): a zero update
    # rounds to 0, so what it sends is its noise alone, tested as the sampler above
    draws = skellam.client_share(np.zeros(1_000_000), 1.0, BENCH_VARIANCE, private_source())
    quantiles = stats.norm.ppf(np.linspace(0.005, 0.995, 199)) * np.sqrt(BENCH_VARIANCE)
    assert _chi_square_p(draws, BENCH_VARIANCE, np.unique(np.round(quantiles))) > 1e-8


def test_a_clients_share_rounds_without_bias() -> None:
    # 10^6 coordinates at 0.3 grid steps with a small share (variance 3): the mean is 0.3
    # within 6 sd of the rounding and noise together (0.011; two-sided 2e-9), where
    # rounding to the nearest step would give 0
    update = np.full(1_000_000, 0.3 * skellam.grid_step(1.0))
    share = skellam.client_share(update, 1.0, 3.0, private_source())
    assert share.dtype == np.int64
    assert abs(float(share.mean()) - 0.3) < 6 * np.sqrt(3.21 / share.size)


def test_a_wide_clients_share_takes_the_poisson_path_with_its_variance() -> None:
    # a client in a group of 4: beyond the table; 200,000 coordinates of a zero update,
    # sample variance within 3 % of the share's (relative sd 0.32 %: 9 sd)
    variance = skellam.client_variance(1.0, 19_210, 4)
    share = skellam.client_share(np.zeros(200_000), 1.0, variance, private_source())
    assert abs(float(np.var(share)) / variance - 1) < 0.03


def test_the_booked_distance_bounds_the_exact_total_variation() -> None:
    # known answer at v = 50: ½·Σ|count·2^−64 − P(k)| against the 60-digit Bessel series,
    # outcomes beyond ±80 (11σ, no counts, below 1e-28 together) left out of the sum
    tab = skellam_table.table(50.0)
    cumulative = [0, *(int(b) for b in tab.bounds), 2**64]
    counts = {tab.offset + i: cumulative[i + 1] - cumulative[i] for i in range(tab.bounds.size + 1)}
    half = [_bessel_pmf(k, 50) for k in range(81)]
    exact = {k: half[abs(k)] for k in range(-80, 81)}
    scale = Decimal(2) ** -64
    tv = sum(abs(counts.get(k, 0) * scale - p) for k, p in exact.items()) / 2
    bound = skellam_table.distance(50.0)
    assert float(tv) <= bound < 1e-14
    assert sum(counts.values()) == 2**64


def test_a_table_off_by_2_to_the_minus_40_books_at_least_that(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # leaky arm: a table that moves 2^−40 of probability from the mode to its neighbour
    # is booked as that far (the distance is computed from the table, not a constant)
    honest, honest_distance = skellam_table.table(50.0), skellam_table.distance(50.0)
    bounds = honest.bounds.copy()
    bounds[-honest.offset - 1] += np.uint64(2**24)  # the mode's lower edge moves up
    moved = skellam_table._guided(bounds, honest.offset, honest.left_out)
    monkeypatch.setattr(skellam_table, "table", lambda variance: moved)
    # moved 2^−40 from the honest table, which is within honest_distance of the pmf
    assert skellam_table.distance.__wrapped__(50.0) >= 2.0**-40 - honest_distance
    assert honest_distance < 1e-14


def test_a_clients_share_is_numpys_rounding_plus_the_binary_search_on_its_keystream() -> None:
    # known answer: the same seeded key, its AES-256-CTR keystream taken apart by hand
    # (uniforms by numpy's random() formula, noise by a plain binary search)
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    from privfl.mechanisms.noise import round_by, seeded_source

    update = np.random.default_rng(2).normal(size=5000) * 1e-3
    share = skellam.client_share(update, 1.0, BENCH_VARIANCE, seeded_source(4, 5, 6))
    key = seeded_source(4, 5, 6).rng.bit_generator.random_raw(4).tobytes()
    stream = Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor()
    words = np.frombuffer(stream.update(bytes(16 * update.size)), dtype="<u8")
    uniforms = (words[: update.size] >> np.uint64(11)) * 2.0**-53
    tab = skellam_table.table(BENCH_VARIANCE)
    noise = np.searchsorted(tab.bounds, words[update.size :], side="right") + tab.offset
    assert np.array_equal(share, round_by(update, skellam.grid_step(1.0), uniforms) + noise)
