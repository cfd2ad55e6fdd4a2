"""SecureBoost with a hidden instance space (``[model] instance_space = "hidden"``).

A guest never learns which rows are in a node that another party split. Per level the
Host names the open nodes in ``boost_masked`` and sends, per *lane* of up to ``k``
*direct* nodes (``k`` bin sums per plaintext, common.Layout), one fresh ciphertext per
row of the tree: the row's step-1 plaintext ``P`` shifted into the slot of its node,
``P · 2^(slot·i)`` for the lane's ``i``-th node, or ``0`` if the row is in none of the
lane's nodes. One lane holds every direct node of a level until ``2^(L−1) > k``, so a
level costs one encryption per row whatever its number of nodes. The guest's bin
products over every row of the tree then hold, slot by slot, each direct node's bin
sums; it packs them lane by lane (``⌊k/m⌋`` blocks of a lane's ``m`` slots per
plaintext) and answers for the direct nodes only. The Host takes a right child whose
left sibling is direct as parent − sibling on the decrypted histograms (it holds
both), so no ciphertext is spent on it. The root's sums are over the tree's
``boost_gradients``. A split is selected obliviously (oblivious.py): the Host reads
the won candidate's left set over every training and held-out row without telling
the guest, and intersects it with the node. No ``boost_partition`` goes to the
guests. With ``host_check`` every lane holds one node (``k = 1``): each lane
ciphertext is then ``[[P]]`` in slot 0 or ``[[0]]``, what proofs.py proves per node.

No slot overflows into the next: a slot sums the rows of one node only, at most the
tree's rows, which is what the field widths of common.Layout allow; a lane's plaintext
stays below ``2^(slot·m) ≤ 2^(|n|−1)``.

The guest cannot count a node's rows here (the counts are inside the ciphertexts), so
the row floor is the Host's alone to keep (docs/security.md, "Vertical SecureBoost"),
unless the job asks for the Host check: then the Host proves each mask and opens each
direct node's count (proofs.py).
This module holds the rules both sides share; the guest's handler (``on_masked``) is
in guest.py, beside the sums it builds on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from privfl.errors import ProtocolError
from privfl.learning.secureboost import Histogram
from privfl.parties.vertical.secureboost.common import Layout, unpack_sums


def sibling(node: int) -> int:
    return node + 1 if node % 2 else node - 1


def direct_nodes(nodes: Sequence[int]) -> list[int]:
    """The nodes the Host sends ciphertexts for: all but right children of a named left one.

    The rule depends on the node ids alone (never on row counts), so the choice itself
    tells a guest nothing about the nodes' sizes.
    """
    named = set(nodes)
    return [n for n in sorted(named) if n != 0 and not (n % 2 == 0 and n - 1 in named)]


def lane_width(layout: Layout, checked: bool) -> int:
    """Nodes per lane: ``k``, or 1 with the Host check (each lane ciphertext is then
    ``[[P]]`` in slot 0 or ``[[0]]``, what proofs.py's masked proof shows)."""
    return 1 if checked else layout.per_ciphertext


def lanes(direct: Sequence[int], layout: Layout, checked: bool = False) -> list[list[int]]:
    """The direct nodes in lanes of :func:`lane_width` (one ciphertext per row and lane);
    the root alone."""
    if not direct:
        return [[0]]
    per = lane_width(layout, checked)
    return [list(direct[i : i + per]) for i in range(0, len(direct), per)]


def masked_bound(depth: int, layout: Layout, checked: bool = False) -> int:
    """Masked ciphertexts per tree row of a full tree: ``⌈2^(L−1) / w⌉`` at each level
    ``L ≥ 1``, ``w`` the :func:`lane_width`."""
    per = lane_width(layout, checked)
    return sum(-(-(1 << (level - 1)) // per) for level in range(1, depth))


def level_plaintexts(
    plain: Sequence[int],
    tree_rows: np.ndarray,
    rows: Mapping[int, np.ndarray],
    lanes_: Sequence[Sequence[int]],
    slot: int,
) -> list[int]:
    """Lane-major, then in the tree's row order: ``P·2^(slot·i)`` in the row's node, else 0."""
    out: list[int] = []
    for lane in lanes_:
        where = np.full(len(tree_rows), -1, np.int64)
        for i, node in enumerate(lane):
            where[np.searchsorted(tree_rows, rows[node])] = i
        at = where.tolist()
        out += [p << (slot * i) if i >= 0 else 0 for p, i in zip(plain, at, strict=True)]
    return out


def histogram_count(lanes_: Sequence[Sequence[int]], sums: int, layout: Layout) -> int:
    """``boost_histogram`` ciphertexts of a level: ``Σ ⌈columns·bins / ⌊k/m⌋⌉`` over its lanes."""
    return sum(layout.packed(sums, len(lane)) for lane in lanes_)


def unpack_level(
    plain: Sequence[int], lanes_: Sequence[Sequence[int]], shape: tuple[int, int], layout: Layout
) -> dict[int, Histogram]:
    """The decrypted histogram of each direct node, ``(columns, bins, 3)``, lane after lane."""
    if len(plain) != histogram_count(lanes_, shape[0] * shape[1], layout):
        raise ProtocolError(f"{len(plain)} histogram ciphertexts do not fit the level's lanes")
    out: dict[int, Histogram] = {}
    at = 0
    for lane in lanes_:
        count = layout.packed(shape[0] * shape[1], len(lane))
        flat = unpack_sums(plain[at : at + count], shape[0] * shape[1], layout, len(lane))
        at += count
        block = flat.reshape(*shape, len(lane), 3)
        for i, node in enumerate(lane):
            out[node] = np.ascontiguousarray(block[:, :, i, :])
    return out


def derive(hists: dict[int, Histogram], nodes: Sequence[int], direct: Sequence[int]) -> None:
    """The Host's right children: parent − left sibling, bin by bin (both decrypted already)."""
    for node in nodes:
        if node not in direct and node != 0:
            hists[node] = hists[(node - 1) // 2] - hists[sibling(node)]


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
