"""Histogram gradient boosting for binary labels: the plain reference that SecureBoost matches.

The federated trees of ``parties/vertical/secureboost`` are built by the same
:func:`grow_tree` with the same fixed-point gradients, so they equal this booster's
trees split for split. Only where the histograms come from differs: here every
feature group is a :class:`LocalColumns`; in the federated run a guest's group
answers over the network with encrypted per-bin sums the Host decrypts.

Conventions (both sides):

- Each feature has exactly ``bins`` bins. Its ``bins - 1`` edges are quantiles of the
  training column (duplicates allowed, they only leave bins empty); a value goes to
  bin ``#edges < x``, and the split "bin ``b``" sends ``x <= edges[b]`` left.
- Gradients of the logistic loss, ``g = p - y`` and ``h = p(1 - p)``, are rounded to
  ``2^-FRAC_BITS`` (:func:`quantize`), so histogram sums are exact integers and the
  gains computed from them are bit-identical wherever they are computed.
- A node splits if it is above ``depth``, holds at least ``2 * floor`` rows and some
  split has positive gain with both children holding ``Σh >= min_child_weight`` and at
  least ``floor`` rows (:func:`node_floor`); ties go to the first party, feature, bin.
- Trees use heap numbering: the root is 0, the children of ``i`` are ``2i+1, 2i+2``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from privfl.learning.taylor import sigmoid

FRAC_BITS = 20
"""Fixed-point precision of g and h: |g| <= 1 and 0 <= h <= 1/4 at 2^-20."""

MIN_NODE_ROWS = 4
"""No histogram is ever computed over fewer rows than this (docs/security.md)."""


@dataclass(frozen=True, slots=True)
class BoostParams:
    """The tree hyper-parameters of ``[model]`` (config.vertical.ModelConfig) and the seed."""

    trees: int = 10
    depth: int = 3
    learning_rate: float = 0.3
    bins: int = 32
    l2: float = 1.0
    gamma: float = 0.0
    min_child_weight: float = 1.0
    subsample: float = 1.0
    colsample: float = 1.0
    early_stopping_rounds: int = 0
    seed: int = 0


def node_floor(min_child_weight: float) -> int:
    """The fewest rows a node may have: ``max(4, ⌈4·min_child_weight⌉)`` (h <= 1/4 per row)."""
    return max(MIN_NODE_ROWS, math.ceil(4 * min_child_weight))


def quantile_edges(x: np.ndarray, bins: int) -> np.ndarray:
    """``(features, bins - 1)`` bin edges: quantiles of each training column."""
    q = np.arange(1, bins) / bins
    edges: np.ndarray = np.quantile(x, q, axis=0, method="linear").T.copy()
    return edges


def bin_columns(x: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Bin index ``#edges < x`` of every value, as int64 ``(rows, features)``."""
    out = np.empty(x.shape, dtype=np.int64)
    for j in range(x.shape[1]):
        out[:, j] = np.searchsorted(edges[j], x[:, j], side="left")
    return out


def quantize(values: np.ndarray) -> np.ndarray:
    """Round to ``2^-FRAC_BITS`` as int64, clipped to ``|v| <= 1`` (gradients and hessians)."""
    scale = 1 << FRAC_BITS
    out: np.ndarray = np.clip(np.rint(values * scale), -scale, scale).astype(np.int64)
    return out


def gradients(margin: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Quantised ``g = p - y`` and ``h = p(1 - p)`` of the logistic loss at ``margin``."""
    p = sigmoid(margin)
    return quantize(p - labels), quantize(p * (1.0 - p))


def base_margin(labels: np.ndarray) -> float:
    """The starting score: the log-odds of the training labels' mean (clipped away from 0, 1)."""
    mean = float(np.clip(np.mean(labels), 1e-6, 1 - 1e-6))
    return math.log(mean / (1.0 - mean))


def tree_rows(params: BoostParams, tree: int, rows: int) -> np.ndarray:
    """The training rows of one tree (row subsample; public seed), sorted."""
    if params.subsample >= 1.0:
        return np.arange(rows, dtype=np.int64)
    size = max(1, round(params.subsample * rows))
    rng = np.random.default_rng([params.seed, tree])
    return np.sort(rng.choice(rows, size=size, replace=False)).astype(np.int64)


def tree_features(params: BoostParams, tree: int, group: int, features: int) -> np.ndarray:
    """The columns group ``group`` (0 = Host, then the guests in job order) uses in a tree."""
    if params.colsample >= 1.0 or features == 0:
        return np.arange(features, dtype=np.int64)
    size = max(1, round(params.colsample * features))
    rng = np.random.default_rng([params.seed, tree, 1 + group])
    return np.sort(rng.choice(features, size=size, replace=False)).astype(np.int64)


Histogram = np.ndarray
"""int64 ``(features, bins, 3)``: per bin the sums of quantised g, of quantised h, and the count."""


def histogram(binned: np.ndarray, g: np.ndarray, h: np.ndarray, bins: int) -> Histogram:
    """Exact per-bin sums over some rows: ``binned`` (rows, features), ``g`` and ``h`` int64."""
    features = binned.shape[1]
    out = np.zeros((features, bins, 3), dtype=np.int64)
    for j in range(features):
        col = binned[:, j]
        np.add.at(out[j, :, 0], col, g)
        np.add.at(out[j, :, 1], col, h)
        out[j, :, 2] = np.bincount(col, minlength=bins)
    return out


@dataclass(frozen=True, slots=True)
class Candidate:
    """The best split of one group at one node."""

    gain: float
    feature: int  # the group's own column index
    bin: int


def score(g_sum: np.ndarray, h_sum: np.ndarray, l2: float) -> np.ndarray:
    """``G² / (H + λ)`` at the fixed-point scale (ints in, floats out)."""
    scale = float(1 << FRAC_BITS)
    g = g_sum / scale
    return g * g / (h_sum / scale + l2)


def best_split(
    hist: Histogram, features: np.ndarray, params: BoostParams, floor: int
) -> Candidate | None:
    """The split of largest gain over ``features`` (rows of ``hist``), or None if none is valid."""
    if hist.shape[0] == 0:
        return None
    cum = np.cumsum(hist, axis=1)
    total = cum[:, -1:, :]
    left, right = cum[:, :-1, :], total - cum[:, :-1, :]
    gain = (
        0.5
        * (
            score(left[..., 0], left[..., 1], params.l2)
            + score(right[..., 0], right[..., 1], params.l2)
            - score(total[..., 0], total[..., 1], params.l2)
        )
        - params.gamma
    )
    scale = float(1 << FRAC_BITS)
    valid = (
        (left[..., 1] / scale >= params.min_child_weight)
        & (right[..., 1] / scale >= params.min_child_weight)
        & (left[..., 2] >= floor)
        & (right[..., 2] >= floor)
        & (gain > 0)
    )
    if not valid.any():
        return None
    gain = np.where(valid, gain, -np.inf)
    flat = int(np.argmax(gain))  # first maximum: lowest feature, then lowest bin
    row, b = divmod(flat, gain.shape[1])
    return Candidate(float(gain[row, b]), int(features[row]), int(b))


def leaf_value(g_sum: int, h_sum: int, params: BoostParams) -> float:
    """``-lr · G / (H + λ)`` of a leaf's rows."""
    scale = float(1 << FRAC_BITS)
    return -params.learning_rate * (g_sum / scale) / (h_sum / scale + params.l2)


class Group(Protocol):
    """One party's columns as the tree builder sees them: histograms and partitions."""

    def features(self, tree: int) -> np.ndarray:
        """The group's columns in this tree (its column sample)."""
        ...

    def ask(self, tree: int, level: int, nodes: dict[int, np.ndarray]) -> None:
        """Start the histograms of ``nodes`` (node id -> sorted training rows)."""
        ...

    def histograms(self) -> dict[int, Histogram]:
        """The histograms asked for, ``(len(features), bins, 3)`` per node."""
        ...

    def propose(self, tree: int, node: int, feature: int, bin_: int) -> None:
        """The group owns the winning split of ``node``: start it (``split`` collects it).

        Every winning split of a level is proposed before the first is collected, so a
        remote group answers them back to back instead of one round trip each.
        """
        ...

    def split(self, tree: int, node: int, rows: np.ndarray, feature: int, bin_: int) -> np.ndarray:
        """The proposed split's result: a bool mask over ``rows``, True = left."""
        ...

    def reveal(self, tree: int, nodes: list[int]) -> None:
        """Every split node of the level, in order, before any split is collected
        (a hidden-space guest gets one decryption request per node, won or not)."""
        ...

    def learn(self, tree: int, node: int, left: np.ndarray) -> None:
        """Another group split ``node``: here is the partition of its rows (True = left)."""
        ...


@dataclass
class LocalColumns:
    """A group whose binned columns and gradients are at hand (the reference, the Host's own)."""

    binned: np.ndarray
    params: BoostParams
    group: int
    g: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    h: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    _asked: dict[int, np.ndarray] = field(default_factory=dict)
    _tree: int = 0

    def set_gradients(self, g: np.ndarray, h: np.ndarray) -> None:
        self.g, self.h = g, h

    def features(self, tree: int) -> np.ndarray:
        return tree_features(self.params, tree, self.group, self.binned.shape[1])

    def ask(self, tree: int, level: int, nodes: dict[int, np.ndarray]) -> None:
        self._asked, self._tree = dict(nodes), tree

    def histograms(self) -> dict[int, Histogram]:
        cols = self.features(self._tree)
        bins = self.params.bins
        return {
            node: histogram(self.binned[np.ix_(rows, cols)], self.g[rows], self.h[rows], bins)
            for node, rows in self._asked.items()
        }

    def propose(self, tree: int, node: int, feature: int, bin_: int) -> None:
        return None

    def split(self, tree: int, node: int, rows: np.ndarray, feature: int, bin_: int) -> np.ndarray:
        mask: np.ndarray = self.binned[rows, feature] <= bin_
        return mask

    def reveal(self, tree: int, nodes: list[int]) -> None:
        return None

    def learn(self, tree: int, node: int, left: np.ndarray) -> None:
        return None


@dataclass(frozen=True, slots=True)
class Node:
    """One node of a tree: a split (owner group, its column, bin) or a leaf (value)."""

    group: int = -1  # -1: leaf
    feature: int = -1
    bin: int = -1
    gain: float = 0.0
    value: float = 0.0

    @property
    def leaf(self) -> bool:
        return self.group < 0


Tree = dict[int, Node]


def grow_tree(
    tree: int,
    rows: np.ndarray,
    g: np.ndarray,
    h: np.ndarray,
    groups: Sequence[Group],
    params: BoostParams,
) -> Tree:
    """Build one tree level by level; every histogram comes from the groups."""
    floor = node_floor(params.min_child_weight)
    nodes: Tree = {}
    frontier: dict[int, np.ndarray] = {0: rows}
    for level in range(params.depth + 1):
        open_ = {n: r for n, r in frontier.items() if level < params.depth and len(r) >= 2 * floor}
        for n, r in frontier.items():
            if n not in open_:
                nodes[n] = Node(value=leaf_value(int(g[r].sum()), int(h[r].sum()), params))
        if not open_:
            break
        for group in groups:
            group.ask(tree, level, open_)
        hists = [group.histograms() for group in groups]
        frontier = {}
        winners: dict[int, tuple[int, Candidate]] = {}
        for n, r in open_.items():
            best: tuple[int, Candidate] | None = None
            for index, group in enumerate(groups):
                cand = best_split(hists[index][n], group.features(tree), params, floor)
                if cand is not None and (best is None or cand.gain > best[1].gain):
                    best = (index, cand)
            if best is None:
                nodes[n] = Node(value=leaf_value(int(g[r].sum()), int(h[r].sum()), params))
                continue
            winners[n] = best
            groups[best[0]].propose(tree, n, best[1].feature, best[1].bin)
        for group in groups:
            group.reveal(tree, list(winners))
        for n, (index, cand) in winners.items():
            r = open_[n]
            left = groups[index].split(tree, n, r, cand.feature, cand.bin)
            for other, group in enumerate(groups):
                if other != index:
                    group.learn(tree, n, left)
            nodes[n] = Node(group=index, feature=cand.feature, bin=cand.bin, gain=cand.gain)
            frontier[2 * n + 1], frontier[2 * n + 2] = r[left], r[~left]
    return nodes


def route(tree: Tree, decide: dict[int, np.ndarray], rows: int) -> np.ndarray:
    """Leaf value per row, given every split node's left mask over the rows."""
    out = np.zeros(rows)
    stack: list[tuple[int, np.ndarray]] = [(0, np.arange(rows))]
    while stack:
        n, idx = stack.pop()
        node = tree[n]
        if node.leaf:
            out[idx] = node.value
            continue
        left = decide[n][idx]
        stack.append((2 * n + 1, idx[left]))
        stack.append((2 * n + 2, idx[~left]))
    return out


def local_decisions(tree: Tree, group: int, x_binned: np.ndarray) -> dict[int, np.ndarray]:
    """Left masks of a group's own split nodes for binned rows."""
    return {
        n: x_binned[:, node.feature] <= node.bin for n, node in tree.items() if node.group == group
    }


def logloss(labels: np.ndarray, margin: np.ndarray) -> float:
    """Mean logistic loss of margins (the early-stopping metric)."""
    return float(np.mean(np.logaddexp(0.0, margin) - labels * margin))


@dataclass
class Booster:
    """The plain booster over column groups (group 0 is the label holder's)."""

    params: BoostParams
    base: float = 0.0
    trees: list[Tree] = field(default_factory=list)
    edges: list[np.ndarray] = field(default_factory=list)
    history: list[dict[str, float]] = field(default_factory=list)

    def margin(self, x_groups: Sequence[np.ndarray]) -> np.ndarray:
        """Raw scores of rows given as one array per group."""
        binned = [bin_columns(x, e) for x, e in zip(x_groups, self.edges, strict=True)]
        rows = len(x_groups[0])
        out = np.full(rows, self.base)
        for tree in self.trees:
            decide: dict[int, np.ndarray] = {}
            for index, b in enumerate(binned):
                decide.update(local_decisions(tree, index, b))
            out += route(tree, decide, rows)
        return out

    def predict_proba(self, x_groups: Sequence[np.ndarray]) -> np.ndarray:
        return sigmoid(self.margin(x_groups))


def fit(
    x_groups: Sequence[np.ndarray],
    labels: np.ndarray,
    params: BoostParams,
    valid: tuple[Sequence[np.ndarray], np.ndarray] | None = None,
) -> Booster:
    """Train on column groups (first = the label holder's); early stopping on ``valid``."""
    booster = Booster(params=params, base=base_margin(labels))
    booster.edges = [quantile_edges(x, params.bins) for x in x_groups]
    groups = [
        LocalColumns(bin_columns(x, e), params, i)
        for i, (x, e) in enumerate(zip(x_groups, booster.edges, strict=True))
    ]
    margin = np.full(len(labels), booster.base)
    valid_margin = None if valid is None else np.full(len(valid[1]), booster.base)
    best, best_trees = math.inf, 0
    for t in range(params.trees):
        g, h = gradients(margin, labels)
        for group in groups:
            group.set_gradients(g, h)
        tree = grow_tree(t, tree_rows(params, t, len(labels)), g, h, groups, params)
        booster.trees.append(tree)
        decide: dict[int, np.ndarray] = {}
        for group in groups:
            decide.update(local_decisions(tree, group.group, group.binned))
        margin += route(tree, decide, len(labels))
        if valid is None or valid_margin is None:
            continue
        valid_margin += _tree_margin(booster, tree, valid[0])
        loss = logloss(valid[1], valid_margin)
        booster.history.append({"tree": t, "valid_logloss": loss})
        if loss < best:
            best, best_trees = loss, t + 1
        elif params.early_stopping_rounds and t + 1 - best_trees >= params.early_stopping_rounds:
            break
    if valid is not None and params.early_stopping_rounds:
        booster.trees = booster.trees[:best_trees]
    return booster


def _tree_margin(booster: Booster, tree: Tree, x_groups: Sequence[np.ndarray]) -> np.ndarray:
    """One tree's leaf values for rows given per group."""
    decide: dict[int, np.ndarray] = {}
    for index, (x, e) in enumerate(zip(x_groups, booster.edges, strict=True)):
        decide.update(local_decisions(tree, index, bin_columns(x, e)))
    return route(tree, decide, len(x_groups[0]))


def feature_importance(trees: Sequence[Tree]) -> dict[tuple[int, int], float]:
    """Total gain per (group, column) over every split."""
    out: dict[tuple[int, int], float] = {}
    for tree in trees:
        for node in tree.values():
            if not node.leaf:
                key = (node.group, node.feature)
                out[key] = out.get(key, 0.0) + node.gain
    return out
