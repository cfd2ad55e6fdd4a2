"""SecureBoost with a hidden instance space (``[model] instance_space = "hidden"``).

A guest never learns which rows are in a node that another party split. Per level the
Host names the open nodes in ``boost_masked`` and sends, for each *direct* node, one
fresh ciphertext per row of the tree: the row's ``[[g, h, 1]]`` if the row is in the
node, a fresh ``[[0]]`` otherwise, so a guest's bin sums over every row of the tree are
the node's histogram. A right child whose left sibling is direct is derived as parent
÷ sibling (no ciphertexts sent for it). The root's are the tree's ``boost_gradients``.
A guest that wins a split returns its column's left set over every row of the tree;
the Host intersects it with the node. No ``boost_partition`` goes to the guests.

The guest cannot count a node's rows here (the counts are inside the ciphertexts), so
the row floor is the Host's alone to keep (docs/security.md, "Vertical SecureBoost").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from privfl.errors import ProtocolError
from privfl.parties.vertical.secureboost.guest import (
    GuestBoost,
    TreeState,
    answer,
    differences,
    level_of,
    next_level,
    summed,
    tree_of,
)
from privfl.protocol.boost_messages import BoostHistogram, BoostMasked


def sibling(node: int) -> int:
    return node + 1 if node % 2 else node - 1


def direct_nodes(nodes: Sequence[int]) -> list[int]:
    """The nodes the Host sends ciphertexts for: all but right children of a named left one.

    The rule depends on the node ids alone (never on row counts), so the choice itself
    tells a guest nothing about the nodes' sizes.
    """
    named = set(nodes)
    return [n for n in sorted(named) if n != 0 and not (n % 2 == 0 and n - 1 in named)]


def masked_bound(depth: int) -> int:
    """Direct nodes of a full tree: ``2^(L−1)`` at each level ``L`` from 1 to ``depth − 1``."""
    return (1 << (depth - 1)) - 1


def masked_plaintexts(plain: Sequence[int], tree_rows: np.ndarray, node: np.ndarray) -> list[int]:
    """The tree's row plaintexts with every row outside ``node`` set to 0."""
    inside = np.isin(tree_rows, node)
    return [p if keep else 0 for p, keep in zip(plain, inside.tolist(), strict=True)]


def node_left(
    guest: str, left: np.ndarray, tree_rows: np.ndarray, node: np.ndarray, floor: int
) -> np.ndarray:
    """A guest's left set over the tree's rows, cut to the node's rows (ascending)."""
    if len(left) != len(tree_rows):
        raise ProtocolError(
            f"{guest} sent a partition of {len(left)} rows; the tree has {len(tree_rows)}"
        )
    mask: np.ndarray = left[np.searchsorted(tree_rows, node)]
    if min(int(mask.sum()), int((~mask).sum())) < floor:
        raise ProtocolError(f"{guest}'s split leaves a child below {floor} rows")
    return mask


def on_masked(state: GuestBoost, msg: BoostMasked) -> BoostHistogram:
    """The named nodes' encrypted histograms from masked row ciphertexts (and differences)."""
    t = tree_of(state, msg.tree)
    if not state.hidden:
        raise ProtocolError(
            "the job shares the instance space: the host must name nodes by boost_nodes; "
            "check that both parties run the same job file"
        )
    if msg.level >= state.params.depth:
        raise ProtocolError(f"level {msg.level} is below the job's depth {state.params.depth}")
    next_level(t, msg.level)
    nodes, direct = msg.nodes.tolist(), msg.direct.tolist()
    for node in nodes:
        check_named(t, node, msg.level, set(direct))
    rows = len(t.rows)
    if len(msg.values) != len(direct) * rows:
        raise ProtocolError(
            f"{len(msg.values)} masked ciphertexts for {len(direct)} nodes of {rows} rows"
        )
    state.key.check_ciphertexts(msg.values.values)
    values = msg.values.values
    work: list[tuple[np.ndarray, Sequence[int]]] = [
        (t.rows, values[i * rows : (i + 1) * rows]) for i in range(len(direct))
    ]
    if nodes == [0]:
        direct, work = [0], [(t.rows, t.cts)]  # the root: the tree's own gradients
    t.sums.update(summed(state, t, direct, work))
    derived = [(n, sibling(n)) for n in nodes if n not in set(direct)]
    t.sums.update(differences(state, t, derived))
    return answer(state, t, msg.level, msg.nodes)


def check_named(t: TreeState, node: int, level: int, direct: set[int]) -> None:
    """A node of this level, new, whose parent we summed; derived only from a direct sibling.

    Level 0 is the root alone, from the tree's gradients (never direct).
    """
    parent = (node - 1) // 2
    fits = level_of(node) == level and node not in t.sums
    if node == 0:
        fits = fits and not direct
    elif parent not in t.sums or (node not in direct and sibling(node) not in direct):
        fits = False
    if not fits:
        raise ProtocolError(f"node {node} of tree {t.tree} is not open at level {level}")
