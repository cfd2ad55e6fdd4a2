"""Centralised references: the models a federated run is compared with, every column pooled.

The GLMs' sklearn twins and the boosters (sklearn's histogram booster, xgboost when
importable), on a bundled table split and standardised as the parties split it. Used
by ``privfl vfl run-local`` (printed, recorded in summary.json, drawn on the plots)
and by ``privfl experiment vfl-models``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from privfl.config.vertical import JobConfig
from privfl.data.views import PartyData, dataset_width, demo_table, split_view
from privfl.learning import secureboost as sb
from privfl.learning.glm import glm_named


def pooled(dataset: str, job: JobConfig) -> PartyData:
    """Every column at one place, split and standardised as the parties do (reference)."""
    table_ = demo_table(dataset, tuple(range(dataset_width(dataset))), with_labels=True)
    return split_view(table_, job.data.test_size, job.data.split_seed)


def sklearn_reference(kind: str, data: PartyData, l2: float) -> dict[str, Any]:
    """The centralised model the GLM's objective names, and its test metrics (the kind's
    own ``reference``, learning/kinds)."""
    assert data.y_train is not None and data.y_test is not None
    return glm_named(kind).reference(data.x_train, data.y_train, data, l2)


def centralised_boosters(
    params: sb.BoostParams, pooled_: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
) -> dict[str, Any]:
    """Held-out AUCs of sklearn's histogram booster and of xgboost (when importable).

    Both pool every column at one place (``pooled_``: x_train, y_train, x_test, y_test);
    the settings are the federated booster's. The xgboost AUC is NaN without xgboost.
    """
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.metrics import roc_auc_score

    x_train, y_train, x_test, y_test = pooled_
    hgb = HistGradientBoostingClassifier(
        max_iter=params.trees,
        max_depth=params.depth,
        learning_rate=params.learning_rate,
        max_bins=params.bins,
        l2_regularization=params.l2,
        min_samples_leaf=1,
        early_stopping=False,
    ).fit(x_train, y_train)
    out: dict[str, Any] = {
        "sklearn": float(roc_auc_score(y_test, hgb.predict_proba(x_test)[:, 1])),
        "xgboost": math.nan,
        "xgboost_version": "",
    }
    try:
        import xgboost  # optional: not a privfl dependency
    except ImportError:
        return out
    xgb = xgboost.XGBClassifier(
        n_estimators=params.trees,
        max_depth=params.depth,
        learning_rate=params.learning_rate,
        max_bin=params.bins,
        tree_method="hist",
        reg_lambda=params.l2,
        gamma=params.gamma,
        min_child_weight=params.min_child_weight,
        n_jobs=1,
    ).fit(x_train, y_train)
    out["xgboost"] = float(roc_auc_score(y_test, xgb.predict_proba(x_test)[:, 1]))
    out["xgboost_version"] = str(xgboost.__version__)
    return out
