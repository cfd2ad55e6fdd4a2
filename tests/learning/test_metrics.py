"""binary_metrics against sklearn's definitions (a plaintext oracle)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, f1_score, precision_score, recall_score, roc_auc_score

from privfl.learning.metrics import binary_metrics


@pytest.mark.parametrize("seed", range(5))
def test_binary_metrics_equal_sklearn(seed: int) -> None:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, size=500)
    # Rounded, so many scores tie (as a booster's few leaf values do).
    probabilities = np.round(rng.random(500) * 0.6 + 0.3 * labels, 1)

    got = binary_metrics(labels, probabilities)

    predicted = (probabilities >= 0.5).astype(np.int64)
    assert got["auc"] == pytest.approx(roc_auc_score(labels, probabilities), abs=1e-12)
    assert got["accuracy"] == pytest.approx(accuracy_score(labels, predicted), abs=1e-12)
    assert got["precision"] == pytest.approx(precision_score(labels, predicted), abs=1e-12)
    assert got["recall"] == pytest.approx(recall_score(labels, predicted), abs=1e-12)
    assert got["f1"] == pytest.approx(f1_score(labels, predicted), abs=1e-12)


def test_binary_metrics_one_class_and_no_positive_predictions() -> None:
    labels = np.zeros(10, dtype=np.int64)

    got = binary_metrics(labels, np.full(10, 0.2))

    assert math.isnan(got["auc"])
    assert got["precision"] == got["recall"] == got["f1"] == 0.0
    assert got["accuracy"] == 1.0
