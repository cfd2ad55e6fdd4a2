"""Null weights and the unpinning swaps (learning/pinning.py), with known answers."""

from __future__ import annotations

import numpy as np

from privfl.learning.pinning import PIN, null_weights, pinned, unpin


def test_a_column_constant_but_on_one_row_pins_that_row_with_the_bias() -> None:
    # Prepare: 6 rows, a generic column, a column 0 but on row 2, the bias.
    x = np.column_stack([np.arange(6.0) ** 2, np.eye(6)[2] * 3.0, np.ones(6)])

    # Act
    weights = null_weights(x)

    # Assert: row 2 is exactly determined; the others keep 6 − 3 open directions between them.
    # √(1 − h_ii): a rounding error of 1e-16 in h_ii shows as ~1e-8, so the bound is 1e-6
    # (far under PIN = 1e-3); 1e-12 failed on one BLAS build (1.8e-8 seen).
    assert weights[2] < 1e-6
    assert np.all(np.delete(weights, 2) > PIN)
    assert np.isclose(np.sum(weights**2), 6 - 3)  # the trace of I − H


def test_unpin_keeps_the_sizes_and_the_rows_and_pins_none() -> None:
    # Prepare: a rare category (rows 0 and 1 only) falls in two different batches.
    rng = np.random.default_rng(0)
    x = np.column_stack([rng.normal(size=(40, 3)), np.zeros(40), np.ones(40)])
    x[[0, 1], 3] = 1.0
    plan: list[np.ndarray | None] = [np.arange(0, 40, 2), np.arange(1, 40, 2)]
    assert pinned(x, plan) == 2

    # Act
    fixed = unpin(x, plan)

    # Assert: the same rows in batches of the same sizes, none pinned, deterministic.
    assert [len(b) for b in fixed if b is not None] == [20, 20]
    assert sorted(np.concatenate([b for b in fixed if b is not None]).tolist()) == list(range(40))
    assert pinned(x, fixed) == 0
    again = unpin(x, plan)
    assert all(np.array_equal(a, b) for a, b in zip(fixed, again, strict=True))  # type: ignore[arg-type]
