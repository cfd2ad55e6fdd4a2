"""Label differential privacy: randomized response (flip) and its post-processing (flipback)."""

from __future__ import annotations

import math
import secrets

import numpy as np

SEED_BITS = 256
"""Entropy from the OS CSPRNG behind every private generator."""


def private_generator() -> np.random.Generator:
    """A generator for privacy noise, seeded with 256 bits from the OS CSPRNG (``secrets``).

    Randomized response's privacy rests on nobody being able to recompute which
    labels flipped, so its generator must never be seeded from anything another
    party can know (such as the job file's ``seed``).
    """
    return np.random.default_rng(secrets.randbits(SEED_BITS))


def keep_probability(epsilon: float, num_classes: int = 2) -> float:
    """Probability that randomized response keeps a label: ``e^ε / (k − 1 + e^ε)``.

    Seed 004 calls this number ``Flip_prob``; it is the probability of *keeping*.
    """
    if num_classes < 2:
        raise ValueError("randomized response needs at least two classes")
    if epsilon == math.inf:  # not isinf: −∞ is invalid, not "no noise"
        return 1.0
    if epsilon < 0 or math.isnan(epsilon):
        raise ValueError(f"epsilon must be >= 0 or inf, got {epsilon}")
    # Written with e^-ε so that large ε does not overflow.
    return 1.0 / (1.0 + (num_classes - 1) * math.exp(-epsilon))


def flip_probability(epsilon: float, num_classes: int = 2) -> float:
    """Probability that a label is replaced (binary: ``1 / (1 + e^ε)``)."""
    return 1.0 - keep_probability(epsilon, num_classes)


def randomized_response(
    labels: np.ndarray, epsilon: float, rng: np.random.Generator, num_classes: int = 2
) -> np.ndarray:
    """ε-DP randomized response, each label independently.

    A label is kept with probability ``e^ε / (k − 1 + e^ε)`` and otherwise replaced by
    one of the other ``k − 1`` labels, uniformly. ``epsilon = inf`` returns a copy.
    """
    labels = np.asarray(labels)
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes or np.any(labels % 1 != 0)):
        raise ValueError(f"labels must be integers in 0..{num_classes - 1}")
    keep = rng.random(labels.shape) < keep_probability(epsilon, num_classes)
    # An offset in 1..k-1 added mod k picks each other class with equal probability.
    offset = rng.integers(1, num_classes, size=labels.shape) if num_classes > 2 else 1
    return np.where(keep, labels, (labels + offset) % num_classes).astype(labels.dtype)


def flipback(
    noisy_labels: np.ndarray, scores: np.ndarray, fraction: float, max_flips: int | None = None
) -> np.ndarray:
    """Flip the noisy binary labels the model disagrees with most (seed 004's flipback).

    Ranks samples by ``|score − noisy_label|`` (``scores`` are predicted probabilities)
    and flips the top ``fraction`` of them, but only those the model actually
    disagrees with (distance above one half), and at most ``max_flips`` of them (the
    Host passes the number of flips randomized response is expected to have made,
    a public quantity). It reads only the *noisy* labels and
    the model's scores, so it is post-processing and spends no privacy budget.
    Returns the new label vector; the input is not modified.
    """
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"flipback fraction must lie in [0, 1], got {fraction}")
    noisy = np.asarray(noisy_labels)
    distance = np.abs(np.asarray(scores, dtype=np.float64) - noisy)
    budget = math.floor(fraction * noisy.size)
    if max_flips is not None:
        budget = min(budget, max(max_flips, 0))
    # Stable sort so ties resolve by row order and the result is reproducible.
    candidates = np.argsort(-distance, kind="stable")[:budget]
    chosen = candidates[distance[candidates] > 0.5]
    result = noisy.copy()
    result[chosen] = 1 - result[chosen]
    return result


def laplace_scale(epsilon: float, low: float, high: float) -> float:
    """Laplace scale ``(high − low) / ε`` of an ε-DP release of one label clipped to the bounds."""
    if not low < high:
        raise ValueError(f"the label bounds need low < high, got [{low}, {high}]")
    if epsilon <= 0 or math.isnan(epsilon):
        raise ValueError(f"the Laplace label mechanism needs epsilon > 0, got {epsilon}")
    return (high - low) / epsilon


def laplace_labels(
    labels: np.ndarray, epsilon: float, low: float, high: float, rng: np.random.Generator
) -> tuple[np.ndarray, float]:
    """ε-label-DP for regression: clip each label to ``[low, high]``, add Laplace noise.

    The clipped label has sensitivity ``high − low``, so ``Lap((high − low)/ε)`` noise
    makes each released label ε-DP (the bounds must be public, not read from the data).
    ``epsilon = inf`` returns the labels unchanged (not even clipped). Returns the noisy
    labels and the Laplace scale.
    """
    y = np.asarray(labels, dtype=np.float64)
    if epsilon == math.inf:
        return y.copy(), 0.0
    scale = laplace_scale(epsilon, low, high)
    clipped = np.clip(y, low, high)
    return clipped + rng.laplace(0.0, scale, size=y.shape), scale
