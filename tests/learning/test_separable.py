"""The separable sigmoid: how close it is to σ(a + b), that it stays bounded, and what it buys."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from privfl.learning import separable
from privfl.learning.taylor import sigmoid
from privfl.tools.experiments.vfl_models import CASES, case_job, plain_oracle


def grid(limit: float) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.meshgrid(np.linspace(-limit, limit, 161), np.linspace(-limit, limit, 161))
    return a.ravel(), b.ravel()


@pytest.mark.parametrize(("limit", "worst", "rms"), [(4.0, 0.125, 0.051), (8.0, 0.18, 0.055)])
def test_the_fit_is_close_to_the_sigmoid_and_far_closer_than_taylor(
    limit: float, worst: float, rms: float
) -> None:
    # Act
    a, b = grid(limit)
    error = separable.approximate(a, b, sigmoid) - sigmoid(a + b)
    taylor = 0.5 + (a + b) / 4 - sigmoid(a + b)

    # Assert: the documented bounds (learning/separable.py), and ten times Taylor's.
    assert np.abs(error).max() <= worst
    assert np.sqrt(np.mean(error**2)) <= rms
    assert np.abs(taylor).max() > 10 * np.abs(error).max()


def test_the_fit_stays_bounded_for_any_scores() -> None:
    # Act: scores far outside the fit's grid, where a polynomial would turn over.
    a, b = np.meshgrid(np.linspace(-40, 40, 81), np.linspace(-100, 100, 401))
    fitted = separable.approximate(a.ravel(), b.ravel(), sigmoid)

    # Assert
    assert fitted.min() > -0.4 and fitted.max() < 1.4


def test_the_basis_is_what_the_protocol_names() -> None:
    z = np.array([-20.0, 0.0, 3.0])
    want = np.column_stack([sigmoid(z + 4), sigmoid(z), sigmoid(z - 4), [-12.0, 0.0, 3.0]])
    np.testing.assert_allclose(separable.guest_basis(z), want)


def test_the_loss_fit_is_close_to_the_cross_entropy() -> None:
    a, b = grid(4.0)
    y = (a > b).astype(np.float64)
    exact = np.logaddexp(0.0, a + b) - y * (a + b)
    error = separable.loss(a, b, y) - exact
    # A coarser fit than the sigmoid's (softplus is unbounded), held ≥ 0: a
    # progress number for the loss curve and the stopping rule, not what the gradient
    # follows.
    assert np.abs(error).max() < 0.65
    assert np.sqrt(np.mean(error**2)) < 0.19


@pytest.mark.parametrize("label", [0.0, 1.0])
def test_the_loss_fit_is_never_negative(label: float) -> None:
    # Prepare: scores far past the fit's grid, where the bare fit fell 2.14 below zero
    # (a = −4, b = −12 for label 0).
    a, b = np.meshgrid(np.linspace(-40, 40, 161), np.linspace(-100, 100, 401))
    y = np.full(a.size, label)

    # Act: the constrained fit, and the plain one it replaced.
    fitted = separable.loss(a.ravel(), b.ravel(), y)
    bare = separable.approximate(a.ravel(), b.ravel(), separable.softplus)
    bare -= y * (a.ravel() + np.clip(b.ravel(), -separable.LIMIT, separable.LIMIT))

    # Assert: the constrained fit is ≥ 0 (to rounding); the plain least-squares fit was not.
    assert fitted.min() > -1e-9
    assert bare.min() < -2.0


@pytest.mark.parametrize("dataset", ["digits"])
def test_digits_passes_the_taylor_ceiling(dataset: str) -> None:
    # Prepare: the vfl-models case (one guest, batches of 64, 30 epochs), in the clear.
    (case,) = [c for c in CASES if c.dataset == dataset]
    job = case_job(case, 30, 0)

    # Act
    separable_fit = plain_oracle(job)["accuracy"]
    taylor = plain_oracle(replace(job, model=replace(job.model, sigmoid="taylor")))["accuracy"]

    # Assert: within 1.5 points of sklearn's multinomial LR (0.960 on this split), where
    # the Taylor residual's least-squares fit cannot reach.
    assert separable_fit >= 0.945
    assert taylor < 0.93
