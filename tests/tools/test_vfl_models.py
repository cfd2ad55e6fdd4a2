"""`privfl experiment vfl-models`, small: one real encrypted case and its references."""

from __future__ import annotations

import pytest

from privfl.tools.experiments import vfl_models
from privfl.tools.experiments.catalog import names
from privfl.tools.experiments.vfl_models import CASES, RUNNERS, Case, run_cases


def test_registered_with_a_runner_per_glm() -> None:
    assert "vfl-models" in names()
    assert {"linear", "poisson", "multiclass"} <= set(RUNNERS)
    assert {c.kind for c in CASES} <= set(RUNNERS)


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
