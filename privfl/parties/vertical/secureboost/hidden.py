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
the row floor is the Host's alone to keep (docs/security.md, "Vertical SecureBoost"),
unless the job asks for the Host check: then the Host proves each mask and opens each
direct node's count (proofs.py).
This module holds the rules both sides share; the guest's handler (``on_masked``) is
in guest.py, beside the sums it builds on.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from privfl.errors import ProtocolError


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
