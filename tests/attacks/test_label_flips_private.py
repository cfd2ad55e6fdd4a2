"""Attack (issue 11, finding 2): recompute the label flips from the job file.

Randomized response's guarantee rests on nobody knowing which labels flipped. The
job file, with its ``seed``, is held by every party; if the Host drew the flips from
``default_rng(job.seed)``, a guest would recompute the flip mask (it does not depend
on the labels) and, with any view of the flipped labels, undo every flip: ε = 1
would protect nothing. The attacker below does exactly that against the Host's real
initialisation; it must do no better than chance, while the same attacker against
a Host seeded from the job (the construction issue 11 found) reads every true label.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import memory_job, party_data

import privfl.parties.vertical.host_steps as host_steps
from privfl.config.vertical import JobConfig, ModelConfig
from privfl.crypto.paillier import PublicKey, generate_keypair
from privfl.mechanisms.label_dp import keep_probability, laplace_scale

EPSILON = 1.0


@pytest.fixture(scope="module")
def key() -> PublicKey:
    return generate_keypair(512)[0]


def guessed_true_labels(flipped: np.ndarray, job_seed: int, epsilon: float) -> np.ndarray:
    """The attacker: redraw randomized response's keep mask from the job seed, undo it."""
    rng = np.random.default_rng(job_seed)
    keep = rng.random(flipped.shape) < keep_probability(epsilon)
    return np.where(keep, flipped, 1 - flipped)


def test_two_host_inits_of_the_same_job_flip_differently(key: PublicKey) -> None:
    job = memory_job(1, epsilon=EPSILON, seed=0)
    data = party_data(job)[job.host]

    first = host_steps.init_state(data, key, job.guests, job)
    second = host_steps.init_state(data, key, job.guests, job)

    assert not first.seeded_noise and not second.seeded_noise
    assert not np.array_equal(first.labels, second.labels)


@pytest.mark.parametrize("seed", [0, 1, 12345])
def test_the_job_seed_does_not_reproduce_the_flips(key: PublicKey, seed: int) -> None:
    # Prepare: the Host's real flips; the attacker knows the job and the flipped labels.
    job = memory_job(1, epsilon=EPSILON, seed=seed)
    data = party_data(job)[job.host]
    y = data.y_train
    assert y is not None
    state = host_steps.init_state(data, key, job.guests, job)

    # Act
    guess = guessed_true_labels(state.labels, job.seed, EPSILON)

    # Assert: with an independent mask the guess is right with probability
    # p² + (1 − p)² ≈ 0.607 at ε = 1 (p = flip probability); 5σ above that is 0.73.
    p = 1.0 - keep_probability(EPSILON)
    chance = p * p + (1 - p) * (1 - p)
    bound = chance + 5 * math.sqrt(chance * (1 - chance) / len(y))
    assert float((guess == y).mean()) < bound


def test_the_attack_reads_every_label_when_the_flips_come_from_the_job(key: PublicKey) -> None:
    # The leaky construction: flips from default_rng(job.seed). The attacker must win.
    job = memory_job(1, epsilon=EPSILON, seed=0)
    data = party_data(job)[job.host]
    y = data.y_train
    assert y is not None
    state = host_steps.init_state(
        data, key, job.guests, job, label_rng=np.random.default_rng(job.seed)
    )

    guess = guessed_true_labels(state.labels, job.seed, EPSILON)

    assert state.seeded_noise and state.flip.flipped > 50
    assert np.array_equal(guess, y)


# --- the other GLM kinds' label noise: k-ary randomized response and Laplace -------------

MULTICLASS = ModelConfig(kind="multiclass", classes=3)
LINEAR = ModelConfig(kind="linear", label_low=25.0, label_high=346.0)  # diabetes' range


def kind_job(kind: str, seed: int) -> JobConfig:
    """Wine (3 classes) or diabetes (linear, Laplace within public bounds), ε = 1."""
    if kind == "multiclass":
        return memory_job(1, epsilon=EPSILON, seed=seed, dataset="wine", model=MULTICLASS)
    return memory_job(1, epsilon=EPSILON, seed=seed, dataset="diabetes", model=LINEAR)


def undone_from_the_job(noisy: np.ndarray, job: JobConfig) -> np.ndarray:
    """The attacker: redraw the mechanism's noise from the job seed, in the order the Host
    draws it (``mechanisms/label_dp.py``), and take it off the noised labels."""
    rng = np.random.default_rng(job.seed)
    if job.model.kind == "multiclass":
        k = job.model.classes
        keep = rng.random(noisy.shape) < keep_probability(EPSILON, k)
        offset = rng.integers(1, k, size=noisy.shape)
        return np.where(keep, noisy, (noisy - offset) % k)
    scale = laplace_scale(EPSILON, job.model.label_low, job.model.label_high)
    return np.asarray(noisy - rng.laplace(0.0, scale, size=noisy.shape))


@pytest.mark.parametrize("kind", ["multiclass", "linear"])
@pytest.mark.parametrize("seeded", [False, True], ids=["private", "from the job"])
def test_the_job_seed_does_not_undo_the_other_kinds_label_noise(
    key: PublicKey, kind: str, seeded: bool
) -> None:
    # Prepare: the Host's real draw (or, leaky arm, one from the job's public seed).
    job = kind_job(kind, seed=7)
    data = party_data(job)[job.host]
    y = data.y_train
    assert y is not None
    rng = np.random.default_rng(job.seed) if seeded else None
    state = host_steps.init_state(data, key, job.guests, job, label_rng=rng)

    # Act
    guess = undone_from_the_job(state.labels, job)

    # Assert
    if kind == "linear":
        exact = np.abs(guess - np.clip(y, LINEAR.label_low, LINEAR.label_high)) < 1e-6
        # Leaky: every clipped label back exactly. Private: the guess is off by the
        # difference of two Laplace draws, which is never within 1e-6 (scale 321).
        assert exact.all() if seeded else not exact.any()
        return
    right = float((guess == y).mean())
    if seeded:
        assert right == 1.0
        return
    # With an independent draw the guess is right with probability q² + (1 − q)²/(k − 1)
    # (q = the keep probability, 0.475 at ε = 1 and k = 3): 0.363; 5σ above is 0.57
    # over wine's 133 training rows (P < 1e-6).
    q = keep_probability(EPSILON, 3)
    chance = q * q + (1 - q) ** 2 / 2
    assert right < chance + 5 * math.sqrt(chance * (1 - chance) / len(y))
