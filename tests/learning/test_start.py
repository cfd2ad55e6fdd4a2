"""The Host's private GLM start: a warm-up that diverges is drawn again, never returned."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from privfl.config.vertical import TrainingConfig
from privfl.learning import start
from privfl.learning.glm import glm_named


def host_start_with(
    monkeypatch: pytest.MonkeyPatch, diverged: int, away: float = np.nan
) -> tuple[np.ndarray, int]:
    """host_start on a toy table whose first ``diverged`` warm-ups end at ``away`` (NaN, or
    a finite weight too large for the kind)."""
    calls = 0

    def warm_up(*args: Any, start: np.ndarray, **kwargs: Any) -> tuple[list[np.ndarray], Any]:
        nonlocal calls
        calls += 1
        return [start * 0 + away if calls <= diverged else start + 1.0], None

    monkeypatch.setattr(start, "reference_train", warm_up)
    x = np.ones((8, 3))
    got = start.host_start(
        glm_named("poisson"),
        x,
        np.arange(8.0),
        offset=None,
        penalised=np.ones(3),
        training=TrainingConfig(),
        rng=np.random.default_rng(0),
    )
    return got, calls


def test_a_diverged_warm_up_is_drawn_again(monkeypatch: pytest.MonkeyPatch) -> None:
    got, calls = host_start_with(monkeypatch, diverged=2)
    assert calls == 3 and np.isfinite(got).all()


def test_a_start_that_never_warms_up_is_the_last_finite_draw(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    got, calls = host_start_with(monkeypatch, diverged=start.START_TRIES)
    assert calls == start.START_TRIES and np.isfinite(got).all()
    assert np.abs(got).max() < 10 * start.START_SCALE  # the draw itself: N(0, 0.25/3), seeded here


def test_a_warm_up_that_ran_to_finite_rates_no_multiplier_encodes_is_drawn_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Laplace-noised counts sent a Poisson warm-up to finite scores up to 7e29 (3 of 40
    # draws); exp(z)·2^16 must stay below 2^62 for the Host's multiplier.
    got, calls = host_start_with(monkeypatch, diverged=2, away=1e29)
    assert calls == 3 and float(np.max(np.ones((8, 3)) @ got)) <= 20.0
    poisson = glm_named("poisson")
    assert not poisson.start_fits(np.array([[25.0]]), None)
    assert not poisson.start_fits(np.array([[15.0]]), np.array([6.0]))  # the offset counts
    assert poisson.start_fits(np.array([[15.0]]), None)
    assert glm_named("linear").start_fits(np.array([[300.0]]), None)  # unscaled labels
