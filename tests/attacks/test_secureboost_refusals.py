"""A curious SecureBoost Host cannot make a guest sum a hand-picked or tiny set of rows.

The guest derives every node's rows itself (the tree's row sample and its partitions),
refuses nodes it was not told of, repeats, nodes or split children below the row
floor, and splits on columns it does not use; it refuses trees past the job's
``trees``, a row sample other than the job seed's, levels out of order and nodes of a
tree whose decisions were asked. The Host refuses a histogram of another size than
the job implies. Each refusal is a ProtocolError that ends the session.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from helpers import failures, memory_job, party_data, run_in_threads

from privfl.config.vertical import JobConfig, ModelConfig
from privfl.crypto.paillier import generate_keypair
from privfl.crypto.pools import NoisePool
from privfl.errors import PeerAborted, PrivflError, ProtocolError
from privfl.learning import secureboost as sb
from privfl.parties.vertical.secureboost import guest as guest_mod
from privfl.parties.vertical.secureboost import host as host_mod
from privfl.parties.vertical.secureboost.common import Layout, params_of, row_plaintexts
from privfl.parties.vertical.secureboost.guest import GuestBoost, step
from privfl.protocol import fresh
from privfl.protocol.boost_messages import (
    BoostDecide,
    BoostGradients,
    BoostNodes,
    BoostPartition,
    BoostSplit,
)
from privfl.protocol.memory import InMemoryHub

KEY = generate_keypair(512)


def guest_state(
    rows: int = 40, min_child_weight: float = 1.0, trees: int = 10, subsample: float = 1.0
) -> GuestBoost:
    job = memory_job(1)
    data = party_data(job)["guest-1"]
    data = replace(data, x_train=data.x_train[:rows])
    params = sb.BoostParams(
        trees=trees, depth=3, bins=8, min_child_weight=min_child_weight, subsample=subsample
    )
    public = KEY[0]
    return GuestBoost(data=data, key=public, params=params, group=1, noise=NoisePool(public.n, 1))


def gradients(
    state: GuestBoost, tree: int = 0, rows: int | None = None, positions: np.ndarray | None = None
) -> BoostGradients:
    at = np.arange(rows or len(state.data.x_train), dtype=np.int64)
    at = at if positions is None else positions
    layout = Layout(len(at), state.key.bits)
    plain = row_plaintexts(np.zeros(len(at), np.int64), np.full(len(at), 1000, np.int64), layout)
    return BoostGradients(tree, at, fresh.encrypt(state.key, plain))


def nodes(*ids: int, level: int = 0, tree: int = 0) -> BoostNodes:
    return BoostNodes(tree, level, np.array(ids, dtype=np.int64))


def test_an_honest_sequence_is_answered() -> None:
    state = guest_state()
    step(state, gradients(state))
    assert step(state, nodes(0)) is not None
    left = np.arange(40) < 20
    assert step(state, BoostPartition(0, 0, left)) is None
    assert step(state, nodes(1, 2, level=1)) is not None


def test_a_node_the_partitions_never_defined_is_refused() -> None:
    state = guest_state()
    step(state, gradients(state))
    step(state, nodes(0))  # the root is never partitioned: node 1 has no rows yet
    with pytest.raises(ProtocolError, match="not open"):
        step(state, nodes(1, level=1))


def test_the_same_node_twice_is_refused() -> None:
    state = guest_state()
    step(state, gradients(state))
    step(state, nodes(0))
    with pytest.raises(ProtocolError, match="out of order"):
        step(state, nodes(0))


def test_a_partition_with_a_tiny_child_is_refused() -> None:
    state = guest_state()
    step(state, gradients(state))
    step(state, nodes(0))
    one_row = np.zeros(40, dtype=bool)
    one_row[7] = True  # a one-row child: parent − sibling would be row 7's gradient
    with pytest.raises(ProtocolError, match="fewer than 4 rows"):
        step(state, BoostPartition(0, 0, one_row))


def test_a_tree_over_too_few_rows_is_refused() -> None:
    state = guest_state()
    with pytest.raises(ProtocolError, match="training rows"):
        step(state, gradients(state, rows=3))


def test_the_floor_follows_min_child_weight() -> None:
    state = guest_state(min_child_weight=5.0)
    step(state, gradients(state))
    step(state, nodes(0))
    left = np.arange(40) < 15  # 15 rows: above 4, below ⌈4·5⌉ = 20
    with pytest.raises(ProtocolError, match="fewer than 20 rows"):
        step(state, BoostPartition(0, 0, left))


def test_split_on_a_column_or_bin_out_of_range_is_refused() -> None:
    state = guest_state()
    step(state, gradients(state))
    step(state, nodes(0))
    with pytest.raises(ProtocolError, match="not ours"):
        step(state, BoostSplit(0, 0, 99, 1))
    with pytest.raises(ProtocolError, match="not ours"):
        step(state, BoostSplit(0, 0, 0, 7))  # bins - 1: nothing would go right


def test_out_of_order_trees_and_future_decisions_are_refused() -> None:
    state = guest_state()
    with pytest.raises(ProtocolError, match="expected tree 0"):
        step(state, gradients(state, tree=1))
    step(state, gradients(state))
    with pytest.raises(ProtocolError, match="not due"):
        step(state, BoostDecide(1, 1, "test"))
    with pytest.raises(ProtocolError, match="not due"):
        step(state, BoostDecide(0, 1, "rows"))


def test_gradients_of_the_wrong_length_are_refused() -> None:
    state = guest_state()
    msg = gradients(state)
    short = BoostGradients(0, msg.rows[:-1], msg.values)
    with pytest.raises(ProtocolError, match="ciphertexts for"):
        step(state, short)


def test_the_host_refuses_a_histogram_of_another_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = replace(
        memory_job(1, timeout=30.0),
        model=ModelConfig(kind="secureboost", trees=1, depth=2, bins=8, instance_space="shared"),
    )
    honest = guest_mod.on_nodes

    def padded(state: GuestBoost, msg: BoostNodes):  # type: ignore[no-untyped-def]
        reply = honest(state, msg)
        extra = fresh.encrypt(state.key, [1])
        longer = fresh.rerandomize(state.key, [*reply.values.values, *extra.values])
        return replace(reply, values=longer)

    monkeypatch.setattr(guest_mod, "on_nodes", padded)
    results = run_in_threads(job, InMemoryHub(), tmp_path)
    host_error = failures(results).get("host")
    assert isinstance(host_error, PrivflError)
    assert "histogram ciphertexts" in str(host_error)


def test_a_tree_past_the_jobs_trees_is_refused() -> None:
    state = guest_state(trees=1)
    step(state, gradients(state))
    step(state, BoostDecide(0, 1, "train"))
    with pytest.raises(ProtocolError, match="job with 1 trees"):
        step(state, gradients(state, tree=1))


def test_a_row_sample_other_than_the_seeds_is_refused() -> None:
    state = guest_state(subsample=0.5)
    seeds = sb.tree_rows(state.params, 0, 40)
    with pytest.raises(ProtocolError, match="row sample"):
        step(state, gradients(state, positions=np.arange(20, dtype=np.int64)))
    with pytest.raises(ProtocolError, match="row sample"):  # every row is not the sample either
        step(state, gradients(state))
    step(state, gradients(state, positions=seeds))  # the seed's own sample is answered
    assert step(state, nodes(0)) is not None


def test_levels_out_of_order_are_refused() -> None:
    state = guest_state()
    step(state, gradients(state))
    step(state, nodes(0))
    step(state, BoostPartition(0, 0, np.arange(40) < 20))
    with pytest.raises(ProtocolError, match="out of order"):
        step(state, nodes(3, level=2))  # level 1 skipped


def test_a_split_of_an_earlier_level_is_refused() -> None:
    state = guest_state()
    step(state, gradients(state))
    step(state, nodes(0))
    step(state, BoostPartition(0, 0, np.arange(40) < 20))
    step(state, nodes(1, 2, level=1))
    step(state, BoostPartition(0, 1, np.arange(20) < 10))
    step(state, nodes(3, 4, level=2))
    with pytest.raises(ProtocolError, match="cannot be split now"):  # node 2 is a level-1 leaf
        step(state, BoostPartition(0, 2, np.arange(20) < 10))


def test_nodes_of_a_tree_whose_decisions_were_asked_are_refused() -> None:
    state = guest_state()
    step(state, gradients(state))
    step(state, nodes(0))
    step(state, BoostDecide(0, 1, "train"))  # the Host has grown tree 0: it has no more nodes
    with pytest.raises(ProtocolError, match="cannot be split now"):
        step(state, BoostPartition(0, 0, np.arange(40) < 20))


@pytest.mark.parametrize("deviation", ["more_trees", "other_rows"])
def test_a_deviating_host_is_refused_and_the_session_stops(
    deviation: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = replace(
        memory_job(1, timeout=60.0),
        model=ModelConfig(kind="secureboost", trees=2, depth=1, bins=8, instance_space="shared"),
    )
    honest = params_of

    def deviating(job: JobConfig) -> sb.BoostParams:  # the Host's own settings only
        params = honest(job)
        if deviation == "more_trees":  # one tree more than the job: one more root histogram
            return replace(params, trees=params.trees + 1)
        return replace(params, subsample=0.5)  # rows of its choosing, not the seed's

    monkeypatch.setattr(host_mod, "params_of", deviating)
    results = run_in_threads(job, InMemoryHub(), tmp_path)
    guest_error = failures(results).get("guest-1")
    assert isinstance(guest_error, ProtocolError)
    expected = "job with 2 trees" if deviation == "more_trees" else "row sample"
    assert expected in str(guest_error)
    assert isinstance(failures(results).get("host"), PeerAborted)
