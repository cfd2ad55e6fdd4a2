"""Attack: a crafting SecureBoost guest that passes every Host check reads what ε allows.

The attacker (the checked-swap guest of issue 31): its "columns" are row sets it
chooses, and its bin sums are the true homomorphic sums of the Host's ``[[g, h, 1]]``
over them, so its histograms are an honest binning of *some* column: they pass the
column-total and bin-box checks (``checks.check_histogram``) and, when it wins, the
partition check (``checks.check_partition``), both run below on every node. Column 0
is a base split (its own-column 2-means cluster inside the node); each other column
is the base with one row moved to the other side. Moving a row raises the gain
exactly when its gradient points to the other side, so when the Host names a swap
column as the winner, the attacker reads that row's label as the majority of the
side it was moved to (as the audit's attacker does: one row per won node).

The Host's decryption is the plain twin here (learning/secureboost.py: the federated
trees equal its trees split for split, tests/parties/vertical/test_secureboost_
protocol.py), and the attacker is told every node's rows (the shared mode's view; in
the hidden mode it would have to craft blind, so this is the stronger attacker).

The defence is label DP: the gradients come from labels flipped once at ε, so the
winner is a function of the flipped labels. For a row whose label the attacker's
own columns give right with probability ``a``, ε-label-DP caps its read after the
run at ``e^ε·a / (e^ε·a + 1 − a)``; over ``a`` the largest gain this allows is
``tanh(ε/4)`` per row read (0.46 at ε = 2). The test prints the bound: the
attacker's combined read (own-column guess everywhere, its swap read where it has
one) may beat its own-column read by at most ``tanh(ε/4)`` per row read.
Leaky arm: ε = ∞, where every named row's label is read exactly.

Hidden instance space (the default): no winner is named, but a guest whose won set
disagrees with its histogram is refused, and the refusal names the node: the blind
crafter below (``RefusedGuest``) reads one row per session that way, and label DP
bounds it as above.

Each run flips with a seeded generator (tests only; the OS-CSPRNG draw is the same
code), so the counts are known answers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pytest
from helpers import decoded_traffic, failures, memory_job, party_data, read_model, run_in_threads
from sklearn.cluster import KMeans

from privfl.config.vertical import JobConfig, LabelDPConfig, switch_kind
from privfl.errors import ProtocolError
from privfl.learning import secureboost as sb
from privfl.parties.vertical.secureboost import checks, oblivious
from privfl.parties.vertical.secureboost import labels as boost_labels
from privfl.parties.vertical.secureboost.common import params_of
from privfl.protocol.boost_messages import (
    BoostDecide,
    BoostPartition,
    BoostReveal,
    BoostRevealed,
    BoostSplit,
)
from privfl.protocol.memory import InMemoryHub

MAJORITY = 1  # breast cancer: benign (public knowledge)
SEEDS = range(8)  # eight draws of the Host's flips per arm


@dataclass
class SwapGuest:
    """The crafting guest as a tree-builder group: chosen row sets, true sums over them."""

    prior: np.ndarray  # its own-column 2-means guess of every training label
    columns: int  # the job's guest column count: its histograms must have that many
    params: sb.BoostParams
    g: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    h: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    read: dict[int, int] = field(default_factory=dict)  # row -> label read
    won: int = 0
    crafted: dict[int, np.ndarray] = field(default_factory=dict)  # node -> (rows, columns) bins
    swapped: dict[int, list[int]] = field(default_factory=dict)  # node -> row of column k
    asked: dict[int, np.ndarray] = field(default_factory=dict)
    proposals: dict[int, tuple[int, int]] = field(default_factory=dict)

    def features(self, tree: int) -> np.ndarray:
        return np.arange(self.columns, dtype=np.int64)

    def ask(self, tree: int, level: int, nodes: dict[int, np.ndarray]) -> None:
        self.asked = dict(nodes)
        for node, rows in nodes.items():
            base = self.prior[rows] == 1 - MAJORITY  # left: the rows its prior calls 0
            unread = [i for i in range(len(rows)) if int(rows[i]) not in self.read]
            picks = unread[: self.columns - 1]
            binned = np.zeros((len(rows), self.columns), np.int64)
            for k in range(self.columns):
                left = base.copy()
                if 1 <= k <= len(picks):
                    left[picks[k - 1]] = not left[picks[k - 1]]
                binned[:, k] = np.where(left, 0, 1)
            self.crafted[node] = binned
            self.swapped[node] = [int(rows[i]) for i in picks]

    def histograms(self) -> dict[int, sb.Histogram]:
        out = {}
        for node, rows in self.asked.items():
            # the true homomorphic sums over its row sets: what the Host decrypts
            hist = sb.histogram(self.crafted[node], self.g[rows], self.h[rows], self.params.bins)
            checks.check_histogram("guest-1", node, hist, self.g, self.h, rows)  # passes
            out[node] = hist
        return out

    def propose(self, tree: int, node: int, feature: int, bin_: int) -> None:
        self.proposals[node] = (feature, bin_)

    def split(self, tree: int, node: int, rows: np.ndarray, feature: int, bin_: int) -> np.ndarray:
        self.won += 1
        left: np.ndarray = self.crafted[node][:, feature] <= bin_
        won = checks.candidate_left(
            sb.histogram(self.crafted[node], self.g[rows], self.h[rows], self.params.bins),
            self.features(tree),
            feature,
            bin_,
        )
        checks.check_partition("guest-1", node, won, self.g, self.h, rows[left])  # passes
        if feature >= 1 and feature - 1 < len(self.swapped[node]):
            row = self.swapped[node][feature - 1]
            moved_to_left = bool(left[np.searchsorted(rows, row)])
            side = rows[left] if moved_to_left else rows[~left]
            others = [r for r in side.tolist() if r != row]
            # the side's majority by its prior: where the row's gradient pointed
            self.read[row] = int(np.mean(self.prior[others]) >= 0.5)
        return left

    def reveal(self, tree: int, nodes: list[int]) -> None:
        return None  # the tree builder's view: the winners are named by split()

    def learn(self, tree: int, node: int, left: np.ndarray) -> None:
        return None

    def side(self, node: int, idx: np.ndarray, n: sb.Node) -> np.ndarray:
        """Its node routes its rows as its crafted column did."""
        return self.crafted[node][:, n.feature] <= n.bin


def default_job() -> JobConfig:
    return switch_kind(memory_job(1, epsilon=LabelDPConfig().epsilon), "secureboost")


def own_prior(x: np.ndarray) -> np.ndarray:
    scaled = (x - x.mean(axis=0)) / (x.std(axis=0) + 1e-12)
    cluster = KMeans(n_clusters=2, n_init=10, random_state=0).fit_predict(scaled)
    return np.where(cluster == int(np.bincount(cluster).argmax()), MAJORITY, 1 - MAJORITY)


Side = Callable[[int, np.ndarray, sb.Node], np.ndarray]
"""Which of a node's rows (``idx``) an attacker's split sends left."""


@dataclass
class Twin:
    """The plain twin's Host side for one label draw: its own binned columns and margin."""

    y: np.ndarray
    flipped: np.ndarray
    params: sb.BoostParams
    own: sb.LocalColumns
    guest_x: np.ndarray


def twin(job: JobConfig, seed: int) -> Twin:
    """The job's data, the Host's noised labels (drawn with ``seed``) and its own columns."""
    data = party_data(job)
    host, guest = data[job.host], data[job.guests[0]]
    y = host.y_train
    assert y is not None
    flipped = boost_labels.draw_noisy_labels(job, y, np.random.default_rng(seed))[0]
    params = params_of(job)
    edges = sb.quantile_edges(host.x_train, params.bins)
    own = sb.LocalColumns(sb.bin_columns(host.x_train, edges), params, 0)
    return Twin(y, flipped, params, own, guest.x_train)


def run_attack(job: JobConfig, seed: int) -> tuple[SwapGuest, np.ndarray]:
    """Train the twin with the attacker as the guest's group; its reads and the true labels."""
    tw = twin(job, seed)
    y, params, own = tw.y, tw.params, tw.own
    attacker = SwapGuest(own_prior(tw.guest_x), tw.guest_x.shape[1], params)
    margin = np.full(len(y), sb.base_margin(tw.flipped))
    for t in range(params.trees):
        g, h = sb.gradients(margin, tw.flipped)
        own.set_gradients(g, h)
        attacker.g, attacker.h = g, h
        tree = sb.grow_tree(t, sb.tree_rows(params, t, len(y)), g, h, [own, attacker], params)
        margin += route(tree, own, attacker.side, len(y))
    return attacker, y


def route(tree: sb.Tree, own: sb.LocalColumns, theirs: Side, rows: int) -> np.ndarray:
    """Leaf values per row: the Host's nodes route by its bins, the attacker's by ``theirs``."""
    out = np.zeros(rows)
    stack = [(0, np.arange(rows))]
    while stack:
        node, idx = stack.pop()
        n = tree[node]
        if n.leaf:
            out[idx] = n.value
            continue
        left = own.binned[idx, n.feature] <= n.bin if n.group == 0 else theirs(node, idx, n)
        stack += [(2 * node + 1, idx[left]), (2 * node + 2, idx[~left])]
    return out


def margin_above_prior(att: SwapGuest, y: np.ndarray) -> tuple[int, int]:
    """(rows read, labels gained over the own-column guess by using the reads)."""
    gained = sum(int(v == y[r]) - int(att.prior[r] == y[r]) for r, v in att.read.items())
    return len(att.read), gained


@pytest.mark.parametrize("epsilon", [math.inf, None], ids=["no-label-dp", "defaults"])
def test_a_checked_swap_guest_reads_no_more_than_epsilon_allows(epsilon: float | None) -> None:
    job = default_job()
    if epsilon is not None:
        job = replace(job, label_dp=replace(job.label_dp, epsilon=epsilon))
    eps = job.label_dp.epsilon

    reads = exact = gained = won = 0
    for seed in SEEDS:
        att, y = run_attack(job, seed)
        k, gain = margin_above_prior(att, y)
        reads, gained, won = reads + k, gained + gain, won + att.won
        exact += sum(int(v == y[r]) for r, v in att.read.items())

    per_row = math.tanh(eps / 4) if math.isfinite(eps) else 1.0
    bound = reads * per_row
    print(
        f"ε = {eps}: {won} nodes won, {reads} rows read over {len(SEEDS)} runs, {exact} right; "
        f"{gained:+d} labels over the own-column guess; bound {bound:.1f} "
        f"(tanh(ε/4) = {per_row:.3f} per row read)"
    )
    assert reads >= 10, "the attacker won too few nodes to measure anything"
    if not math.isfinite(eps):
        assert exact == reads  # the leak: every named row's label, exactly
        return
    assert gained <= bound


def test_a_hidden_space_guest_is_never_told_a_winner(tmp_path: Path) -> None:
    """The hidden instance space (the default): the swap read has nothing to read.

    The attacker above reads a label when the Host names its swap column as a winner.
    With oblivious selection no guest is named anything: every guest gets one
    decryption request per split node of the tree, the same nodes whoever won them
    (its own, the other guest's, the Host's), and each decryption is masked, so it
    equals none of the attacker's candidate sets. Its best read is its own-column
    guess: 0 labels above it.
    """
    job = default_job()
    job = two_guest(replace(job, model=replace(job.model, trees=1)))
    hub = InMemoryHub()
    results = run_in_threads(job, hub, tmp_path)
    assert not failures(results), failures(results)

    split = {
        (t, e["node"]) for t, tree in enumerate(read_model(tmp_path, "host")["trees"]) for e in tree
        if "party" in e
    }  # fmt: skip
    asked: dict[str, set[tuple[int, int]]] = {g: set() for g in job.guests}
    named = 0
    for sender, receiver, _, body in decoded_traffic(hub):
        assert not isinstance(body, BoostSplit | BoostPartition | BoostDecide)
        if isinstance(body, BoostReveal):
            asked[receiver].add((body.tree, body.node))
        if isinstance(body, BoostRevealed):
            named += revealed_names_a_candidate(job, sender, body)
    owners = {e.get("party") for tree in read_model(tmp_path, "host")["trees"] for e in tree}
    print(f"split nodes {len(split)} (owners {sorted(owners - {None})}); requests per guest "
          f"{[len(v) for v in asked.values()]}; decryptions naming a candidate: {named}; "
          "labels read above the own-column guess: 0")  # fmt: skip
    assert all(nodes == split for nodes in asked.values())  # the same requests, won or not
    assert named == 0


def two_guest(job: JobConfig) -> JobConfig:
    """The two-guest in-memory job of the helpers, with the defaults' model and label DP."""
    base = memory_job(2, epsilon=job.label_dp.epsilon, timeout=120.0)
    return replace(switch_kind(base, "secureboost"), model=job.model)


def revealed_names_a_candidate(job: JobConfig, guest: str, body: BoostRevealed) -> int:
    """1 when a decryption's row bits equal one of the guest's candidate sets."""
    data = party_data(job)[guest]
    rows = len(data.x_train) + len(data.x_test)
    per, _ = oblivious.shape(rows, job.key_bits)
    bits = np.array(
        [(int(v) >> i) & 1 for v in body.values.values for i in range(per)][:rows], np.bool_
    )
    binned = sb.bin_columns(
        np.vstack([data.x_train, data.x_test]), sb.quantile_edges(data.x_train, job.model.bins)
    )
    return int(
        any(np.array_equal(bits, c) for c in oblivious.candidate_sets(binned, job.model.bins))
    )


# --- the hidden mode: blind crafting, and the Host's refusal as the one read -------------


@dataclass
class RefusedGuest:
    """A hidden-mode crafter: the Host's refusal of its won split is what names the winner.

    It cannot see a node's rows, so it crafts over every row of the tree: columns 0 and
    2 onwards are its base split (its own-column cluster), column 1 the base with one
    row moved, a new row per node. Its candidate sets go out once per job, so column
    1's set is the base: when column 1 wins, the Host's partition check refuses it,
    and the refusal names the guest and the node. It reads that row's label as the
    side it was moved to, and the session stops: one read per session at most.
    """

    prior: np.ndarray
    columns: int
    params: sb.BoostParams
    g: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    h: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    read: dict[int, int] = field(default_factory=dict)
    won: int = 0
    untried: list[int] = field(default_factory=list)
    swapped: dict[int, int] = field(default_factory=dict)  # node -> its column 1's row
    hists: dict[int, sb.Histogram] = field(default_factory=dict)
    asked: dict[int, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.untried = list(range(len(self.prior)))

    def features(self, tree: int) -> np.ndarray:
        return np.arange(self.columns, dtype=np.int64)

    def ask(self, tree: int, level: int, nodes: dict[int, np.ndarray]) -> None:
        self.asked = dict(nodes)  # for the sums the masked ciphertexts give it, never read
        for node in nodes:
            self.swapped[node] = self.untried.pop(0)

    def histograms(self) -> dict[int, sb.Histogram]:
        for node, rows in self.asked.items():
            binned = np.repeat(np.where(self.base(), 0, 1)[rows, None], self.columns, axis=1)
            moved = self.base()
            moved[self.swapped[node]] = not moved[self.swapped[node]]
            binned[:, 1] = np.where(moved, 0, 1)[rows]
            hist = sb.histogram(binned, self.g[rows], self.h[rows], self.params.bins)
            checks.check_histogram("guest-1", node, hist, self.g, self.h, rows)  # passes
            self.hists[node] = hist
        return {node: self.hists[node] for node in self.asked}

    def base(self) -> np.ndarray:
        return np.asarray(self.prior == 1 - MAJORITY)  # left: the rows its prior calls 0

    def side(self, node: int, idx: np.ndarray, n: sb.Node) -> np.ndarray:
        """Every node of its routes by the one base column."""
        return self.base()[idx]

    def propose(self, tree: int, node: int, feature: int, bin_: int) -> None:
        return None

    def split(self, tree: int, node: int, rows: np.ndarray, feature: int, bin_: int) -> np.ndarray:
        self.won += 1
        left: np.ndarray = self.base()[rows]  # every candidate set it sent is the base
        won = checks.candidate_left(self.hists[node], self.features(tree), feature, bin_)
        try:
            checks.check_partition("guest-1", node, won, self.g, self.h, rows[left])
        except ProtocolError:
            row = self.swapped[node]  # the refusal names this node: column 1 won
            self.read[row] = 1 - int(self.prior[row])
            raise
        return left

    def reveal(self, tree: int, nodes: list[int]) -> None:
        return None

    def learn(self, tree: int, node: int, left: np.ndarray) -> None:
        return None


def run_refused(job: JobConfig, seed: int) -> tuple[RefusedGuest, np.ndarray]:
    """Train the twin with the hidden crafter until the Host refuses it (or the last tree)."""
    tw = twin(job, seed)
    y, params, own = tw.y, tw.params, tw.own
    attacker = RefusedGuest(own_prior(tw.guest_x), tw.guest_x.shape[1], params)
    margin = np.full(len(y), sb.base_margin(tw.flipped))
    for t in range(params.trees):
        g, h = sb.gradients(margin, tw.flipped)
        own.set_gradients(g, h)
        attacker.g, attacker.h = g, h
        try:
            tree = sb.grow_tree(t, sb.tree_rows(params, t, len(y)), g, h, [own, attacker], params)
        except ProtocolError:
            break  # the session stops
        margin += route(tree, own, attacker.side, len(y))
    return attacker, y


@pytest.mark.parametrize("epsilon", [math.inf, None], ids=["no-label-dp", "defaults"])
def test_a_hidden_guest_is_told_one_winner_by_its_refusal(epsilon: float | None) -> None:
    job = default_job()
    assert job.model.instance_space == "hidden"
    if epsilon is not None:
        job = replace(job, label_dp=replace(job.label_dp, epsilon=epsilon))
    eps = job.label_dp.epsilon

    reads = exact = gained = 0
    for seed in SEEDS:
        att, y = run_refused(job, seed)
        assert len(att.read) <= 1  # the session stops at its first read
        k, gain = margin_above_prior(att, y)
        reads, gained = reads + k, gained + gain
        exact += sum(int(v == y[r]) for r, v in att.read.items())

    per_row = math.tanh(eps / 4) if math.isfinite(eps) else 1.0
    print(
        f"hidden, ε = {eps}: {reads} sessions of {len(SEEDS)} refused, {exact} labels right; "
        f"{gained:+d} over the own-column guess; bound {reads * per_row:.1f}"
    )
    assert reads >= 4, "too few refusals to measure anything"
    if not math.isfinite(eps):
        assert exact == reads  # the leak: the refused node's row, exactly
        return
    assert gained <= reads * per_row
