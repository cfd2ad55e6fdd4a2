"""Which columns a SecureBoost guest's histogram holds, and the wrong rules the kit names.

docs/protocol.md §6.9 (*Columns of a tree*) fixes a guest's columns of tree ``t`` under
``colsample < 1``: ``K = max(1, round-half-even(colsample·F))`` of them, drawn by
``numpy.random.default_rng([seed, t, 1 + group]).choice(F, K, replace=False)``, sorted.
The kit knows the guest's demo columns, so it can tell which columns each block of a
decrypted histogram is: it compares every block with the histogram of every column over
the node's rows. When they are not the rule's, it names the rule they are, among the ones
an outside implementation has been seen to write.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import click
import numpy as np

from privfl.learning import secureboost as sb
from privfl.parties.vertical.secureboost.common import Layout
from privfl.tools.conformance.peer import Report

Rule = Callable[[sb.BoostParams, int, int, int], list[int]]


def _draw(entropy: list[int], features: int, count: int) -> list[int]:
    rng = np.random.default_rng(entropy)
    return sorted(int(c) for c in rng.choice(features, size=count, replace=False))


def _count(params: sb.BoostParams, features: int) -> int:
    return max(1, round(params.colsample * features))


WRONG_RULES: dict[str, Rule] = {
    "the first K columns": lambda p, t, g, f: list(range(_count(p, f))),
    "K = ⌊colsample·F⌋ (floor, not round half to even)": lambda p, t, g, f: _draw(
        [p.seed, t, 1 + g], f, max(1, math.floor(p.colsample * f))
    ),
    "K = ⌈colsample·F⌉ (ceiling, not round half to even)": lambda p, t, g, f: _draw(
        [p.seed, t, 1 + g], f, max(1, math.ceil(p.colsample * f))
    ),
    "entropy [seed, tree, group] (not 1 + group)": lambda p, t, g, f: _draw(
        [p.seed, t, g], f, _count(p, f)
    ),
    "entropy [seed, tree] (the row sample's)": lambda p, t, g, f: _draw(
        [p.seed, t], f, _count(p, f)
    ),
}


@dataclass(frozen=True)
class ColumnRule:
    """One guest's columns in one tree, and (demo data) its columns binned as §6.9 bins them."""

    params: sb.BoostParams
    tree: int
    group: int
    features: int
    binned: np.ndarray | None = None  # (training rows, features); None: the guest's own data

    @property
    def expected(self) -> list[int]:
        """The group's columns of the tree as §6.9 defines them."""
        return [int(c) for c in sb.tree_features(self.params, self.tree, self.group, self.features)]

    def candidates(self, rows: np.ndarray, g: np.ndarray, h: np.ndarray) -> np.ndarray:
        """Every column's own histogram ``(F, bins, 3)`` over ``rows`` (needs ``binned``)."""
        assert self.binned is not None
        return sb.histogram(self.binned[rows], g[rows], h[rows], self.params.bins)


def named_rule(
    seen: list[int], params: sb.BoostParams, tree: int, group: int, features: int
) -> str:
    """The wrong rule that gives ``seen`` (columns in the guest's histogram order), or ''.

    A rule that happens to give §6.9's own columns here (a ceiling that is the rounding)
    names nothing.
    """
    right = sb.tree_features(params, tree, group, features).tolist()
    for name, rule in WRONG_RULES.items():
        if rule(params, tree, group, features) == seen != right:
            return name
    return ""


def identify(blocks: np.ndarray, candidates: np.ndarray) -> list[int]:
    """Per histogram block ``(bins, 3)``, the first column whose histogram equals it, or -1.

    ``blocks``: the guest's ``(columns, bins, 3)``; ``candidates``: every column's own
    ``(F, bins, 3)`` over the same rows and gradients.
    """
    out = []
    for block in blocks:
        same = np.flatnonzero((candidates == block).all(axis=(1, 2)))
        out.append(int(same[0]) if same.size else -1)
    return out


def check_count(
    report: Report, level: int, got: int, nodes: int, layout: Layout, column: ColumnRule
) -> None:
    """Under ``colsample < 1``: the histogram's length holds ``K`` columns, §6.9's count."""
    params, features = column.params, column.features
    if params.colsample >= 1 or features == 0:
        if level == 0 and features > 1:
            click.echo(
                "NOTE  colsample = 1 gives the guest every column: its colsample draw "
                "(§6.9) is not exercised; make the kit with --colsample 0.66 to check it"
            )
        return
    want = len(column.expected)
    fits = [c for c in range(1, features + 1) if layout.packed(nodes * c * params.bins) == got]
    name = ""
    for label, count in (
        ("⌊colsample·F⌋, the floor", max(1, math.floor(params.colsample * features))),
        ("⌈colsample·F⌉, the ceiling", max(1, math.ceil(params.colsample * features))),
    ):
        if count != want and fits == [count]:
            name = f" — K = {label}, not round half to even"
    report.check(
        f"level {level}: the histogram holds K = max(1, round(colsample·F)) = {want} columns "
        f"per node (§6.9 columns of a tree: {params.colsample}·{features}, half to even)",
        want in fits,
        f"its length fits {fits or 'no whole number of'} columns{name}",
    )


def check_columns(
    report: Report,
    level: int,
    hists: dict[int, tuple[np.ndarray, np.ndarray]],
    column: ColumnRule,
    g: np.ndarray,
    h: np.ndarray,
) -> None:
    """Each block of each node's histogram is the histogram of §6.9's column, in order.

    ``hists``: node -> (its rows, the guest's decrypted ``(columns, bins, 3)``), checked
    against every demo column's own histogram over those rows under the kit's ``g``, ``h``.
    Nothing is checked for a guest on its own data (``column.binned`` is None).
    """
    if column.binned is None:
        return
    want = column.expected
    for node, (rows, blocks) in hists.items():
        candidates = column.candidates(rows, g, h)
        seen = identify(blocks, candidates)
        if not report.check(
            f"level {level}: node {node}'s histogram blocks are columns binned by §6.9's "
            "edges (numpy.quantile linear of the standardised training rows; #edges < x)",
            -1 not in seen,
            f"block(s) {[i for i, c in enumerate(seen) if c == -1]} match no column's bins",
        ):
            return
        ok = all((blocks[i] == candidates[c]).all() for i, c in enumerate(want))
        if not ok:
            name = named_rule(seen, column.params, column.tree, column.group, column.features)
            rule = f" — {name}" if name else ""
            report.check(
                f"level {level}: the histogram's columns are tree {column.tree}'s column "
                f"sample {want} (§6.9: default_rng([seed, tree, 1 + group]), sorted)",
                False,
                f"node {node} holds columns {seen}{rule}",
            )
            return
    report.check(
        f"level {level}: the histogram's columns are tree {column.tree}'s column sample {want} "
        "(§6.9: default_rng([seed, tree, 1 + group]), sorted)",
        True,
    )
