"""Script against a running SecureBoost guest: the tool plays the Server and the Host (key holder).

One tree, built by the kit as a Host would (docs/protocol.md §6.9), from gradients
the kit chose, sent as trivial encryptions (ρ = 1) under a key it can check
(:mod:`privfl.tools.conformance.randomness`):

1. ``boost_gradients`` for the tree's rows; the root named (``boost_nodes``): the
   ``boost_histogram`` must have exactly ``⌈nodes·columns·bins / k⌉`` ciphertexts
   (``k`` bin sums per ciphertext, the job's layout), and every column's bins must add
   up to the node's Σg, Σh and row count (the kit does not know the guest's bins).
2. ``boost_split`` on the most balanced column and bin the histogram shows: the
   ``boost_partition`` has one decision per row of the node, both children hold the
   row floor, and the left rows' Σg, Σh and count are the histogram's bins up to it.
3. Level 1 (both children named, one derived from its parent by the guest): sums checked
   again; the kit splits one child itself (``boost_partition``), the guest the other.
4. ``boost_decide`` on the training and held-out rows: one mask per node the guest
   split, the same as its partitions on the tree's rows.

On a job with ``instance_space = "hidden"`` the same tree goes out as that mode's
guest must see it (§6.9): each level is a ``boost_masked`` (the root over the
gradients; level 1 names both children and sends, per row of the tree, a trivial
encryption of the row's plaintext if it is in node 1, else of 0), the histogram
answers for the direct nodes only (the kit takes node 2 as node 0 − node 1), the
guest's ``boost_candidates`` (its own key, its candidate sets) come right after the
key and are checked for shape, a split is selected obliviously: the kit masks the
chosen candidate's ciphertexts (``boost_reveal``), unmasks the ``boost_revealed``
and checks the set over the tree's rows as a partition; the kit's own split of node 1
is a dummy request the guest must answer alike; no ``boost_decide``; and the endings are the
hidden mode's: a node not of the level named (``unknown-node``), the root named again
(``repeated-node``), any ``boost_partition`` at all (``small-node``: the guest cannot
count rows, so it refuses every partition) and ``foreign-rows``.

Every ciphertext must carry a fresh obfuscator of the session's mode (the products of
the kit's ρ = 1 inputs are re-randomised), every message be ACKed, and after
``finish`` the guest stays silent, closes its inbox and exits 0. The violation endings
send one message the guest must refuse, and check it Aborts: a node no partition
defined (``unknown-node``, also ``violation``), the root named again
(``repeated-node``), a partition leaving a child below the row floor (``small-node``)
and the next tree's gradients over rows other than the job seed's sample
(``foreign-rows``). A job with ``host_check`` gets the Host's ``boost_proof`` after
the gradients (docs/protocol.md §6.9, "Host check"); ``forged-proof`` sends one
over other plaintexts than the gradients' (a guest of a job without the check must
refuse any ``boost_proof``), and the guest must Abort before any histogram. (The
kit's hidden-mode session sends no level ≥ 1 proof: a job with both is not scripted;
its lanes would hold one node each, §6.9.) On a small row sample (the host_check kit's)
node 2 is split only if it holds ``2·floor`` rows.
"""

from __future__ import annotations

import subprocess

import click
import numpy as np

from privfl.config.vertical import JobConfig
from privfl.errors import ConfigError, ProtocolError
from privfl.learning import secureboost as sb
from privfl.parties.vertical.secureboost import hidden, oblivious, proofs, reveal
from privfl.parties.vertical.secureboost.common import (
    OFFSET,
    Layout,
    params_of,
    row_plaintexts,
    unpack_sums,
)
from privfl.protocol.boost_messages import (
    BoostCandidates,
    BoostDecide,
    BoostDecisions,
    BoostGradients,
    BoostHistogram,
    BoostMasked,
    BoostNodes,
    BoostPartition,
    BoostProof,
    BoostRevealed,
    BoostSplit,
)
from privfl.protocol.channel import body_as
from privfl.protocol.messages import BigInts, Finish, Kind
from privfl.tools.conformance.boost_columns import ColumnRule, check_columns, check_count
from privfl.tools.conformance.guest import GuestRun, check_randomness
from privfl.tools.conformance.peer import (
    Report,
    acknowledged,
    exits_nonzero,
    expect,
    expect_abort,
    finished_cleanly,
    quiet,
)
from privfl.tools.conformance.randomness import trivial
from privfl.tools.conformance.target import Target

VIOLATIONS = ("unknown-node", "repeated-node", "small-node", "foreign-rows", "forged-proof")
TREE = 0


class BoostGuestRun(GuestRun):
    """The played Server and Host, the tree's rows and gradients, and the nodes so far."""

    def __init__(self, job: JobConfig, party: str, report: Report) -> None:
        super().__init__(job, party, report)
        self.key_sender = self.host  # the Host holds the boosting key
        self.params = params_of(job)
        self.floor = sb.node_floor(self.params.min_child_weight)
        self.group = 1 + job.guests.index(party)
        self.g = np.zeros(0, dtype=np.int64)
        self.h = np.zeros(0, dtype=np.int64)
        self.layout = Layout(1, self.key.bits)
        self.features = np.zeros(0, dtype=np.int64)
        self.columns = ColumnRule(self.params, TREE, self.group, 0)
        self.owned: dict[int, np.ndarray] = {}  # node the guest split -> its left mask
        self.hidden = job.model.instance_space == "hidden"
        self.tree_rows = np.zeros(0, dtype=np.int64)
        self.plain: list[int] = []
        self.sets: reveal.HostSets | None = None  # hidden: the guest's candidate sets

    def handshake(self) -> bool:
        if not super().handshake():
            return False
        assert self.hello is not None
        declared = self.job.party(self.party).declared_features
        ok = self.report.check(
            "Hello gives the guest's feature count the job declares",
            not declared or self.hello.features == declared,
            f"{self.hello.features}, the job declares {declared}",
        )
        return ok and (not self.hidden or self.candidates())

    def candidates(self) -> bool:
        """Hidden: the guest's key and candidate sets, of the shape §6.9 gives."""
        assert self.hello is not None
        what = "boost_candidates (the guest's key and candidate sets) follow the key"
        env = expect(self.report, self.host, Kind.BOOST_CANDIDATES, self.party, what)
        if env is None:
            return False
        body = body_as(env.body, BoostCandidates)
        try:
            self.sets = reveal.check_candidates(
                self.job, self.party, body, "train", self.hello.rows, self.hello.features
            )
        except ProtocolError as exc:
            return self.report.check(
                "boost_candidates has the key and shape §6.9 gives", False, str(exc)
            )
        return self.report.check("boost_candidates has the key and shape §6.9 gives", True)

    def revealed(self, node: int, pick: int | None) -> np.ndarray | None:
        """Hidden: a masked request for ``node`` (a candidate, or a dummy); its set, unmasked."""
        assert self.sets is not None and self.hello is not None
        request, masks = self.sets.request(TREE, node, pick)
        self.host.channel.send(self.party, request, TREE)
        what = f"boost_reveal of node {node} is answered with boost_revealed"
        env = expect(self.report, self.host, Kind.BOOST_REVEALED, self.party, what)
        if env is None:
            return None
        try:
            full = self.sets.read(self.party, body_as(env.body, BoostRevealed), TREE, node, masks)
        except ProtocolError as exc:
            self.report.check(f"node {node}'s decryptions are the request's", False, str(exc))
            return None
        train = self.hello.train_rows or self.hello.rows
        return full[:train]

    def foreign_gradients(self) -> BoostGradients:
        """The next tree's gradients over its seed sample less its first row (a Host's choice)."""
        assert self.hello is not None
        train = self.hello.train_rows or self.hello.rows
        rows = sb.tree_rows(self.params, TREE + 1, train)[1:]
        plain = row_plaintexts(self.g[rows], self.h[rows], Layout(len(rows), self.key.bits))
        return BoostGradients(TREE + 1, rows, BigInts(tuple(trivial(self.key, plain))))

    def gradients(self, forged: bool = False) -> np.ndarray:
        """Send the tree's ``[[g, h, 1]]`` (ρ = 1, known values); return the tree's rows.

        With ``host_check`` the Host's proof follows; a forged one proves the rows with
        the first row's ``h`` one higher. Without it a forged one is any ``boost_proof``.
        """
        assert self.hello is not None
        train = self.hello.train_rows or self.hello.rows
        rows = sb.tree_rows(self.params, TREE, train)
        rng = np.random.default_rng(2024)
        self.g = np.zeros(train, dtype=np.int64)
        self.h = np.zeros(train, dtype=np.int64)
        self.g[rows] = rng.integers(-OFFSET, OFFSET + 1, len(rows))
        self.h[rows] = rng.integers(0, OFFSET // 4 + 1, len(rows))
        self.layout = Layout(len(rows), self.key.bits)
        plain = row_plaintexts(self.g[rows], self.h[rows], self.layout)
        self.tree_rows, self.plain = rows, plain
        values = BigInts(tuple(trivial(self.key, plain)))
        self.host.channel.send(self.party, BoostGradients(TREE, rows, values), TREE)
        if self.job.model.host_check:
            shown = list(plain)
            shown[0] += (1 << self.layout.count_bits) if forged else 0
            proof = proofs.prove_rows(
                self.private, TREE, values.values, shown, self.layout, proofs.Bounds()
            )
            self.host.channel.send(self.party, proof, TREE)
        elif forged:  # a job without the check: any boost_proof at all is refused
            one = BigInts((1,))
            empty = np.zeros(0, np.int64)
            proof = BoostProof(TREE, 0, one, BigInts((1, 1)), one, BigInts((1, 1)), one, empty)
            self.host.channel.send(self.party, proof, TREE)
        self.features = sb.tree_features(self.params, TREE, self.group, self.hello.features)
        features = self.hello.features
        self.columns = ColumnRule(self.params, TREE, self.group, features, self.binned(features))
        return rows

    def binned(self, features: int) -> np.ndarray | None:
        """The guest's demo training columns binned as §6.9 bins them; None for its own data."""
        if self.data is None or self.data.x_train.shape[1] != features:
            return None
        x = self.data.x_train
        return sb.bin_columns(x, sb.quantile_edges(x, self.params.bins))

    def name(self, level: int, nodes: dict[int, np.ndarray]) -> list[int]:
        """Send ``boost_nodes`` (shared) or ``boost_masked`` (hidden); the nodes answered for."""
        body, answered = self.naming(level, nodes)
        self.host.channel.send(self.party, body, TREE)
        return answered

    def naming(
        self, level: int, nodes: dict[int, np.ndarray], tree: int = TREE
    ) -> tuple[BoostNodes | BoostMasked, list[int]]:
        """The ``boost_nodes`` or ``boost_masked`` naming ``nodes``; the nodes answered for."""
        ids = sorted(nodes)
        if not self.hidden:
            return BoostNodes(tree, level, np.array(ids)), ids
        direct = hidden.direct_nodes(ids)
        plain: list[int] = []
        if direct:
            lanes = hidden.lanes(direct, self.layout, self.job.model.host_check)
            plain = hidden.level_plaintexts(
                self.plain, self.tree_rows, nodes, lanes, self.layout.slot
            )
        values = BigInts(tuple(trivial(self.key, plain)))
        body = BoostMasked(tree, level, np.array(ids), np.array(direct, np.int64), values)
        return body, direct or [0]

    def histograms(self, level: int, nodes: dict[int, np.ndarray]) -> dict[int, np.ndarray] | None:
        """Name ``nodes``; check and return their histograms ``(columns, bins, 3)`` by node."""
        report, bins = self.report, self.params.bins
        ids = self.name(level, nodes)
        kind = "boost_masked" if self.hidden else "boost_nodes"
        what = f"level {level}: {kind} {sorted(nodes)} is answered with a boost_histogram"
        env = expect(report, self.host, Kind.BOOST_HISTOGRAM, self.party, what)
        if env is None:
            return None
        body = body_as(env.body, BoostHistogram)
        report.check(
            f"level {level}: the histogram names the tree, level and nodes asked for {ids}",
            (body.tree, body.level, body.nodes.tolist()) == (TREE, level, ids),
            f"tree {body.tree}, level {body.level}, nodes {body.nodes.tolist()}",
        )
        shape = (len(self.features), bins)
        checked = self.job.model.host_check
        lanes = [ids]
        if self.hidden:
            lanes = hidden.lanes([] if ids == [0] else ids, self.layout, checked)
            want = sum(self.layout.packed(shape[0] * bins, len(lane)) for lane in lanes)
            rule = "Σ over lanes of ⌈columns·bins / ⌊k/m⌋⌉"
        else:
            rule = f"⌈nodes·columns·bins / {self.layout.per_ciphertext}⌉"
            want = self.layout.packed(len(ids) * shape[0] * bins)
            check_count(report, level, len(body.values), len(ids), self.layout, self.columns)
        if not report.check(
            f"level {level}: the histogram is packed: {rule} = {want} ciphertexts",
            len(body.values) == want,
            f"{len(body.values)} for {len(ids)} node(s) × {len(self.features)} columns × {bins}",
        ):
            return None
        plain = self.fresh.observe(
            f"boost_histogram (level {level})", body.values.values, holder=True
        )
        try:
            if self.hidden:
                hists = hidden.unpack_level(plain, lanes, shape, self.layout)
            else:
                flat = unpack_sums(plain, len(ids) * shape[0] * bins, self.layout)
                stacked = flat.reshape(len(ids), *shape, 3)
                hists = {node: stacked[i] for i, node in enumerate(ids)}
        except ProtocolError as exc:
            report.check(f"level {level}: every slot holds (Σg + c·2^20, Σh, c)", False, str(exc))
            return None
        wrong = []
        for node in ids:
            rows = nodes[node]
            total = np.array([self.g[rows].sum(), self.h[rows].sum(), len(rows)])
            bad = np.flatnonzero((hists[node].sum(axis=1) != total).any(axis=1))
            if bad.size:
                got = hists[node].sum(axis=1)[bad[0]].tolist()
                wrong.append(f"node {node} column {self.features[bad[0]]}: {got}, not {total}")
        report.check(
            f"level {level}: every column's bins add up to the node's Σg, Σh and row count",
            not wrong,
            "; ".join(wrong[:3]),
        )
        blocks = {node: (nodes[node], hists[node]) for node in ids}
        check_columns(report, level, blocks, self.columns, self.g, self.h)
        return hists

    def guest_split(self, node: int, rows: np.ndarray, hist: np.ndarray) -> np.ndarray | None:
        """``boost_split`` on the most balanced column and bin; check the partition against it."""
        report, party = self.report, self.party
        counts = hist[:, :-1, 2].cumsum(axis=1)  # rows at or below each bin but the last
        ok = (counts >= self.floor) & (len(rows) - counts >= self.floor)
        if not ok.any():
            report.check(f"node {node}'s histogram allows a split of the row floor", False)
            return None
        balance = np.where(ok, np.abs(2 * counts - len(rows)), np.iinfo(np.int64).max)
        column, bin_ = np.unravel_index(int(np.argmin(balance)), balance.shape)
        feature = int(self.features[column])
        if self.hidden:  # oblivious: the candidate's set over the training rows, cut
            pick = oblivious.candidate(feature, int(bin_), self.params.bins)
            full = self.revealed(node, pick)
            if full is None:
                return None
            left: np.ndarray = full[rows]
        else:
            self.host.channel.send(party, BoostSplit(TREE, node, feature, int(bin_)), TREE)
            what = f"boost_split of node {node} is answered with a boost_partition"
            env = expect(report, self.host, Kind.BOOST_PARTITION, party, what)
            if env is None:
                return None
            body = body_as(env.body, BoostPartition)
            left = body.left
            if not report.check(
                f"node {node}'s partition has one decision per row of the node",
                (body.tree, body.node) == (TREE, node) and len(left) == len(rows),
                f"tree {body.tree} node {body.node}, {len(left)} decisions for {len(rows)} rows",
            ):
                return None
        report.check(
            f"both children of node {node} hold at least the row floor ({self.floor})",
            min(int(left.sum()), int((~left).sum())) >= self.floor,
            f"{int(left.sum())} left, {int((~left).sum())} right",
        )
        below = hist[column, : bin_ + 1].sum(axis=0).tolist()
        got = [int(self.g[rows[left]].sum()), int(self.h[rows[left]].sum()), int(left.sum())]
        report.check(
            f"node {node}'s left rows are the histogram's bins ≤ the split bin (Σg, Σh, count)",
            got == below,
            f"the left rows give {got}, the bins {below}",
        )
        self.owned[node] = left
        return left

    def decisions(self, split: str, rows: int, tree_rows: dict[int, np.ndarray]) -> None:
        """``boost_decide``: a mask per node the guest split, its partitions on the tree rows."""
        report = self.report
        if self.hidden:  # the revealed sets hold the held-out rows: no boost_decide
            return
        self.host.channel.send(self.party, BoostDecide(TREE, 1, split), TREE)
        what = f"boost_decide ({split}) is answered with boost_decisions"
        env = expect(report, self.host, Kind.BOOST_DECISIONS, self.party, what)
        if env is None:
            return
        body = body_as(env.body, BoostDecisions)
        nodes = sorted(self.owned)
        if not report.check(
            f"{split} decisions: one mask of {rows} rows per node the guest split {nodes}",
            body.split == split
            and body.nodes.tolist() == [[TREE, n] for n in nodes]
            and body.left.shape == (len(nodes), rows),
            f"{body.split}, nodes {body.nodes.tolist()}, masks {body.left.shape}",
        ):
            return
        if split == "train":
            same = all(
                np.array_equal(body.left[i][tree_rows[n]], self.owned[n])
                for i, n in enumerate(nodes)
            )
            report.check("training decisions are the partitions the guest sent", same)


def boost_guest_script(target: Target) -> None:
    """Play the Server and the Host (key holder) against a running SecureBoost guest."""
    job, party, ending, report, process = target.parts()
    if job.model.depth < 2:
        raise ConfigError("SecureBoost guest conformance needs a job with depth >= 2")
    run = BoostGuestRun(job, party, report)
    try:
        if run.handshake():
            _one_tree(run, ending, process)
    finally:
        run.close()


def _one_tree(run: BoostGuestRun, ending: str, process: subprocess.Popen[bytes] | None) -> None:
    report, party, host = run.report, run.party, run.host
    stray: BoostMasked | BoostNodes
    if run.hidden:
        empty = BigInts(())
        stray = BoostMasked(TREE, 0, np.zeros(1, np.int64), np.zeros(0, np.int64), empty)
    else:
        stray = BoostNodes(TREE, 0, np.zeros(1, np.int64))
    host.raw(party, stray, session="another-session")
    kind = "boost_masked" if run.hidden else "boost_nodes"
    quiet(report, [host, run.server], party, f"a {kind} from another session is refused")
    if ending == "forged-proof":
        rows = run.gradients(forged=True)
        what = "a Host proof over other plaintexts than the gradients makes it Abort"
        probe, _ = run.naming(0, {0: rows})  # a guest that took the proof answers the root
        aborted = expect_abort(report, host, party, what, (probe, TREE))
        exits_nonzero(report, party, process, aborted)
        return
    rows = run.gradients()
    hists = run.histograms(0, {0: rows})
    if hists is None:
        return
    if ending != "finish":
        exits_nonzero(report, party, process, _violation(run, ending, len(rows)))
        return
    left = run.guest_split(0, rows, hists[0])
    if left is None:
        return
    children = {1: rows[left], 2: rows[~left]}
    level = run.histograms(1, children)
    if level is None:
        return
    if 2 not in level:  # hidden: the Host's (here the kit's) parent − sibling
        level[2] = hists[0] - level[1]
    split_rows = {0: rows}
    one = children[1]
    if len(one) >= 2 * run.floor and not run.hidden:  # the Host's own split of node 1
        mask = np.arange(len(one)) < len(one) // 2
        host.channel.send(party, BoostPartition(TREE, 1, mask), TREE)
    elif len(one) >= 2 * run.floor and run.revealed(1, None) is None:  # hidden: a dummy
        return
    if len(children[2]) < 2 * run.floor:  # a small sample (host_check's kit): no split fits
        click.echo(f"NOTE  node 2 holds {len(children[2])} rows, under 2·floor: not split")
    elif run.guest_split(2, children[2], level[2]) is not None:
        split_rows[2] = children[2]
    assert run.hello is not None
    train = run.hello.train_rows or run.hello.rows
    run.decisions("train", train, split_rows)
    run.decisions("test", run.hello.rows - train, split_rows)
    acknowledged(report, [host, run.server], party)
    check_randomness(report, run.fresh)
    host.channel.send(party, Finish(epochs=1, reason="conformance"), TREE)
    finished_cleanly(report, [host, run.server], party, run.job.party(party).endpoint, process)


def _violation(run: BoostGuestRun, ending: str, rows: int) -> bool:
    """One message the guest must refuse with an Abort (docs/protocol.md §6.9); whether
    it did.

    A violation the guest would answer (a node named) is its own probe; after one it
    would silently take (a partition, the next tree's gradients), the next level or
    tree's nodes are named at once: a guest that took the violation answers them.
    """
    host, party = run.host, run.party
    probe: BoostNodes | BoostMasked | None = None
    tree = TREE
    if ending == "repeated-node":
        what = "the root named again makes it Abort"
        run.name(0, {0: run.tree_rows})
    elif ending == "small-node":
        half = np.arange(rows) < (rows // 2 if run.hidden else run.floor - 1)
        if run.hidden:
            what = "a boost_partition in the hidden instance space makes it Abort"
        else:
            what = f"a partition leaving a child below the row floor ({run.floor}) makes it Abort"
        host.channel.send(party, BoostPartition(TREE, 0, half), TREE)
        probe, _ = run.naming(1, {1: run.tree_rows[half], 2: run.tree_rows[~half]})
    elif ending == "foreign-rows":
        what = "the next tree's gradients over rows not the seed's sample make it Abort"
        host.channel.send(party, run.foreign_gradients(), TREE + 1)
        tree = TREE + 1  # its root named (shared) or masked (hidden), as the next tree's
        probe, _ = run.naming(0, {0: run.tree_rows}, tree)
    elif run.hidden:
        what = "a node not of the level named makes it Abort"
        run.name(1, {3: run.tree_rows})
    else:
        what = "a node no partition defined makes it Abort"
        host.channel.send(party, BoostNodes(TREE, 1, np.array([1], np.int64)), TREE)
    return expect_abort(run.report, host, party, what, None if probe is None else (probe, tree))
