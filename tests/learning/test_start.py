"""The Host's private GLM start: a warm-up that diverges is drawn again, never returned."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from privfl.config.vertical import TrainingConfig
from privfl.learning import start
from privfl.learning.glm import glm_named


def host_start_with(monkeypatch: pytest.MonkeyPatch, diverged: int) -> tuple[np.ndarray, int]:
    """host_start on a toy table whose first ``diverged`` warm-ups end in NaN."""
    calls = 0

    def warm_up(*args: Any, start: np.ndarray, **kwargs: Any) -> tuple[list[np.ndarray], Any]:
        nonlocal calls
        calls += 1
        return [start * np.nan if calls <= diverged else start + 1.0], None

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
