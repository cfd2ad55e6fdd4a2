"""The kit's column-sample check on its own: known histograms, no processes (§6.9).

tests/tools/conformance/test_boost_conformance.py runs it against real guests; here the
histograms are built in memory, so each wrong rule's name is checked in milliseconds.
"""

from __future__ import annotations

import numpy as np
import pytest

from privfl.learning import secureboost as sb
from privfl.parties.vertical.secureboost.common import Layout
from privfl.tools.conformance.boost_columns import (
    WRONG_RULES,
    ColumnRule,
    check_columns,
    check_count,
    named_rule,
)
from privfl.tools.conformance.peer import Report

PARAMS = sb.BoostParams(colsample=0.66, seed=0, bins=8)  # §6.9's worked example
ROWS = 60


def rule(binned: np.ndarray | None = None) -> ColumnRule:
    return ColumnRule(PARAMS, 0, 1, 10, binned)


def demo() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(5)
    x = rng.normal(size=(ROWS, 10))
    binned = sb.bin_columns(x, sb.quantile_edges(x, PARAMS.bins))
    return binned, rng.integers(-1000, 1000, ROWS), rng.integers(0, 250, ROWS)


def test_the_worked_example_and_each_wrong_rule_by_name() -> None:
    assert rule().expected == [0, 2, 3, 4, 5, 6, 8]
    for name, wrong in WRONG_RULES.items():
        seen = wrong(PARAMS, 0, 1, 10)
        assert named_rule(seen, PARAMS, 0, 1, 10) == ("" if seen == rule().expected else name)
    assert named_rule([0, 1, 2, 3, 4, 5, 6], PARAMS, 0, 1, 10) == "the first K columns"
    assert named_rule([0, 2, 3, 5, 6, 7, 9], PARAMS, 0, 1, 10).startswith("entropy [seed, tree,")
    assert named_rule([0, 1, 2, 3, 4, 5, 9], PARAMS, 0, 1, 10).startswith("entropy [seed, tree]")
    assert named_rule([0, 2, 3, 4, 5, 6, 8], PARAMS, 0, 1, 10) == ""


@pytest.mark.parametrize(("columns", "ok"), [(7, True), (6, False)])
def test_the_count_is_checked_from_the_length_and_a_floor_is_named(columns: int, ok: bool) -> None:
    report, layout = Report(), Layout(ROWS, 512)
    got = layout.packed(columns * PARAMS.bins)

    check_count(report, 0, got, 1, layout, rule())

    ((name, passed, detail),) = report.checks
    assert passed is ok and "= 7 columns" in name
    assert ("the floor" in detail) is not ok


@pytest.mark.parametrize(
    ("columns", "named"),
    [
        ([0, 2, 3, 4, 5, 6, 8], ""),
        ([0, 1, 2, 3, 4, 5, 6], "the first K columns"),
        ([0, 2, 3, 5, 6, 7, 9], "entropy [seed, tree, group]"),
        ([8, 6, 5, 4, 3, 2, 0], "holds columns [8, 6, 5, 4, 3, 2, 0]"),
    ],
)
def test_the_blocks_are_the_draw_in_order(columns: list[int], named: str) -> None:
    # Prepare: the guest's histogram of the root over these columns
    binned, g, h = demo()
    rows = np.arange(ROWS)
    hist = sb.histogram(binned[:, columns], g, h, PARAMS.bins)
    report = Report()

    # Act
    check_columns(report, 0, {0: (rows, hist)}, rule(binned), g, h)

    # Assert
    edges, (name, passed, detail) = report.checks
    assert edges[1] and "tree 0's column sample [0, 2, 3, 4, 5, 6, 8]" in name
    assert passed is (named == "") and named in detail


def test_blocks_of_other_bin_edges_are_named_before_the_draw() -> None:
    binned, g, h = demo()
    hist = sb.histogram(np.minimum(binned[:, [0, 2, 3, 4, 5, 6, 8]] + 1, 7), g, h, PARAMS.bins)
    report = Report()

    check_columns(report, 0, {0: (np.arange(ROWS), hist)}, rule(binned), g, h)

    ((name, passed, _),) = report.checks
    assert not passed and "binned by §6.9's edges" in name


def test_a_guest_on_its_own_data_is_not_checked() -> None:
    report = Report()

    check_columns(report, 0, {}, rule(None), np.zeros(0), np.zeros(0))

    assert report.checks == []
