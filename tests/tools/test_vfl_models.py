"""`privfl experiment vfl-models`, small: one real encrypted case and its references."""

from __future__ import annotations

import math
import sys
from dataclasses import replace

import numpy as np
import pytest

from privfl.config.vertical import ModelConfig
from privfl.learning.secureboost import BoostParams
from privfl.tools.experiments import vfl_models
from privfl.tools.experiments.catalog import names
from privfl.tools.experiments.vfl_models import (
    CASES,
    RUNNERS,
    Case,
    boost_case,
    centralised_boosters,
    quick_case,
    run_cases,
)


def test_registered_with_a_runner_per_model() -> None:
    assert "vfl-models" in names()
    assert {"linear", "poisson", "multiclass", "secureboost"} <= set(RUNNERS)
    assert {c.kind for c in CASES} <= set(RUNNERS)
    assert {c.dataset for c in CASES if c.kind == "secureboost"} == {
        "breast_cancer",
        "synthetic_10000x30",
    }


def test_one_encrypted_case_against_its_references() -> None:
    # Act: three epochs of linear regression on diabetes, then its references.
    (row,) = run_cases((Case("linear", "diabetes", "rmse", 0.01),), epochs=3, seed=0)

    # Assert: the encrypted run equals its plaintext oracle up to fixed point; the gap
    # to Ridge is measured (after 3 epochs it is far from the target: an honest 'no').
    assert row["model"] == "linear" and row["key_bits"] == 512
    assert row["fixed_point_error"] < 1e-3 * row["plain_oracle"]
    assert row["gap"] == pytest.approx(row["encrypted"] / row["sklearn"] - 1.0)
    assert row["met"] == ("yes" if row["gap"] <= 0.01 else "no")
    assert row["sklearn"] == pytest.approx(56.40, abs=0.01)  # Ridge(α = 0.1), same split


def test_an_unknown_kind_has_no_runner() -> None:
    with pytest.raises(vfl_models.PrivflError, match="no runner"):
        run_cases((Case("no-such-kind", "breast_cancer", "auc", 0.01),), epochs=1, seed=0)


def test_secureboost_case_against_its_references() -> None:
    # Arrange: two trees on breast cancer, 512-bit keys (the quick sweep's case).
    case = replace(
        quick_case(boost_case("breast_cancer")),
        model=ModelConfig(kind="secureboost", trees=2, depth=3, learning_rate=0.3, bins=32),
    )

    # Act
    (row,) = run_cases((case,), epochs=0, seed=0)

    # Assert: the encrypted run is the plain reference booster exactly; the gap is to
    # xgboost where it is importable, else to sklearn's histogram booster, both measured.
    assert row["model"] == "secureboost" and row["metric"] == "auc"
    assert row["trees"] == 2 and row["key_bits"] == 512
    assert row["train_rows"] == 426 and row["test_rows"] == 143
    assert row["encrypted"] == row["plain_oracle"] and row["fixed_point_error"] == 0.0
    assert 0.95 < row["encrypted"] <= 1.0 and 0.95 < row["sklearn"] <= 1.0
    reference = row["sklearn"] if row["reference"] == "sklearn" else row["xgboost"]
    assert row["gap"] == pytest.approx(reference - row["encrypted"])
    assert row["met"] == ("yes" if abs(row["gap"]) <= 0.01 else "no")


def test_secureboost_label_dp_case_and_the_sweep() -> None:
    # Arrange: two trees at label ε = 1 (seeded flips: the oracle grows from the same ones).
    case = replace(
        quick_case(boost_case("breast_cancer", epsilon=1.0)),
        model=ModelConfig(kind="secureboost", trees=2, depth=3, learning_rate=0.3, bins=32),
    )

    # Act
    (row,) = run_cases((case,), epochs=0, seed=0)

    # Assert: the row states ε and the flips; the encrypted run is its oracle exactly.
    assert row["label_epsilon"] == 1.0 and 60 < row["flipped"] < 170  # p = 0.27 of 426
    assert row["encrypted"] == row["plain_oracle"] and row["fixed_point_error"] == 0.0
    sweep = [c.epsilon for c in CASES if c.kind == "secureboost" and c.dataset == "breast_cancer"]
    assert sweep == [math.inf, 8.0, 4.0, 2.0, 1.0]


def test_without_xgboost_the_reference_is_sklearn(monkeypatch: pytest.MonkeyPatch) -> None:
    # Arrange: xgboost cannot be imported (it is not a privfl dependency).
    monkeypatch.setitem(sys.modules, "xgboost", None)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 3))
    y = (x[:, 0] + 0.5 * rng.normal(size=200) > 0).astype(np.int64)
    params = BoostParams(trees=3, depth=2, bins=16)

    # Act
    got = centralised_boosters(params, (x[:150], y[:150], x[150:], y[150:]))

    # Assert
    assert math.isnan(got["xgboost"]) and got["xgboost_version"] == ""
    assert 0.7 < got["sklearn"] <= 1.0
