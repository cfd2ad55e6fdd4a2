"""SecureBoost's label DP: the one draw of the Host's flipped labels, and what the outputs say.

Every split, partition and tree the guests see is computed from the Host's gradients,
and those come from the labels. Randomized response on the labels, drawn once before
the first gradient, makes all of it ε-label-DP by post-processing; the Host then
keeps only the flipped labels: ε is each label's ε for the whole run (post-processing
of one randomized-response release, no composition). Trees have no flipback (the GLMs'
post-processing that un-flips labels the model disagrees with): the guarantee does
not need it, and at SecureBoost's default ε = 2 (with ``min_child_weight`` = 4) the
trees stay within 0.01 AUC of the plaintext booster without it (docs/results.md).
"""

from __future__ import annotations

import math
from dataclasses import asdict, replace
from typing import Any

import numpy as np

from privfl.config.vertical import JobConfig
from privfl.errors import ConfigError
from privfl.learning.kinds.logistic import Logistic
from privfl.mechanisms.label_dp import private_generator
from privfl.parties import label_draws
from privfl.parties.label_draws import LabelDraw
from privfl.parties.session import PartyContext
from privfl.parties.vertical.host_steps import NOISE_NOTE, FlipReport, private_labels

BINARY = Logistic()
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


def take_labels(
    ctx: PartyContext,
    labels: np.ndarray,
    label_rng: np.random.Generator | None = None,
    redraw: bool = False,
) -> LabelDraw:
    """The job's one draw (``OUT/label-draw.json``), taken before the Host's first message.

    Drawn here on the first start of the job, reused on every later one: a guest that
    forces a restart (no checkpoint offered) cannot make the Host flip again. The
    operator's ``--redraw-labels`` draws anew and the report books every draw's ε.
    """

    def draw() -> tuple[np.ndarray, dict[str, Any]]:
        noisy, report = draw_noisy_labels(ctx.job, labels, label_rng)
        info = {k: v for k, v in asdict(report).items() if k != "spent"}
        return noisy, {**info, "seeded": label_rng is not None}

    return label_draws.take(
        ctx.out,
        ctx.job.fingerprint(),
        ctx.job.label_dp.epsilon,
        draw,
        rows=len(labels),
        resume=ctx.resume,
        redraw=redraw,
        book=ctx.draws,
    )


def flip_report(drawn: LabelDraw) -> FlipReport:
    """The draw's report, with the ε of every draw of the job."""
    info = {k: v for k, v in drawn.info.items() if k != "seeded"}
    return replace(FlipReport(**info), spent=drawn.epsilons)


def label_facts(job: JobConfig, flip: FlipReport, seeded: bool) -> dict[str, Any]:
    """summary.json's ``label_epsilon`` and ``flip``, as the GLM Host's summary writes them."""
    total = flip.total_epsilon
    return {
        "label_epsilon": total if math.isfinite(total) else "inf",
        "label_draws": len(flip.spent) or 1,
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
