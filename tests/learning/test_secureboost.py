"""The plain reference booster: known answers, a centralised booster to compare with, options."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import train_test_split

from privfl.learning import secureboost as sb


def split_data() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    x, y = load_breast_cancer(return_X_y=True)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)
    return xtr, xte, ytr.astype(np.float64), yte.astype(np.float64)


def test_one_split_finds_the_separating_feature() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 3))
    y = (x[:, 1] > 0.2).astype(np.float64)
    params = sb.BoostParams(trees=1, depth=1, bins=16)
    booster = sb.fit([x[:, :1], x[:, 1:]], y, params)
    root = booster.trees[0][0]
    assert (root.group, root.feature) == (1, 0)  # the guest group's first column = x[:, 1]
    threshold = booster.edges[1][0][root.bin]
    assert abs(threshold - 0.2) < 0.25
    left, right = booster.trees[0][1], booster.trees[0][2]
    assert left.leaf and right.leaf and left.value < 0 < right.value


def test_histogram_sums_are_exact() -> None:
    rng = np.random.default_rng(1)
    binned = rng.integers(0, 8, size=(50, 2))
    g = rng.integers(-(2**20), 2**20, size=50)
    h = rng.integers(0, 2**18, size=50)
    hist = sb.histogram(binned, g, h, 8)
    for j in range(2):
        for b in range(8):
            rows = binned[:, j] == b
            assert hist[j, b].tolist() == [g[rows].sum(), h[rows].sum(), rows.sum()]


def test_gain_and_leaf_match_the_textbook_formulas() -> None:
    scale = 2**sb.FRAC_BITS
    hist = np.zeros((1, 2, 3), dtype=np.int64)
    hist[0, 0] = [-3 * scale, 2 * scale, 10]
    hist[0, 1] = [4 * scale, 3 * scale, 12]
    params = sb.BoostParams(l2=1.0, gamma=0.1)
    cand = sb.best_split(hist, np.array([0]), params, floor=4)
    assert cand is not None and cand.bin == 0
    expected = 0.5 * (9 / 3 + 16 / 4 - 1 / 6) - 0.1
    assert cand.gain == pytest.approx(expected)
    assert sb.leaf_value(-3 * scale, 2 * scale, params) == pytest.approx(0.3 * 3 / 3)


def test_splits_respect_min_child_weight_and_the_row_floor() -> None:
    scale = 2**sb.FRAC_BITS
    hist = np.zeros((1, 3, 3), dtype=np.int64)
    hist[0, 0] = [-3 * scale, scale // 2, 3]  # 3 rows: below the floor of 4
    hist[0, 1] = [0, scale, 10]
    hist[0, 2] = [4 * scale, scale, 10]
    cand = sb.best_split(hist, np.array([0]), sb.BoostParams(min_child_weight=0.1), floor=4)
    assert cand is not None and cand.bin == 1
    heavy = sb.BoostParams(min_child_weight=1.6)
    assert sb.best_split(hist, np.array([0]), heavy, floor=4) is None


def test_auc_close_to_a_centralised_histogram_booster() -> None:
    xtr, xte, ytr, yte = split_data()
    params = sb.BoostParams(trees=20, depth=3, learning_rate=0.3, bins=32)
    booster = sb.fit([xtr[:, :10], xtr[:, 10:]], ytr, params)
    ours = roc_auc_score(yte, booster.predict_proba([xte[:, :10], xte[:, 10:]]))
    central = HistGradientBoostingClassifier(
        max_iter=20,
        max_depth=3,
        learning_rate=0.3,
        max_bins=32,
        l2_regularization=1.0,
        early_stopping=False,
        min_samples_leaf=4,
    ).fit(xtr, ytr)
    theirs = roc_auc_score(yte, central.predict_proba(xte)[:, 1])
    assert ours > 0.97
    assert abs(ours - theirs) < 0.02


def test_grouping_columns_does_not_change_the_model() -> None:
    xtr, xte, ytr, _ = split_data()
    params = sb.BoostParams(trees=3, depth=3)
    one = sb.fit([xtr], ytr, params)
    three = sb.fit([xtr[:, :10], xtr[:, 10:20], xtr[:, 20:]], ytr, params)
    assert np.array_equal(
        one.margin([xte]), three.margin([xte[:, :10], xte[:, 10:20], xte[:, 20:]])
    )


def test_subsample_and_colsample_are_seeded_and_used() -> None:
    xtr, _, ytr, _ = split_data()
    params = sb.BoostParams(trees=4, subsample=0.5, colsample=0.3, seed=3)
    a = sb.fit([xtr[:, :10], xtr[:, 10:]], ytr, params)
    b = sb.fit([xtr[:, :10], xtr[:, 10:]], ytr, params)
    assert a.trees == b.trees
    rows = sb.tree_rows(params, 0, 100)
    assert len(rows) == 50 and len(set(rows.tolist())) == 50
    cols = sb.tree_features(params, 1, 0, 10)
    assert len(cols) == 3
    for t, tree in enumerate(a.trees):
        used = {(n.group, n.feature) for n in tree.values() if not n.leaf}
        for group, feature in used:
            assert feature in sb.tree_features(params, t, group, 10 if group == 0 else 20)


def test_early_stopping_keeps_the_best_prefix() -> None:
    xtr, xte, ytr, yte = split_data()
    params = sb.BoostParams(trees=60, depth=3, learning_rate=1.0, early_stopping_rounds=3)
    booster = sb.fit([xtr], ytr, params, valid=([xte], yte))
    losses = [r["valid_logloss"] for r in booster.history]
    assert len(booster.trees) < 60
    assert len(booster.trees) == int(np.argmin(losses)) + 1
