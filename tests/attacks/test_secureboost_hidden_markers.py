"""Attack: a deviating Host marks rows at every level of a hidden-mode tree, at the defaults.

The job defaults (hidden instance space, depth 3, 32 bins, no Host check) let a Host
choose the plaintext of every masked ciphertext of ``boost_masked``, as of
``boost_gradients``: the guest can neither see them nor count a node's rows. A Host
that encrypts ``2^j`` for its ``j``-th marked row gets, in each bin sum, the bit set of
the marked rows in that bin — their bins in every guest column — from each *direct*
histogram, not only the root's: one slot of rows at the root, one at level 1 (node 1;
node 2 is derived) and two at level 2 (nodes 3 and 5 share a lane of two slots), so
``4 · slot`` rows per tree against ``slot`` in the shared mode, whose nodes re-use the
tree's row ciphertexts (test_secureboost_host_reads_bins.py). On the 426-row demo
(``slot`` = 69) that is 276 rows a tree and every row by the second tree.

Defended arm: with ``host_check`` each masked ciphertext is proven ``[[0]]`` or the
row's own ciphertext, so the same marked lane is refused before any histogram.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import memory_job, party_data

from privfl.config.vertical import ModelConfig
from privfl.crypto.paillier import generate_keypair
from privfl.crypto.pools import NoisePool
from privfl.errors import ProtocolError
from privfl.learning import secureboost as sb
from privfl.parties.vertical.secureboost import proofs
from privfl.parties.vertical.secureboost.common import Layout, row_plaintexts
from privfl.parties.vertical.secureboost.guest import GuestBoost, step
from privfl.protocol import fresh
from privfl.protocol.boost_messages import BoostGradients, BoostHistogram, BoostMasked

KEY = generate_keypair(512)
GUEST = "guest-1"
DEFAULTS = ModelConfig(kind="secureboost")
# (level, named nodes, direct nodes, slots per row): a full tree of the default depth
LEVELS = [(0, [0], [], 1), (1, [1, 2], [1], 1), (2, [3, 4, 5, 6], [3, 5], 2)]


def guest(check: bool, subsample: float = 1.0) -> GuestBoost:
    data = party_data(memory_job(1))[GUEST]
    m = DEFAULTS
    params = sb.BoostParams(
        trees=m.trees,
        depth=m.depth,
        bins=m.bins,
        min_child_weight=m.min_child_weight,
        subsample=subsample,
    )
    state = GuestBoost(
        data=data, key=KEY[0], params=params, group=1, noise=NoisePool(KEY[0].n, 1), hidden=True
    )
    state.check = proofs.Bounds() if check else None
    return state


def markers(first: int, rows: int, width: int) -> list[int]:
    """``2^j`` for rows ``first … first + width − 1`` (wrapping), 0 for every other row."""
    out = [0] * rows
    for j in range(min(width, rows)):
        out[(first + j) % rows] = 1 << j
    return out


def read(state: GuestBoost, reply: BoostHistogram, span: int) -> np.ndarray:
    """The attacker: ``(span·slot, columns)`` bins of the marked rows, -1 where none."""
    t = state.current
    assert t is not None
    layout, bins, columns = t.layout, state.params.bins, len(t.features)
    width = span * layout.slot
    per = layout.blocks(span)
    sums = [
        (int(p) >> (width * k)) & ((1 << width) - 1)
        for p in KEY[1].decrypt(reply.values.values)
        for k in range(per)
    ][: columns * bins]
    out = np.full((width, columns), -1)
    for index, value in enumerate(sums):
        column, bin_ = divmod(index, bins)
        for j in range(width):
            if value >> j & 1:
                out[j, column] = bin_
    return out


def marked_tree(state: GuestBoost, tree: int, first: int) -> dict[int, np.ndarray]:
    """One tree of marked levels; each marked row -> its bins as read from the histograms."""
    rows = len(state.data.x_train)
    slot = Layout(rows, KEY[0].bits).slot
    plain = markers(first, rows, slot)
    at = np.arange(rows, dtype=np.int64)
    step(state, BoostGradients(tree, at, fresh.encrypt(KEY[0], plain)))
    got: dict[int, np.ndarray] = {}
    for level, named, direct, span in LEVELS:
        if level:
            plain = markers(first, rows, span * slot)
        values = fresh.encrypt(KEY[0], plain if level else [])
        msg = BoostMasked(tree, level, np.array(named), np.array(direct, np.int64), values)
        reply = step(state, msg)
        assert isinstance(reply, BoostHistogram)  # answered: nothing to refuse
        for j, bins_ in enumerate(read(state, reply, span)):
            if j < rows:
                got[(first + j) % rows] = bins_
        first += span * slot
    return got


def test_leaky_arm_a_marker_host_reads_four_slots_of_rows_per_hidden_tree() -> None:
    state = guest(check=False)
    rows = len(state.data.x_train)
    slot = Layout(rows, KEY[0].bits).slot

    first_tree = marked_tree(state, 0, 0)
    second_tree = marked_tree(state, 1, 4 * slot)

    truth = state.binned["train"]
    for row, bins_ in {**first_tree, **second_tree}.items():
        assert np.array_equal(bins_, truth[row]), row
    assert len(first_tree) == min(rows, 4 * slot)  # 276 of 426: slot 69, 4 direct histograms
    read_rows = set(first_tree) | set(second_tree)
    assert read_rows == set(range(rows))  # every row by the second of the job's 10 trees
    print(
        f"hidden, defaults: {len(first_tree)} rows ({len(first_tree) * truth.shape[1]} cells) "
        f"in tree 1; all {rows} rows ({rows * truth.shape[1]} cells) after 2 trees; "
        f"slot {slot}"
    )


def test_a_marked_lane_is_refused_under_the_host_check() -> None:
    state = guest(check=True, subsample=0.1)  # 43 rows: a 512-bit proof in about a second
    rows = sb.tree_rows(state.params, 0, len(state.data.x_train))
    layout = Layout(len(rows), KEY[0].bits)
    g = np.linspace(-(1 << 19), 1 << 19, len(rows)).astype(np.int64)
    plain = row_plaintexts(g, np.full(len(rows), 1 << 17, np.int64), layout)
    cts = fresh.encrypt(KEY[0], plain)
    step(state, BoostGradients(0, rows, cts))
    step(state, proofs.prove_rows(KEY[1], 0, cts.values, plain, layout, proofs.Bounds()))
    step(state, BoostMasked(0, 0, np.array([0]), np.zeros(0, np.int64), fresh.encrypt(KEY[0], [])))
    marked = fresh.encrypt(KEY[0], markers(0, len(rows), layout.slot))
    ids = np.array([1, 2], np.int64)
    assert step(state, BoostMasked(0, 1, ids, ids[:1], marked)) is None  # held for its proof
    inside = [1] * len(rows)  # its best claim: every row in node 1 as itself
    forged = proofs.prove_masked(
        KEY[1], 0, 1, cts.values, marked.values, inside, proofs.root_flags(KEY[0], len(rows))
    )

    with pytest.raises(
        ProtocolError, match=r"^the host deviated from the protocol: .*\(host check\)"
    ):
        step(state, forged)
