"""The GLMs' plain maths against sklearn: each converges to the model it claims to fit."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.linear_model import PoissonRegressor, Ridge
from sklearn.metrics import (
    mean_absolute_error,
    mean_poisson_deviance,
    precision_recall_fscore_support,
    r2_score,
)

from privfl.config.vertical import TrainingConfig
from privfl.data.views import PartyData, dataset_width, demo_table, split_view
from privfl.errors import TrainingDiverged
from privfl.learning.glm import Glm, glm_named, reference_train, residual
from privfl.learning.metrics import multiclass_metrics, poisson_metrics, regression_metrics
from privfl.mechanisms.label_dp import laplace_labels, laplace_scale

# Long, undecayed plain runs: gradient descent reaches the optimum to this precision.
CONVERGED = TrainingConfig(epochs=3000, learning_rate=0.1, lr_decay=0.0, l2=1.0)


def view(dataset: str) -> PartyData:
    return split_view(demo_table(dataset, tuple(range(dataset_width(dataset))), True), 0.25, 0)


def train(data: PartyData, glm: Glm, cfg: TrainingConfig) -> np.ndarray:
    """Every column at one party, bias last; returns θ of shape (features + 1, k)."""
    x = np.hstack([data.x_train, np.ones((len(data.x_train), 1))])
    penalised = [np.r_[np.ones(data.x_train.shape[1]), 0.0]]
    assert data.y_train is not None
    thetas, _ = reference_train(
        [x], data.y_train, cfg, np.random.default_rng(0), glm, data.offset_train, penalised
    )
    return thetas[0]


def test_linear_converges_to_ridge() -> None:
    # Prepare: our objective ½·mean(z − y)² + λ/(2b)|w|² is Ridge's |y − Xw|² + λ|w|² over 2b.
    # Diabetes' s1..s4 are nearly collinear: a larger λ keeps gradient descent's
    # convergence within the epochs (the claim is the objective, not the λ).
    data = view("diabetes")
    cfg = TrainingConfig(epochs=3000, learning_rate=0.3, lr_decay=0.0, l2=30.0)
    ridge = Ridge(alpha=cfg.l2).fit(data.x_train, data.y_train)

    # Act
    theta = train(data, glm_named("linear"), cfg)

    # Assert
    np.testing.assert_allclose(theta[:-1, 0], ridge.coef_, rtol=1e-3, atol=1e-2)
    assert theta[-1, 0] == pytest.approx(ridge.intercept_, rel=1e-6)


def test_poisson_with_exposure_converges_to_sklearn() -> None:
    # Prepare: mean(μ − yη) + λ/(2b)|w|² is PoissonRegressor's weighted deviance/2 fitted
    # on rates y/exposure with the exposures as sample weights (the offset log(exposure)),
    # whose mean runs over Σ exposure: α = λ / Σ exposure.
    data = view("counts")
    assert data.offset_train is not None and data.y_train is not None
    exposure = np.exp(data.offset_train)
    alpha = CONVERGED.l2 / float(exposure.sum())
    reference = PoissonRegressor(alpha=alpha, max_iter=1000, tol=1e-10)
    reference.fit(data.x_train, data.y_train / exposure, sample_weight=exposure)

    # Act
    theta = train(data, glm_named("poisson"), CONVERGED)

    # Assert
    np.testing.assert_allclose(theta[:-1, 0], reference.coef_, atol=1e-5)
    assert theta[-1, 0] == pytest.approx(reference.intercept_, abs=1e-5)


def test_multiclass_taylor_is_ridge_on_4y_minus_2() -> None:
    # Prepare: the Taylor loss is quadratic, so one-vs-rest Taylor LR solves
    # (XᵀX + 4λP)θ = Xᵀ(4Y − 2) for one-hot Y (P: the penalised weights).
    data = view("wine")
    assert data.y_train is not None
    x = np.hstack([data.x_train, np.ones((len(data.x_train), 1))])
    onehot = np.eye(3)[data.y_train]
    penalty = np.diag(np.r_[np.ones(data.x_train.shape[1]), 0.0])
    cfg = TrainingConfig(epochs=3000, learning_rate=1.0, lr_decay=0.0, l2=1.0)
    closed = np.linalg.solve(x.T @ x + 4 * cfg.l2 * penalty, x.T @ (4 * onehot - 2))

    # Act (the Taylor curvature is ¼ of squared loss's: a larger step is stable)
    theta = train(data, glm_named("multiclass", 3), cfg)

    # Assert
    np.testing.assert_allclose(theta, closed, atol=1e-6)


def test_residuals_of_each_kind() -> None:
    eta = np.array([[0.5], [-1.0]])
    y = np.array([[1.0], [0.0]])
    offset = np.log(np.array([2.0, 0.5]))
    np.testing.assert_allclose(residual(glm_named("linear"), eta, y, None), eta - y)
    np.testing.assert_allclose(residual(glm_named("logistic"), eta, y, None), eta - 4 * y + 2)
    want = np.exp(eta[:, 0] + offset) - y[:, 0]
    np.testing.assert_allclose(residual(glm_named("poisson"), eta, y, offset)[:, 0], want)


def test_metrics_agree_with_sklearn() -> None:
    rng = np.random.default_rng(3)
    y = rng.poisson(3.0, size=200).astype(float)
    mu = np.exp(rng.normal(1.0, 0.3, size=200))
    got = poisson_metrics(y, mu)
    assert got["deviance"] == pytest.approx(mean_poisson_deviance(y, mu), rel=1e-12)
    assert got["mae"] == pytest.approx(mean_absolute_error(y, mu))
    assert got["r2"] == pytest.approx(r2_score(y, mu))
    assert regression_metrics(y, mu)["rmse"] == pytest.approx(math.sqrt(np.mean((y - mu) ** 2)))

    labels = rng.integers(0, 4, size=300)
    scores = rng.random((300, 4)) + np.eye(4)[labels] * 0.6
    mine = multiclass_metrics(labels, scores)
    p, r, f, _ = precision_recall_fscore_support(labels, scores.argmax(1), average="macro")
    assert (mine["precision"], mine["recall"], mine["f1"]) == pytest.approx((p, r, f))
    assert mine["accuracy"] == pytest.approx(np.mean(scores.argmax(1) == labels))
    assert set(mine["per_class"]) == {"0", "1", "2", "3"}


def test_laplace_labels_clip_then_add_noise_of_the_stated_scale() -> None:
    # Prepare
    rng = np.random.default_rng(0)
    labels = np.array([-50.0, 10.0, 500.0] * 20_000)

    # Act
    noisy, scale = laplace_labels(labels, 2.0, 0.0, 100.0, rng)

    # Assert: the scale is (high − low)/ε; the noise is centred on the clipped labels
    # with the Laplace mean absolute deviation b.
    assert scale == laplace_scale(2.0, 0.0, 100.0) == 50.0
    clipped = np.clip(labels, 0.0, 100.0)
    noise = noisy - clipped
    assert abs(float(np.mean(noise))) < 1.0
    assert float(np.mean(np.abs(noise))) == pytest.approx(50.0, rel=0.02)
    unchanged, none = laplace_labels(labels, math.inf, 0.0, 100.0, rng)
    assert none == 0.0 and np.array_equal(unchanged, labels)
    with pytest.raises(ValueError, match="low < high"):
        laplace_labels(labels, 1.0, 5.0, 5.0, rng)


def test_a_poisson_guest_whose_scores_left_float_range_says_training_diverged() -> None:
    # Prepare: a score past exp's float range (noised scores at a large step reach it).
    glm = glm_named("poisson")
    z = np.array([1.0, 800.0])

    # Act / Assert: one line that says what to do, not an overflow from the encoder.
    with pytest.raises(TrainingDiverged, match=r"lower training\.learning_rate"):
        glm.forward_plain(z, 2**512 + 1)
    assert len(glm.forward_plain(np.array([1.0, 2.0]), 2**512 + 1)) == 4
