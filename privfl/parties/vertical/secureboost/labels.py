"""SecureBoost's label DP: the one draw of the Host's flipped labels, and what the outputs say.

Every split, partition and tree the guests see is computed from the Host's gradients,
and those come from the labels. Randomized response on the labels, drawn once before
the first gradient, makes all of it ε-label-DP by post-processing; the Host then
keeps only the flipped labels. Trees have no flipback (the GLMs' post-processing
that un-flips labels the model disagrees with): the guarantee does not need it, and
at the default ε = 8 the trees meet their accuracy target without it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from privfl.config.vertical import JobConfig
from privfl.errors import ConfigError
from privfl.learning.glm import Glm
from privfl.mechanisms.label_dp import private_generator
from privfl.parties.vertical.host_steps import NOISE_NOTE, FlipReport, private_labels

BINARY = Glm("logistic")
"""Trees classify two classes: the GLM Host's binary randomized response applies as is."""


def draw_noisy_labels(
    job: JobConfig, labels: np.ndarray, label_rng: np.random.Generator | None = None
) -> tuple[np.ndarray, FlipReport]:
    """The labels the Host trains its trees on: binary randomized response at the job's ε.

    The only place SecureBoost draws its flips. ``label_rng``: None (always, outside
    tests and experiments) seeds a generator from the OS CSPRNG, never from the job's
    public ``seed``; a caller's seeded generator makes the run reproducible and not
    private. The flips themselves are the GLM Host's (``host_steps.private_labels``).
    """
    if not np.isin(labels, (0, 1)).all():
        raise ConfigError(
            "SecureBoost classifies two classes: the label column must hold 0 and 1 only"
        )
    rng = label_rng if label_rng is not None else private_generator()
    noisy, report = private_labels(BINARY, job, labels, rng)
    return noisy.astype(np.float64), report


def label_facts(job: JobConfig, flip: FlipReport, seeded: bool) -> dict[str, Any]:
    """summary.json's ``label_epsilon`` and ``flip``, as the GLM Host's summary writes them."""
    return {
        "label_epsilon": epsilon_of(job),
        "flip": {
            "mechanism": flip.mechanism,
            "count": flip.flipped,
            "probability": flip.probability,
            "rows": flip.rows,
            "noise": NOISE_NOTE[seeded],
        },
    }


def label_ledger(job: JobConfig, seeded: bool) -> dict[str, Any]:
    """The privacy ledger's ``label_dp`` entry for trees."""
    return {
        "mechanism": "randomized response (flip), once before the first tree",
        "epsilon": epsilon_of(job),
        "unit": "per training label, for the whole run, against the guests and the server",
        "flipback": "none for trees",
        "noise": NOISE_NOTE[seeded],
    }


def epsilon_of(job: JobConfig) -> float | str:
    """The job's label ε, JSON-safe (∞ as ``"inf"``)."""
    eps = job.label_dp.epsilon
    return eps if math.isfinite(eps) else "inf"
