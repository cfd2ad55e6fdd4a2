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
from privfl.crypto.paillier import PublicKey, generate_keypair
from privfl.mechanisms.label_dp import keep_probability

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
