"""The SecureBoost guest: bins its own columns, answers the Host's nodes with encrypted histograms.

What it never sends: a bin edge, a threshold, a value of its columns. What it refuses
(each a ProtocolError that ends the session, tests/attacks/test_secureboost_refusals.py):
a node it was not told of by the tree's own partitions, a node twice, a node or a
split child below the row floor (``node_floor``), a split on a column it does not use
in that tree, gradients of the wrong length or an out-of-order tree, a tree past the
job's ``trees``, a row sample other than the job seed's, a level out of order, a split
or partition of a node not of the level last asked, and any node of a tree after its
decisions were asked (``closed``). With a hidden instance space (hidden.py) it
refuses ``boost_nodes``, ``boost_split``, ``boost_partition`` and ``boost_decide``, and
anything ``boost_masked`` rules out; it sends its candidate sets once under its own key
and decrypts one ``boost_reveal`` per named node, of the right size (oblivious.py).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privfl.crypto.engine import POOL, Engine
from privfl.crypto.gmp import mpz, powmod
from privfl.crypto.paillier import PublicKey
from privfl.crypto.pools import NoisePool
from privfl.data.views import PartyData
from privfl.errors import ProtocolError
from privfl.learning import secureboost as sb
from privfl.models.registry import model_entry
from privfl.parties import checkpoint
from privfl.parties.files import write_json
from privfl.parties.session import PartyContext
from privfl.parties.vertical.handshake import announce, rows_digest
from privfl.parties.vertical.secureboost import hidden, proofs, reveal
from privfl.parties.vertical.secureboost.binsums import column_sums, multiplications
from privfl.parties.vertical.secureboost.common import Layout, pack_sums, params_of, receive_key
from privfl.parties.vertical.secureboost.ledger import open_ledger
from privfl.protocol import fresh
from privfl.protocol.boost_messages import (
    BoostDecide,
    BoostDecisions,
    BoostGradients,
    BoostHistogram,
    BoostMasked,
    BoostNodes,
    BoostPartition,
    BoostProof,
    BoostReveal,
    BoostRevealed,
    BoostSplit,
)
from privfl.protocol.messages import (
    Finish,
    Kind,
    Message,
)

log = logging.getLogger("privfl.guest")
ACCEPTS = {
    Kind.BOOST_GRADIENTS,
    Kind.BOOST_NODES,
    Kind.BOOST_MASKED,
    Kind.BOOST_SPLIT,
    Kind.BOOST_PARTITION,
    Kind.BOOST_DECIDE,
    Kind.BOOST_PROOF,
    Kind.BOOST_REVEAL,
    Kind.FINISH,
}


def level_of(node: int) -> int:
    """Depth of a heap-numbered node (root 0)."""
    return (node + 1).bit_length() - 1


@dataclass
class TreeState:
    """One tree as this guest knows it: its rows, their ciphertexts, the open nodes."""

    tree: int
    rows: np.ndarray
    cts: Sequence[int]  # as received: plain ints pickle fastest to the workers
    layout: Layout
    features: np.ndarray
    live: dict[int, np.ndarray]  # nodes the partitions define, not yet split: node -> rows
    sums: dict[int, list[int]] = field(default_factory=dict)  # histogrammed nodes' bin sums
    named: set[int] = field(default_factory=set)  # hidden mode: nodes boost_masked named
    done: set[int] = field(default_factory=set)  # split nodes
    level: int = -1  # the level last asked for
    closed: bool = False  # the tree's decisions were asked: it has no more nodes
    checked: bool = True  # host_check: the rows' proof was verified (False until then)
    counts: dict[int, int] = field(default_factory=dict)  # host_check, hidden: node -> rows
    pending: BoostMasked | None = None  # host_check: a boost_masked waiting for its proof
    flags: dict[int, list[int]] = field(default_factory=dict)  # host_check, hidden: [[b]]s


@dataclass
class GuestBoost:
    """The guest's columns (binned by its own edges), key, lookup table and current tree."""

    data: PartyData
    key: PublicKey
    params: sb.BoostParams
    group: int
    noise: NoisePool
    edges: np.ndarray = field(init=False)
    binned: dict[str, np.ndarray] = field(init=False)
    table: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)  # -> (col, bin)
    hidden: bool = False  # the job's instance_space: no node's rows reach us (hidden.py)
    check: proofs.Bounds | None = None  # host_check: the Host proves its rows (proofs.py)
    sets: reveal.GuestSets | None = None  # hidden: our own key, the requests answered
    current: TreeState | None = None
    next_tree: int = 0
    finished: bool = False
    work: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(("additions", "subtractions", "packed", "shifts"), 0)
    )
    work_at: list[dict[str, int]] = field(default_factory=list)  # ``work`` as each tree began

    def __post_init__(self) -> None:
        self.edges = sb.quantile_edges(self.data.x_train, self.params.bins)
        self.binned = {
            "train": sb.bin_columns(self.data.x_train, self.edges),
            "test": sb.bin_columns(self.data.x_test, self.edges),
        }

    @property
    def floor(self) -> int:
        return sb.node_floor(self.params.min_child_weight)


def on_gradients(state: GuestBoost, msg: BoostGradients) -> None:
    """Start a tree: the Host's fresh ``[[g, h, 1]]`` for each of its rows."""
    if msg.tree != state.next_tree:
        raise ProtocolError(f"gradients for tree {msg.tree}, expected tree {state.next_tree}")
    if msg.tree >= state.params.trees:
        raise ProtocolError(
            f"the host started tree {msg.tree + 1} of a job with {state.params.trees} trees"
        )
    rows = msg.rows
    n_train = len(state.data.x_train)
    if len(rows) < state.floor or (len(rows) and rows[-1] >= n_train):
        raise ProtocolError(f"a tree needs {state.floor} to {n_train} training rows")
    if len(msg.values) != len(rows):
        raise ProtocolError(f"{len(msg.values)} gradient ciphertexts for {len(rows)} rows")
    if not np.array_equal(rows, sb.tree_rows(state.params, msg.tree, n_train)):
        raise ProtocolError(
            f"the host's rows of tree {msg.tree} are not the job seed's row sample; "
            f"check that both parties run the same job file"
        )
    state.key.check_ciphertexts(msg.values.values)
    features = sb.tree_features(state.params, msg.tree, state.group, state.binned["train"].shape[1])
    state.current = TreeState(
        tree=msg.tree,
        rows=rows,
        cts=msg.values.values,
        layout=Layout(len(rows), state.key.bits),
        features=features,
        live={0: rows},
        checked=state.check is None,
        counts={0: len(rows)},
        flags={0: proofs.root_flags(state.key, len(rows))} if state.check else {},
    )
    state.next_tree = msg.tree + 1
    state.work_at.append(dict(state.work))


def tree_of(state: GuestBoost, tree: int) -> TreeState:
    if state.current is None or state.current.tree != tree:
        raise ProtocolError(f"tree {tree} is not the tree being built")
    return state.current


def on_nodes(state: GuestBoost, msg: BoostNodes) -> BoostHistogram:
    """Encrypted per-bin sums of the named nodes, packed, re-randomised (one answer per node)."""
    t = tree_of(state, msg.tree)
    if state.hidden:
        raise ProtocolError(
            "the job hides the instance space: the host must name nodes by boost_masked; "
            "check that both parties run the same job file"
        )
    proven(t)
    next_level(t, msg.level)
    nodes = [int(v) for v in msg.nodes]
    for node in nodes:
        if node not in t.live or node in t.sums or level_of(node) != msg.level:
            raise ProtocolError(f"node {node} of tree {t.tree} is not open at level {msg.level}")
        if len(t.live[node]) < state.floor:
            raise ProtocolError(f"node {node} has {len(t.live[node])} rows, fewer than the floor")
    direct, derived = plan(t, nodes)
    t.sums.update(bin_sums(state, t, direct))
    t.sums.update(differences(state, t, derived))
    return answer(state, t, msg.level, msg.nodes)


def proven(t: TreeState) -> None:
    """With host_check, no histogram before the Host proved the tree's rows."""
    if not t.checked:
        raise ProtocolError(
            f"the host deviated from the protocol: it asked for nodes of tree {t.tree} "
            f"before proving its rows (host check); the session stops"
        )


def next_level(t: TreeState, level: int) -> None:
    """A tree still open takes its levels in order, each once."""
    if t.closed or level != t.level + 1:
        raise ProtocolError(
            f"nodes of level {level} of tree {t.tree} are out of order (next: {t.level + 1})"
        )
    t.level = level


def answer(state: GuestBoost, t: TreeState, level: int, nodes: np.ndarray) -> BoostHistogram:
    """The named nodes' bin sums, packed and re-randomised (fresh after our last product)."""
    flat = [c for node in nodes.tolist() for c in t.sums[node]]
    packed = pack_split(state, flat, t.layout)
    state.work["packed"] += len(packed)
    state.work["shifts"] += len(flat) - len(packed)  # Horner: one per sum but the group's last
    values = fresh.rerandomize(state.key, packed, take(state, len(packed)))
    return BoostHistogram(tree=t.tree, level=level, nodes=nodes, values=values)


def plan(t: TreeState, nodes: list[int]) -> tuple[list[int], list[tuple[int, int]]]:
    """Which nodes to sum directly and which to take as parent minus sibling (the larger one)."""
    asked = set(nodes)
    direct: list[int] = []
    derived: list[tuple[int, int]] = []
    for node in nodes:
        sibling = node + 1 if node % 2 else node - 1
        parent = (node - 1) // 2
        if node == 0 or sibling not in asked or parent not in t.sums:
            direct.append(node)
            continue
        mine, theirs = len(t.live[node]), len(t.live[sibling])
        if (mine, node) < (theirs, sibling):
            direct.append(node)
        else:
            derived.append((node, sibling))
    return direct, derived


def spans(count: int, workers: int, unit: int = 1) -> list[tuple[int, int]]:
    """``[lo, hi)`` spans of ``count`` items in whole ``unit``s, one per worker at most."""
    groups = -(-count // unit)
    parts = max(1, min(workers, groups))
    bounds = [min(count, int(b) * unit) for b in np.linspace(0, groups, parts + 1).round()]
    return [(lo, hi) for lo, hi in itertools.pairwise(bounds) if lo < hi]


def bin_sums(state: GuestBoost, t: TreeState, nodes: list[int]) -> dict[int, list[int]]:
    """``Π [[g, h, 1]]`` over each bin of each used column: ``features × bins`` per node.

    Each node's columns are split over the compute workers (each gets the node's
    ciphertexts and its block of binned columns over local pipes), every node of the
    level at once; inline with one worker.
    """
    work = []
    for node in nodes:
        rows = t.live[node]
        at = np.searchsorted(t.rows, rows)
        work.append((rows, [t.cts[i] for i in at.tolist()]))
    return summed(state, t, nodes, work)


def summed(
    state: GuestBoost,
    t: TreeState,
    nodes: list[int],
    work: Sequence[tuple[np.ndarray, Sequence[int]]],
) -> dict[int, list[int]]:
    """Per node, the bin products of its ``(rows, ciphertexts)`` over the compute workers."""
    bins, width = state.params.bins, len(t.features)
    columns = spans(width, state.noise.workers)
    blocks = []
    for rows, cts in work:
        binned = state.binned["train"][np.ix_(rows, t.features)]
        state.work["additions"] += sum(
            multiplications(binned[:, lo:hi], bins) for lo, hi in columns
        )
        blocks += [
            (state.key.nsquare, cts, np.ascontiguousarray(binned[:, lo:hi]), bins)
            for lo, hi in columns
        ]
    return per_node(state.noise.run_split(column_sums, blocks), nodes, width * bins)


def per_node(flat: list[int], nodes: list[int], size: int) -> dict[int, list[int]]:
    """The workers' concatenated answer cut into ``size`` sums per node."""
    return {node: flat[i * size : (i + 1) * size] for i, node in enumerate(nodes)}


def differences(
    state: GuestBoost, t: TreeState, derived: list[tuple[int, int]]
) -> dict[int, list[int]]:
    """Each derived node's sums as parent ÷ sibling, bin by bin, spread over the workers."""
    parents = [c for node, _ in derived for c in t.sums[(node - 1) // 2]]
    smaller = [c for _, sibling in derived for c in t.sums[sibling]]
    # An empty bin's sum is 1 (no ciphertext is): inverting and multiplying by it is free.
    state.work["subtractions"] += sum(1 for c in smaller if c != 1)
    blocks = [
        (state.key.nsquare, parents[lo:hi], smaller[lo:hi])
        for lo, hi in spans(len(parents), state.noise.workers)
    ]
    flat = state.noise.run_split(divide_block, blocks)
    return per_node(flat, [node for node, _ in derived], len(t.features) * state.params.bins)


def divide_block(nsquare: int, parents: list[int], smaller: list[int]) -> list[int]:
    """Worker task: ``p · s⁻¹ mod n²`` for each pair (the sum over the parent's other rows)."""
    n2 = mpz(nsquare)
    return [int(p * powmod(s, -1, n2) % n2) for p, s in zip(parents, smaller, strict=True)]


def pack_split(state: GuestBoost, sums: list[int], layout: Layout, span: int = 1) -> list[int]:
    """:func:`pack_sums` over the compute workers: whole packing groups per block."""
    blocks = [
        (state.key.nsquare, sums[lo:hi], layout.rows, layout.key_bits, span)
        for lo, hi in spans(len(sums), state.noise.workers, layout.blocks(span))
    ]
    return state.noise.run_split(pack_block, blocks)


def pack_block(nsquare: int, sums: list[int], rows: int, key_bits: int, span: int) -> list[int]:
    """Worker task: one block of whole packing groups."""
    return pack_sums(sums, Layout(rows, key_bits), nsquare, span)


def on_split(state: GuestBoost, msg: BoostSplit) -> BoostPartition:
    """We own the best split: keep its threshold to ourselves, return which rows go left."""
    t = tree_of(state, msg.tree)
    if state.hidden:
        raise ProtocolError(
            "the job hides the instance space: the host may not name a split to a guest "
            "(it selects one by boost_reveal); check that both parties run the same job file"
        )
    open_node(t, msg.node)
    if msg.feature not in set(t.features.tolist()) or msg.bin >= state.params.bins - 1:
        raise ProtocolError(f"split on column {msg.feature} bin {msg.bin} is not ours to make")
    rows = t.live[msg.node]
    left = state.binned["train"][rows, msg.feature] <= msg.bin
    children(state, t, msg.node, left)
    state.table[(t.tree, msg.node)] = (msg.feature, msg.bin)
    return BoostPartition(tree=t.tree, node=msg.node, left=left)


def on_partition(state: GuestBoost, msg: BoostPartition) -> None:
    """Another party split a node: its children's rows."""
    t = tree_of(state, msg.tree)
    if state.hidden:
        raise ProtocolError(
            "the job hides the instance space: the host may not send a partition; "
            "check that both parties run the same job file"
        )
    open_node(t, msg.node)
    if len(msg.left) != len(t.live[msg.node]):
        raise ProtocolError(f"partition of node {msg.node} has the wrong length")
    children(state, t, msg.node, msg.left)


def open_node(t: TreeState, node: int) -> None:
    """Only a histogrammed, unsplit node of the level last asked, in a tree still open."""
    known = node in t.sums or node in t.named
    if not known or node in t.done or level_of(node) != t.level or t.closed:
        raise ProtocolError(f"node {node} of tree {t.tree} cannot be split now")


def children(state: GuestBoost, t: TreeState, node: int, left: np.ndarray) -> None:
    """Record a split; both children must hold at least the row floor."""
    rows = t.live.pop(node)
    if min(int(left.sum()), int((~left).sum())) < state.floor:
        raise ProtocolError(f"a child of node {node} would hold fewer than {state.floor} rows")
    t.done.add(node)
    if level_of(node) + 1 < state.params.depth:
        t.live[2 * node + 1], t.live[2 * node + 2] = rows[left], rows[~left]


def on_decide(
    state: GuestBoost, msg: BoostDecide, binned: np.ndarray | None = None
) -> BoostDecisions:
    """Left masks of our split nodes in trees ``[tree, tree + trees)`` for a split's rows."""
    if binned is None:
        if state.hidden:
            raise ProtocolError(
                "the job hides the instance space: the host reads decisions by boost_reveal; "
                "check that both parties run the same job file"
            )
        if msg.split == "rows" or msg.tree + msg.trees > state.next_tree:
            raise ProtocolError(f"decisions for trees {msg.tree}+{msg.trees} are not due")
        binned = state.binned[msg.split]
        if state.current is not None and state.current.tree < msg.tree + msg.trees:
            state.current.closed = True  # the Host has grown it: no more nodes
    keys = sorted(k for k in state.table if msg.tree <= k[0] < msg.tree + msg.trees)
    left = np.zeros((len(keys), len(binned)), dtype=np.bool_)
    for i, key in enumerate(keys):
        column, bin_ = state.table[key]
        left[i] = binned[:, column] <= bin_
    nodes = np.array(keys, dtype=np.int64).reshape(len(keys), 2)
    return BoostDecisions(tree=msg.tree, split=msg.split, nodes=nodes, left=left)


def on_masked(state: GuestBoost, msg: BoostMasked) -> BoostHistogram | None:
    """The direct nodes' encrypted histograms, one pass over the tree's rows per lane.

    Each lane's bin products hold its nodes' sums slot by slot (hidden.py); they are
    packed lane by lane, ``⌊k/m⌋`` blocks of ``m`` slots per plaintext, and
    re-randomised. The Host derives the other named nodes itself. With the Host check
    every lane holds one node (hidden.lane_width) and the answer waits for the proof.
    """
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
        check_named(t, node, msg.level, nodes, direct)
    t.named.update(nodes)
    lanes = hidden.lanes(direct, t.layout, state.check is not None)
    rows = len(t.rows)
    if len(msg.values) != (len(lanes) * rows if direct else 0):
        raise ProtocolError(
            f"{len(msg.values)} masked ciphertexts for {len(lanes)} lane(s) of {rows} rows"
        )
    state.key.check_ciphertexts(msg.values.values)
    proven(t)
    if state.check is not None and direct:
        t.pending = msg  # answered once its proof holds (on_proof)
        return None
    return masked_answer(state, t, msg)


def masked_answer(state: GuestBoost, t: TreeState, msg: BoostMasked) -> BoostHistogram:
    """The direct nodes' packed histograms of a checked (or unchecked) ``boost_masked``."""
    direct = msg.direct.tolist()
    lanes = hidden.lanes(direct, t.layout, state.check is not None)
    rows = len(t.rows)
    values = msg.values.values if direct else t.cts  # the root: the tree's own gradients
    work = [(t.rows, values[j * rows : (j + 1) * rows]) for j in range(len(lanes))]
    sums = summed(state, t, list(range(len(lanes))), work)
    packed: list[int] = []
    for j, lane in enumerate(lanes):
        packed += pack_split(state, sums[j], t.layout, len(lane))
        per = t.layout.blocks(len(lane))
        state.work["shifts"] += len(sums[j]) - -(-len(sums[j]) // per)
    state.work["packed"] += len(packed)
    fresh_values = fresh.rerandomize(state.key, packed, take(state, len(packed)))
    named = np.array(direct or [0], np.int64)
    return BoostHistogram(tree=t.tree, level=msg.level, nodes=named, values=fresh_values)


def check_named(t: TreeState, node: int, level: int, nodes: list[int], direct: list[int]) -> None:
    """A node of this level, new, whose parent was named; ``direct`` as hidden.direct_nodes says.

    Level 0 is the root alone, from the tree's gradients (never direct).
    """
    fits = level_of(node) == level and node not in t.named and direct == hidden.direct_nodes(nodes)
    if node != 0:
        fits = fits and (node - 1) // 2 in t.named
    if not fits:
        raise ProtocolError(f"node {node} of tree {t.tree} is not open at level {level}")


def on_proof(state: GuestBoost, msg: BoostProof) -> BoostHistogram | None:
    """host_check: verify the Host's proof of the tree's rows or of the pending masks."""
    t = tree_of(state, msg.tree)
    if state.check is None:
        raise ProtocolError("the job has no host check: the host may not send boost_proof")
    if msg.level == 0 and not t.checked:
        proofs.verify_rows(state.key, msg, t.cts, t.layout, state.check)
        t.checked = True
        return None
    pending, t.pending = t.pending, None
    if pending is None or msg.level != pending.level:
        raise ProtocolError(f"a proof of tree {t.tree} level {msg.level} that nothing awaits")
    direct = pending.direct.tolist()
    parents = proofs.parent_flags(t.flags, direct)
    values = pending.values.values
    counts = proofs.verify_masked(state.key, msg, t.tree, msg.level, t.cts, values, parents)
    proofs.next_flags(state.key, t.flags, pending.nodes.tolist(), direct, msg.values.values)
    t.counts.update(zip(direct, counts, strict=True))
    for node in pending.nodes.tolist():
        if node not in t.counts:  # derived (the Host takes parent − sibling): the floor here too
            t.counts[node] = t.counts[(node - 1) // 2] - t.counts[hidden.sibling(node)]
        if t.counts[node] < state.floor:
            raise ProtocolError(
                f"the host deviated from the protocol: node {node} of tree {t.tree} holds "
                f"{t.counts[node]} rows, fewer than the floor {state.floor} (host check); "
                f"the session stops"
            )
    return masked_answer(state, t, pending)


def on_reveal(state: GuestBoost, msg: BoostReveal) -> BoostRevealed:
    """Hidden: decrypt one split node's request (a node of the level last named, once)."""
    if state.sets is None:
        raise ProtocolError(
            "the job shares the instance space: the host may not send boost_reveal; "
            "check that both parties run the same job file"
        )
    t = state.current

    def open_now(tree: int, node: int) -> bool:
        return (
            t is not None
            and t.tree == tree
            and not t.closed
            and node in t.named
            and level_of(node) == t.level
        )

    return reveal.answer(state.sets, msg, open_now)


def take(state: GuestBoost, count: int) -> list[int]:
    noise = state.noise.take(count)
    state.noise.prefetch(count)
    return noise


def step(state: GuestBoost, body: Message) -> Message | None:
    """Dispatch one message of the Host; the reply, if any."""
    t = state.current
    if t is not None and t.pending is not None and not isinstance(body, BoostProof):
        raise ProtocolError(
            f"the host deviated from the protocol: it sent {type(body).__name__} before the "
            f"proof of tree {t.tree} level {t.pending.level} (host check); the session stops"
        )
    if isinstance(body, BoostProof):
        return on_proof(state, body)
    if isinstance(body, BoostGradients):
        on_gradients(state, body)
        return None
    if isinstance(body, BoostNodes):
        return on_nodes(state, body)
    if isinstance(body, BoostMasked):
        return on_masked(state, body)
    if isinstance(body, BoostSplit):
        return on_split(state, body)
    if isinstance(body, BoostPartition):
        on_partition(state, body)
        return None
    if isinstance(body, BoostDecide):
        return on_decide(state, body)
    if isinstance(body, BoostReveal):
        return on_reveal(state, body)
    if isinstance(body, Finish):
        state.table = {k: v for k, v in state.table.items() if k[0] < body.epochs}
        state.finished = True
        return None
    raise ProtocolError(f"a SecureBoost guest does not handle {type(body).__name__}")


def run_boost_guest(
    ctx: PartyContext,
    data: PartyData,
    workers: int = 1,
    engine: Engine = POOL,
    forget_reveals: bool = False,
) -> dict[str, Any]:
    """Answer the Host tree by tree until it finishes; save our own lookup table.

    ``forget_reveals`` (hidden, the operator's ``--forget-reveals``): start this job's
    ledger of decryptions anew (ledger.py), booked in it.
    """
    job = ctx.job
    digest = rows_digest(ctx, data.train_ids, data.test_ids)
    features = data.x_train.shape[1]
    announce(ctx, "guest", data.rows, features, [job.server, job.host], digest, len(data.x_train))
    key = receive_key(ctx)
    noise = histogram_pool(engine, key, workers)
    group = 1 + job.guests.index(ctx.name)
    hidden = job.model.instance_space == "hidden"
    state = GuestBoost(
        data=data, key=key, params=params_of(job), group=group, noise=noise, hidden=hidden
    )
    state.check = proofs.Bounds() if job.model.host_check else None
    if hidden:  # our candidate sets over the training then held-out rows, under our own key
        rows = np.vstack([state.binned["train"], state.binned["test"]])
        kept = open_ledger(
            ctx.out,
            job.fingerprint(),
            job.key_bits,
            job.obfuscation,
            resume=ctx.resume,
            forget=forget_reveals,
        )
        state.sets, sets = reveal.candidates(job, ctx.name, rows, "train", engine, workers, kept)
        ctx.channel.send(job.host, sets)
    # A full tree's re-randomisations, computed while the Host encrypts its gradients;
    # after that each take() starts on as many for the next tree.
    full = (2**state.params.depth - 1) * features * state.params.bins
    noise.prefetch(Layout(len(data.x_train), key.bits).packed(full))
    try:
        resume_guest(ctx, state)
        while not state.finished:
            env = ctx.channel.expect(ACCEPTS, {job.host})
            if hidden and tree_ended(state, env.body):  # no boost_decide marks it here
                save_guest(ctx, state)
            reply = step(state, env.body)
            if reply is not None:
                ctx.channel.send(job.host, reply, env.header.round)
            body = env.body
            if isinstance(body, BoostDecide) and body.split == "test":
                save_guest(ctx, state)
    finally:
        noise.close()
    # hidden: the nodes this job's ledger answered are the model's split nodes, unless a
    # --forget-reveals resume kept trees whose answers it forgot (then: not listed)
    answered = state.sets is not None and not (ctx.resume and forget_reveals)
    path = save_guest_model(ctx, state, answered)
    reveals = reveal_counts(state.sets)
    write_json(
        ctx.out / "work.json",
        {**state.work, "trees": state.next_tree, "per_tree": work_per_tree(state), **reveals},
    )
    log.info("kept %d split nodes of our own; model in %s", len(state.table), path)
    return {"split_nodes": len(state.table), **state.work, **reveals}


def answered_nodes(sets: reveal.GuestSets | None) -> dict[str, Any]:
    """Hidden: ``answered_nodes``, the sorted ``[tree, node]`` pairs the job's ledger answered."""
    if sets is None:
        return {}
    return {"answered_nodes": [[t, n] for t, n in sorted(sets.ledger.answers)]}


def tree_ended(state: GuestBoost, body: Message) -> bool:
    """Hidden: the next tree's gradients end the last one (``next_tree`` trees complete)."""
    return isinstance(body, BoostGradients) and 0 < body.tree == state.next_tree


def reveal_counts(sets: reveal.GuestSets | None) -> dict[str, Any]:
    """Hidden: the job's ledger (ledger.py) as work.json and the result report it."""
    if sets is None:
        return {}
    kept = sets.ledger
    return {
        "reveals": {
            "answered": len(kept.answers),
            "replayed": kept.replayed,
            "forgotten": kept.forgotten,
        }
    }


def work_per_tree(state: GuestBoost) -> list[dict[str, int]]:
    """The operations tallied in ``work`` in each tree this process built, in order."""
    marks = [*state.work_at, state.work]
    return [{k: b[k] - a[k] for k in b} for a, b in itertools.pairwise(marks)]


def histogram_pool(engine: Engine, key: PublicKey, workers: int) -> NoisePool:
    """The obfuscators that re-randomise our histograms: full-length ``r^n`` whatever the
    job's obfuscation, since the Host holds the key (:func:`fresh.for_key_holder`): under
    its own DJN ``h_s`` it could read its rows' obfuscators back out of every bin sum."""
    holder = fresh.for_key_holder(key)
    return engine.pool(holder.n, workers, holder.h_s, nice=0)  # on the critical path


def save_guest(ctx: PartyContext, state: GuestBoost) -> None:
    """After a tree is evaluated: our lookup table so far."""
    table = [[t, n, c, b] for (t, n), (c, b) in sorted(state.table.items())]
    checkpoint.save(ctx, state.next_tree, {"table": table})


def resume_guest(ctx: PartyContext, state: GuestBoost) -> None:
    """Agree with the Host where to continue; restore the lookup table of the trees kept."""
    completed = checkpoint.agree(ctx)
    if completed:
        saved = checkpoint.load(ctx, completed)["table"]
        state.table = {(int(t), int(n)): (int(c), int(b)) for t, n, c, b in saved}
        state.next_tree = completed


def save_guest_model(ctx: PartyContext, state: GuestBoost, answered: bool = False) -> Any:
    """model.json: per split node we own, the column name and threshold (standardised units);
    hidden, ``answered``: every (tree, node) the job's ledger answered, the split nodes a
    prediction session may ask for (predict.py)."""
    data = state.data
    nodes = [
        {
            "tree": t,
            "node": n,
            "feature": data.feature_names[c],
            "bin": b,
            "threshold": float(state.edges[c][b]),
        }
        for (t, n), (c, b) in sorted(state.table.items())
    ]
    model = {
        "party": ctx.name,
        "role": "guest",
        "session": ctx.job.session,
        "model": model_entry(ctx.job.model.kind),
        "instance_space": ctx.job.model.instance_space,
        "splits": nodes,
        # hidden: every candidate in oblivious.py's order; which of them won is the Host's
        "candidates": [
            {"feature": data.feature_names[c], "bin": b, "threshold": float(state.edges[c][b])}
            for c in range(len(data.feature_names))
            for b in range(state.params.bins - 1)
        ]
        if state.hidden
        else [],
        "trees": state.params.trees,
        "depth": state.params.depth,
        **answered_nodes(state.sets if answered else None),
        "standardisation": {
            n: {"mean": float(m), "scale": float(s)}
            for n, m, s in zip(data.feature_names, data.mean, data.scale, strict=True)
        },
        "note": "a row goes left at a node when its standardised value <= threshold",
    }
    path = ctx.out / "model.json"
    write_json(path, model)
    return path
