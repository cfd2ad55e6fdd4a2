"""Attack (label DP): infer the Host's true training labels after a real vertical run.

Every message the Host sends is computed from the labels it trains on (the noised
ones), its own features and public values, so the strongest view any other party
can have of the labels is those noised labels themselves. The attacker is granted
exactly that view — the Host's saved draw (``label-draw.json``) from a real
three-process run at label ε = 1 — plus the true class frequencies, and guesses each
true label by Bayes' rule. Randomized response bounds its accuracy by
``e^ε/(1 + e^ε)`` (73.1 % at ε = 1) whenever the classes are no more skewed than
that (here 63 %). The assertion allows the binomial margin of the run's 426 rows
at α = 1e-8 (the accuracy an attacker at exactly the bound exceeds with chance
≤ 1e-8; exact binomial: 7.2e-9). The leaky arm: the Host's own noising run at 3ε
while the job claims ε — the same attacker then beats the bound plus margin (it falls
short with chance 4.5e-17, exact binomial). At 2ε the two arms cannot both stay under
1e-6 on 426 rows: the margin that balances them leaves each a false failure of 3e-5.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import binom

from privfl.config.vertical import load_job
from privfl.learning.glm import glm_of
from privfl.mechanisms.label_dp import keep_probability, private_generator
from privfl.parties.vertical.host_steps import private_labels
from privfl.parties.vertical.runner import load_data

EPSILON = 1.0  # the runs' label ε (tests/attacks/conftest.py; checked below)
ALPHA = 1e-8


@pytest.fixture
def run(vertical_runs: tuple[Path, Path]) -> Path:
    """A finished run at label ε = 1 (tests/attacks/conftest.py)."""
    return vertical_runs[0]


def bayes_guess(seen: np.ndarray, prior_one: float, epsilon: float) -> np.ndarray:
    """The most likely true label of each row given the label the Host trained on."""
    keep = keep_probability(epsilon)
    one_if_seen_one = prior_one * keep > (1 - prior_one) * (1 - keep)
    one_if_seen_zero = prior_one * (1 - keep) > (1 - prior_one) * keep
    return np.where(seen == 1, int(one_if_seen_one), int(one_if_seen_zero))


def bound_with_margin(epsilon: float, rows: int) -> float:
    """``e^ε/(1+e^ε)`` plus what an attacker at exactly that accuracy exceeds w.p. ≤ α."""
    bound = math.exp(epsilon) / (1 + math.exp(epsilon))
    return float(binom.ppf(1 - ALPHA, rows, bound)) / rows


@pytest.mark.parametrize("factor", [1.0, 3.0], ids=["as-claimed", "leaky-3x-epsilon"])
def test_label_inference_stays_under_the_label_dp_bound(run: Path, factor: float) -> None:
    # Prepare: the true labels of the Host's training rows, and what the Host trained on.
    job = load_job(run / "kit" / "job.toml")
    assert job.label_dp.epsilon == EPSILON
    labels = load_data(job, "host", None, None).y_train
    assert labels is not None
    truth = labels.astype(int)
    if factor == 1.0:
        seen = np.asarray(json.loads((run / "host" / "label-draw.json").read_text())["labels"])
    else:
        noised_at = replace(job, label_dp=replace(job.label_dp, epsilon=factor * EPSILON))
        seen, _ = private_labels(glm_of(job), noised_at, truth, private_generator())

    # Act: the attacker knows the class frequencies and the claimed ε, not the draw.
    guess = bayes_guess(seen, float(truth.mean()), EPSILON)
    accuracy = float((guess == truth).mean())

    # Assert
    limit = bound_with_margin(EPSILON, truth.size)
    assert truth.size == 426 and max(truth.mean(), 1 - truth.mean()) < keep_probability(EPSILON)
    if factor == 1.0:
        assert accuracy <= limit, (accuracy, limit)
    else:
        assert accuracy > limit, (accuracy, limit)
