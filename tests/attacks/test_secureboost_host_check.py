"""Attack: a deviating SecureBoost Host reads guest cells; the Host check refuses it.

Two Hosts, each in both instance-space modes:

- **Marker Host.** It encrypts ``2^j`` for row ``j`` instead of ``(g + 2^F, h, 1)``;
  each bin sum of the root histogram is then the bit set of the rows in that bin, so
  it reads every marked row's bin in every guest column (the leaky arm, check off).
  With ``host_check`` it must prove each row's plaintext bit by bit; the best it can
  do is to prove the honest rows' bits beside its markers, and the guest's check that
  each ciphertext is its proven bits' sum refuses the tree before any histogram.
- **One-row-node Host.** In hidden mode its masked vector of a direct node keeps one
  row (the leaky arm: that row's bin in every column). With the check the Host opens
  each direct node's row count: an honest opening shows 1 < floor, a false one fails.
  In the shared mode the guest counts the partitions itself and refuses such a child.

Every refusal is one ProtocolError line that names the Host. The trees here take a
10 % row sample (43 rows) so that a 512-bit proof runs in about a second.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from helpers import decoded_traffic, failures, memory_job, party_data, run_in_threads

from privfl.config.vertical import ModelConfig
from privfl.crypto.paillier import generate_keypair
from privfl.crypto.pools import NoisePool
from privfl.errors import PeerAborted, ProtocolError
from privfl.learning import secureboost as sb
from privfl.parties.vertical.secureboost import common, hidden, proofs
from privfl.parties.vertical.secureboost import host as host_mod
from privfl.parties.vertical.secureboost.common import Layout, row_plaintexts, unpack_sums
from privfl.parties.vertical.secureboost.guest import GuestBoost, step
from privfl.protocol import fresh
from privfl.protocol.boost_messages import (
    BoostGradients,
    BoostHistogram,
    BoostMasked,
    BoostNodes,
    BoostPartition,
    BoostProof,
)
from privfl.protocol.memory import InMemoryHub

KEY = generate_keypair(512)
GUEST = "guest-1"
SAMPLE = 0.1  # a tenth of the rows per tree: quick proofs
SPACES = ["shared", "hidden"]


def guest(space: str, check: bool) -> GuestBoost:
    data = party_data(memory_job(1))[GUEST]
    params = sb.BoostParams(trees=3, depth=3, bins=8, subsample=SAMPLE)
    public = KEY[0]
    state = GuestBoost(data=data, key=public, params=params, group=1, noise=NoisePool(public.n, 1))
    state.hidden = space == "hidden"
    state.check = proofs.Bounds() if check else None
    return state


def tree_rows(state: GuestBoost) -> np.ndarray:
    return sb.tree_rows(state.params, 0, len(state.data.x_train))


def honest_plain(rows: int) -> list[int]:
    g = np.linspace(-(1 << 19), 1 << 19, rows).astype(np.int64)
    return row_plaintexts(g, np.full(rows, 1 << 17, np.int64), Layout(rows, KEY[0].bits))


def root_nodes(state: GuestBoost) -> BoostNodes | BoostMasked:
    zero = np.zeros(1, np.int64)
    if state.hidden:
        return BoostMasked(0, 0, zero, np.zeros(0, np.int64), fresh.encrypt(KEY[0], []))
    return BoostNodes(0, 0, zero)


def read_markers(state: GuestBoost, reply: BoostHistogram, marked: int) -> np.ndarray:
    """The attacker: each marked row's bin in every guest column, from the root's sums."""
    rows, bins = len(tree_rows(state)), state.params.bins
    layout = Layout(rows, KEY[0].bits)
    packed = KEY[1].decrypt(reply.values.values)
    columns = state.binned["train"].shape[1]
    sums = [
        (int(p) >> (layout.slot * k)) & ((1 << layout.slot) - 1)
        for p in packed
        for k in range(layout.per_ciphertext)
    ][: columns * bins]
    read = np.full((marked, columns), -1)
    for index, value in enumerate(sums):
        column, bin_ = divmod(index, bins)
        for j in range(marked):
            if value >> j & 1:
                read[j, column] = bin_
    return read


# --- the marker Host ---------------------------------------------------------------


@pytest.mark.parametrize("space", SPACES)
def test_leaky_arm_a_marker_host_reads_guest_cells_without_the_check(space: str) -> None:
    state = guest(space, check=False)
    rows = tree_rows(state)
    markers = [1 << j for j in range(len(rows))]  # 43 rows: all fit one 72-bit slot
    step(state, BoostGradients(0, rows, fresh.encrypt(KEY[0], markers)))
    reply = step(state, root_nodes(state))
    assert isinstance(reply, BoostHistogram)

    read = read_markers(state, reply, len(rows))

    truth = state.binned["train"][rows]
    assert np.array_equal(read, truth)  # every cell of every row of the tree
    print(f"{space}: read {read.size} guest cells from one tree's root")


@pytest.mark.parametrize("space", SPACES)
def test_a_marker_host_is_refused_by_the_check(space: str) -> None:
    state = guest(space, check=True)
    rows = tree_rows(state)
    markers = fresh.encrypt(KEY[0], [1 << j for j in range(len(rows))])
    step(state, BoostGradients(0, rows, markers))
    # its best proof: the bits of honest rows, beside the marker ciphertexts
    honest = honest_plain(len(rows))
    layout = Layout(len(rows), KEY[0].bits)
    forged = proofs.prove_rows(KEY[1], 0, markers.values, honest, layout, proofs.Bounds())

    with pytest.raises(ProtocolError, match=r"the host deviated.*not the sum of its proven bits"):
        step(state, forged)
    with pytest.raises(ProtocolError, match=r"the host deviated.*before proving its rows"):
        step(state, root_nodes(state))  # and no histogram without a proof that holds


def test_an_honest_host_passes_the_check_and_is_answered() -> None:
    state = guest("hidden", check=True)
    rows = tree_rows(state)
    plain = honest_plain(len(rows))
    cts = fresh.encrypt(KEY[0], plain)
    step(state, BoostGradients(0, rows, cts))
    layout = Layout(len(rows), KEY[0].bits)
    assert (
        step(state, proofs.prove_rows(KEY[1], 0, cts.values, plain, layout, proofs.Bounds()))
        is None
    )

    assert isinstance(step(state, root_nodes(state)), BoostHistogram)


def test_a_proof_of_a_bit_that_is_two_fails() -> None:
    from privfl.crypto import sigma

    public, private = KEY
    two = public.encrypt([2])[0]
    pair = (two, two * ((1 - public.n) % public.nsquare) % public.nsquare)
    for claim in (0, 1):  # whichever branch it claims, no proof verifies
        forged = sigma.prove_or(private, [pair], [claim], b"ctx")
        assert not sigma.verify_or(public, [pair], forged, b"ctx")


# --- the one-row-node Host ---------------------------------------------------------


def hidden_start(state: GuestBoost) -> tuple[np.ndarray, list[int], tuple[int, ...]]:
    rows = tree_rows(state)
    plain = honest_plain(len(rows))
    cts = fresh.encrypt(KEY[0], plain)
    step(state, BoostGradients(0, rows, cts))
    if state.check is not None:
        layout = Layout(len(rows), KEY[0].bits)
        step(state, proofs.prove_rows(KEY[1], 0, cts.values, plain, layout, proofs.Bounds()))
    step(state, root_nodes(state))
    return rows, plain, cts.values


def parents(cts: tuple[int, ...]) -> list[int]:
    """Level 1's parent indicators: the root's, every row in."""
    return proofs.root_flags(KEY[0], len(cts))


def one_row_level(plain: list[int], target: int) -> tuple[BoostMasked, list[int]]:
    inside = [int(i == target) for i in range(len(plain))]
    values = fresh.encrypt(
        KEY[0], [p if keep else 0 for p, keep in zip(plain, inside, strict=True)]
    )
    ids = np.array([1, 2], np.int64)
    return BoostMasked(0, 1, ids, ids[:1], values), inside


def test_leaky_arm_a_one_row_node_reads_that_rows_cells_without_the_check() -> None:
    state = guest("hidden", check=False)
    rows, plain, _ = hidden_start(state)
    target = 7
    msg, _ = one_row_level(plain, target)
    reply = step(state, msg)
    assert isinstance(reply, BoostHistogram)

    layout = Layout(len(rows), KEY[0].bits)
    width, bins = state.binned["train"].shape[1], state.params.bins
    # the direct node 1 alone, one lane of one node (the Host derives node 2)
    assert reply.nodes.tolist() == [1]
    sums = unpack_sums(KEY[1].decrypt(reply.values.values), width * bins, layout)
    counts = sums[:, 2].reshape(width, bins)

    assert (counts.argmax(axis=1) == state.binned["train"][rows[target]]).all()
    assert (counts.sum(axis=1) == 1).all()  # that row's bin in every guest column


def test_a_one_row_node_is_refused_by_the_check() -> None:
    state = guest("hidden", check=True)
    _, plain, cts = hidden_start(state)
    msg, inside = one_row_level(plain, 7)
    assert step(state, msg) is None  # held until its proof
    proof = proofs.prove_masked(KEY[1], 0, 1, cts, msg.values.values, inside, parents(cts))

    with pytest.raises(ProtocolError, match=r"the host deviated.*node 1 .* holds 1 rows"):
        step(state, proof)


def test_a_one_row_node_with_a_false_count_is_refused() -> None:
    state = guest("hidden", check=True)
    _, plain, cts = hidden_start(state)
    msg, inside = one_row_level(plain, 7)
    step(state, msg)
    proof = proofs.prove_masked(KEY[1], 0, 1, cts, msg.values.values, inside, parents(cts))
    lied = replace(proof, counts=np.array([20], np.int64))  # claims 20 rows

    with pytest.raises(ProtocolError, match=r"the host deviated.*row count it opened"):
        step(state, lied)


def test_a_one_row_sibling_is_refused_by_the_check() -> None:
    state = guest("hidden", check=True)
    rows, plain, cts = hidden_start(state)
    inside = [int(i != 3) for i in range(len(rows))]  # node 1: all but one: node 2 has 1
    values = fresh.encrypt(
        KEY[0], [p if keep else 0 for p, keep in zip(plain, inside, strict=True)]
    )
    ids = np.array([1, 2], np.int64)
    step(state, BoostMasked(0, 1, ids, ids[:1], values))

    with pytest.raises(ProtocolError, match=r"node 2 .* holds 1 rows"):
        step(state, proofs.prove_masked(KEY[1], 0, 1, cts, values.values, inside, parents(cts)))


def test_a_one_row_node_is_refused_in_the_shared_mode() -> None:
    state = guest("shared", check=True)
    rows, _, _ = hidden_start(state)

    with pytest.raises(ProtocolError, match="fewer than"):
        step(state, BoostPartition(0, 0, np.arange(len(rows)) == 7))


# --- end to end: the real Host's code, deviating --------------------------------------


def test_under_the_check_every_lane_holds_one_node(tmp_path: Path) -> None:
    # Arrange: an honest hidden-mode run with the check, and the lane rule itself
    layout = Layout(100, KEY[0].bits)
    assert [len(lane) for lane in hidden.lanes([1, 3, 5], layout, True)] == [1, 1, 1]
    assert hidden.masked_bound(3, layout, True) == 1 + 2
    model = ModelConfig(
        kind="secureboost",
        trees=1,
        depth=3,
        bins=8,
        subsample=0.25,
        instance_space="hidden",
        host_check=True,
        min_child_weight=1,
    )
    job = replace(memory_job(1, timeout=60.0), model=model)
    hub = InMemoryHub()

    # Act
    results = run_in_threads(job, hub, tmp_path)

    # Assert: one masked ciphertext per row and direct node, each proven, the run whole
    assert not failures(results), failures(results)
    bodies = [b for _, _, _, b in decoded_traffic(hub)]
    rows = next(len(b.rows) for b in bodies if isinstance(b, BoostGradients))
    masked = [b for b in bodies if isinstance(b, BoostMasked) and len(b.direct)]
    proven = {b.level: b for b in bodies if isinstance(b, BoostProof) and b.level > 0}
    assert any(len(b.direct) > 1 for b in masked)
    for b in masked:
        assert len(b.values) == len(b.direct) * rows
        assert len(proven[b.level].counts) == len(b.direct)


@pytest.mark.parametrize("space", SPACES)
def test_a_marker_host_is_refused_end_to_end(
    space: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    honest_rows = common.row_plaintexts
    honest_prove = proofs.prove_rows
    truth: dict[int, list[int]] = {}

    def markers(g: np.ndarray, h: np.ndarray, layout: Layout) -> list[int]:
        truth[layout.rows] = honest_rows(g, h, layout)
        return [1 << j for j in range(len(g))]

    def prove(key, tree, cts, plain, layout, bounds):  # type: ignore[no-untyped-def]
        return honest_prove(key, tree, cts, truth[layout.rows], layout, bounds)

    monkeypatch.setattr(host_mod, "row_plaintexts", markers)
    monkeypatch.setattr(proofs, "prove_rows", prove)
    model = ModelConfig(
        kind="secureboost",
        trees=1,
        depth=3,
        bins=8,
        subsample=SAMPLE,
        instance_space=space,
        host_check=True,
    )
    job = replace(memory_job(1, timeout=60.0), model=model)

    results = run_in_threads(job, InMemoryHub(), tmp_path)

    refused = failures(results).get(GUEST)
    assert isinstance(refused, ProtocolError)
    line = str(refused)
    assert "\n" not in line and line.startswith("the host deviated from the protocol")
    assert isinstance(failures(results).get("host"), PeerAborted)


def test_a_node_with_rows_outside_its_parent_is_refused() -> None:
    # Nodes that are not subsets of their parents let a Host difference two nodes of
    # one tree that differ in one row (both above the floor); the check ties each
    # direct node's rows to its parent's indicators.
    state = guest("hidden", check=True)
    _, plain, cts = hidden_start(state)
    rows = len(plain)
    first = [int(i < 20) for i in range(rows)]  # node 1: rows 0-19, node 2: the rest
    level1 = fresh.encrypt(KEY[0], [p if k else 0 for p, k in zip(plain, first, strict=True)])
    ids = np.array([1, 2], np.int64)
    step(state, BoostMasked(0, 1, ids, ids[:1], level1))
    proof = proofs.prove_masked(KEY[1], 0, 1, cts, level1.values, first, parents(cts))
    assert isinstance(step(state, proof), BoostHistogram)
    stray = [int(i < 10 or i == 30) for i in range(rows)]  # node 3: row 30 is node 2's
    level2 = fresh.encrypt(KEY[0], [p if k else 0 for p, k in zip(plain, stray, strict=True)])
    ids = np.array([3, 4], np.int64)
    step(state, BoostMasked(0, 2, ids, ids[:1], level2))
    node1 = list(proof.values.values)
    forged = proofs.prove_masked(KEY[1], 0, 2, cts, level2.values, stray, node1)

    with pytest.raises(ProtocolError, match="within the parent node"):
        step(state, forged)
