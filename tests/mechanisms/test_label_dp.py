"""Tests for label DP: randomized response probabilities, its noise, and flipback."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from privfl.mechanisms.label_dp import (
    flip_probability,
    flipback,
    keep_probability,
    randomized_response,
)

N = 200_000
SIGMAS = 5.0  # a fixed seed makes these exact; 5σ keeps a reseeded run failing < 1e-6 of the time


def _binary(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2, size=n, dtype=np.int64)


# ---------------------------------------------------------------- probabilities


@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.5, 1.0, 2.0, 8.0, 30.0])
def test_binary_flip_probability_known_answer(epsilon: float) -> None:
    # Act
    flip = flip_probability(epsilon)
    keep = keep_probability(epsilon)

    # Assert
    assert flip == pytest.approx(1 / (1 + math.exp(epsilon)), rel=1e-12)
    assert keep + flip == pytest.approx(1.0, abs=1e-15)


@pytest.mark.parametrize("classes", [2, 3, 4, 10])
@pytest.mark.parametrize("epsilon", [0.0, 0.5, 1.0, 3.0])
def test_k_class_keep_probability_known_answer(epsilon: float, classes: int) -> None:
    # Act
    keep = keep_probability(epsilon, classes)

    # Assert
    assert keep == pytest.approx(math.exp(epsilon) / (classes - 1 + math.exp(epsilon)), rel=1e-12)


def test_edge_values() -> None:
    # Act / assert: no noise at ε = ∞; a fair coin at ε = 0; uniform over k classes at ε = 0.
    assert flip_probability(math.inf) == 0.0
    assert keep_probability(math.inf, 5) == 1.0
    assert flip_probability(0.0) == 0.5
    assert keep_probability(0.0, 4) == pytest.approx(0.25)
    # Large ε must not overflow e^ε.
    assert keep_probability(1e6) == 1.0
    assert flip_probability(800.0) == pytest.approx(math.exp(-800.0), rel=1e-9, abs=1e-300)


@given(
    st.floats(min_value=0.0, max_value=50.0),
    st.floats(min_value=0.0, max_value=50.0),
    st.integers(min_value=2, max_value=50),
)
def test_keep_probability_is_monotone_and_above_chance(a: float, b: float, classes: int) -> None:
    # Prepare
    low, high = sorted((a, b))

    # Act
    p_low, p_high = keep_probability(low, classes), keep_probability(high, classes)

    # Assert: never below 1/k (that would be worse than a uniform guess), rising with ε.
    assert 1 / classes - 1e-12 <= p_low <= p_high <= 1.0


@pytest.mark.parametrize("epsilon", [-0.1, -math.inf, math.nan])
def test_invalid_epsilon_is_refused(epsilon: float) -> None:
    # Act / assert
    with pytest.raises(ValueError, match="epsilon"):
        keep_probability(epsilon)
    with pytest.raises(ValueError, match="epsilon"):
        randomized_response(_binary(10), epsilon, np.random.default_rng(0))


def test_fewer_than_two_classes_is_refused() -> None:
    # Act / assert
    with pytest.raises(ValueError, match="two classes"):
        keep_probability(1.0, num_classes=1)


# ---------------------------------------------------------------- randomized response


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0, 8.0])
def test_realised_flip_rate_matches_the_binomial(epsilon: float) -> None:
    # Prepare
    labels = _binary(N, seed=1)
    p = flip_probability(epsilon)

    # Act
    noisy = randomized_response(labels, epsilon, np.random.default_rng(2))

    # Assert: flips ~ Binomial(N, p); within 5σ (see SIGMAS), for each true class too.
    for mask in (labels == 0, labels == 1, np.ones(N, dtype=bool)):
        n = int(mask.sum())
        flips = int((noisy[mask] != labels[mask]).sum())
        assert abs(flips - n * p) <= SIGMAS * math.sqrt(n * p * (1 - p)), (epsilon, flips, n * p)
    assert set(np.unique(noisy)) <= {0, 1}


def test_infinite_epsilon_flips_nothing() -> None:
    # Prepare
    labels = _binary(10_000)

    # Act
    noisy = randomized_response(labels, math.inf, np.random.default_rng(0))

    # Assert: an equal copy, not the same object.
    assert np.array_equal(noisy, labels)
    assert noisy is not labels


@pytest.mark.parametrize("epsilon", [0.0, 1.0])
def test_three_classes_replace_uniformly_with_another_class(epsilon: float) -> None:
    # Prepare
    classes = 3
    labels = np.random.default_rng(3).integers(0, classes, size=N * 3 // 2)
    q = flip_probability(epsilon, classes)

    # Act
    noisy = randomized_response(labels, epsilon, np.random.default_rng(4), num_classes=classes)

    # Assert 1: the change rate is the full flip probability, so a replacement never
    # re-draws the original (that would lower it, e.g. to 4/9 instead of 2/3 at ε = 0); 5σ.
    changed = noisy != labels
    n = labels.size
    assert abs(changed.sum() - n * q) <= SIGMAS * math.sqrt(n * q * (1 - q))
    # Assert 2: per original class, the replacements split evenly over the other two.
    # One χ² with 1 dof per class (3 in all); fail below p = 1e-6, so a correct
    # implementation fails one seed in a million, while a 52/48 bias fails at this n.
    chi2 = 0.0
    for original in range(classes):
        replaced = noisy[(labels == original) & changed]
        counts = np.bincount(replaced, minlength=classes)
        assert counts[original] == 0
        others = np.delete(counts, original)
        chi2 += float(stats.chisquare(others).statistic)
    assert stats.chi2.sf(chi2, df=classes) > 1e-6, chi2
    assert set(np.unique(noisy)) <= {0, 1, 2}


@pytest.mark.parametrize("classes", [2, 3])
@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0])
def test_likelihood_ratio_is_e_to_the_epsilon(epsilon: float, classes: int) -> None:
    # Prepare: N copies of label a and N of label b.
    a, b = 1, 0
    rng = np.random.default_rng(5)

    # Act
    out_a = randomized_response(np.full(N, a), epsilon, rng, num_classes=classes)
    out_b = randomized_response(np.full(N, b), epsilon, rng, num_classes=classes)

    # Assert: P[out=a | in=a] / P[out=a | in=b] = e^ε, the ε-DP guarantee with equality.
    # Delta-method relative sd of a ratio of two proportions p, q: sqrt((1−p)/Np + (1−q)/Nq).
    p, q = np.mean(out_a == a), np.mean(out_b == a)
    rel_sd = math.sqrt((1 - p) / (N * p) + (1 - q) / (N * q))
    assert p / q == pytest.approx(math.exp(epsilon), rel=SIGMAS * rel_sd)


def test_same_seed_same_output_and_input_untouched() -> None:
    # Prepare
    labels = np.random.default_rng(6).integers(0, 3, size=5_000)
    before = labels.copy()

    # Act
    first = randomized_response(labels, 1.0, np.random.default_rng(7), num_classes=3)
    second = randomized_response(labels, 1.0, np.random.default_rng(7), num_classes=3)
    other = randomized_response(labels, 1.0, np.random.default_rng(8), num_classes=3)

    # Assert
    assert np.array_equal(first, second)
    assert not np.array_equal(first, other)  # ~1/3 of 5000 labels differ between seeds
    assert np.array_equal(labels, before)
    assert first.dtype == labels.dtype and first.shape == labels.shape


def test_empty_labels() -> None:
    # Act
    out = randomized_response(np.array([], dtype=np.int64), 1.0, np.random.default_rng(0))

    # Assert
    assert out.shape == (0,) and out.dtype == np.int64


@pytest.mark.parametrize(
    ("labels", "classes"),
    [([0, 2], 2), ([-1, 0], 2), ([0, 3], 3), ([0.5, 1.0], 2), ([math.nan, 0.0], 2)],
)
def test_invalid_labels_are_refused(labels: list[float], classes: int) -> None:
    # Act / assert
    with pytest.raises(ValueError, match="labels"):
        randomized_response(np.array(labels), 1.0, np.random.default_rng(0), num_classes=classes)


# ---------------------------------------------------------------- flipback


def test_flipback_known_answer() -> None:
    # Prepare: distances |score − label| are .9 .8 .7 .6 .55 .5 .1 .0 for rows 0..7.
    noisy = np.array([0, 1, 0, 1, 0, 1, 0, 1])
    scores = np.array([0.9, 0.2, 0.7, 0.4, 0.55, 0.5, 0.1, 1.0])

    # Act
    top_quarter = flipback(noisy, scores, fraction=0.25)  # floor(0.25·8) = 2 flips
    all_allowed = flipback(noisy, scores, fraction=1.0)
    capped = flipback(noisy, scores, fraction=1.0, max_flips=3)
    none = flipback(noisy, scores, fraction=0.0)
    negative_cap = flipback(noisy, scores, fraction=1.0, max_flips=-4)

    # Assert: only rows with distance > 0.5 (rows 0..4) are ever flipped, most distant first.
    assert top_quarter.tolist() == [1, 0, 0, 1, 0, 1, 0, 1]
    assert all_allowed.tolist() == [1, 0, 1, 0, 1, 1, 0, 1]
    assert capped.tolist() == [1, 0, 1, 1, 0, 1, 0, 1]
    assert none.tolist() == noisy.tolist()
    assert negative_cap.tolist() == noisy.tolist()


def test_flipback_ties_resolve_by_row_order() -> None:
    # Prepare: 1000 rows at two distances (.9, .7 alternating), room for 250 flips.
    # Long enough that an unstable sort (quicksort) would scramble the ties.
    noisy = np.zeros(1_000, dtype=np.int64)
    scores = np.tile([0.9, 0.7], 500)

    # Act
    out = flipback(noisy, scores, fraction=0.25)

    # Assert: the first 250 of the .9 rows, in row order.
    assert np.flatnonzero(out).tolist() == list(range(0, 500, 2))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 1), st.floats(min_value=0.0, max_value=1.0)),
        min_size=1,
        max_size=60,
    ),
    st.floats(min_value=0.0, max_value=1.0),
    st.none() | st.integers(min_value=-2, max_value=70),
)
def test_flipback_properties(
    rows: list[tuple[int, float]], fraction: float, max_flips: int | None
) -> None:
    # Prepare
    noisy = np.array([label for label, _ in rows], dtype=np.int64)
    scores = np.array([score for _, score in rows])
    noisy_before, scores_before = noisy.copy(), scores.copy()
    distance = np.abs(scores - noisy)
    disagree = distance > 0.5
    cap = math.inf if max_flips is None else max(max_flips, 0)
    expected = min(math.floor(fraction * noisy.size), cap, int(disagree.sum()))

    # Act
    out = flipback(noisy, scores, fraction, max_flips)
    again = flipback(noisy.copy(), scores.copy(), fraction, max_flips)

    # Assert
    flipped = out != noisy
    assert flipped.sum() == expected  # the top fraction of the disagreeing rows, capped
    assert not (flipped & ~disagree).any()  # never a label the model agrees with
    if flipped.any() and (disagree & ~flipped).any():
        # The flipped ones are the most disagreeing: none left behind is further away.
        assert distance[flipped].min() >= distance[disagree & ~flipped].max()
    assert set(np.unique(out)) <= {0, 1}
    assert np.array_equal(out, again)  # deterministic: a function of its arguments only
    assert np.array_equal(noisy, noisy_before) and np.array_equal(scores, scores_before)


def test_flipback_ignores_global_randomness() -> None:
    # Prepare: disturb every global random source between two calls.
    noisy = _binary(1_000, seed=9)
    scores = np.random.default_rng(10).random(1_000)

    # Act
    np.random.seed(1)  # legacy global state, deliberately
    first = flipback(noisy, scores, 0.1, max_flips=50)
    np.random.seed(2)
    np.random.random(100)
    second = flipback(noisy, scores, 0.1, max_flips=50)

    # Assert
    assert np.array_equal(first, second)
    assert (first != noisy).sum() == 50


@pytest.mark.parametrize("fraction", [-0.01, 1.01, math.nan, math.inf])
def test_flipback_fraction_outside_unit_interval_is_refused(fraction: float) -> None:
    # Act / assert
    with pytest.raises(ValueError, match="fraction"):
        flipback(np.array([0, 1]), np.array([0.9, 0.1]), fraction)
