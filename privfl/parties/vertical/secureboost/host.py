"""The SecureBoost Host: holds the labels and the Paillier key; grows every tree.

Per tree: fresh ``[[g, h, 1]]`` per row to each guest (``boost_gradients``); per
level, the open nodes named to every guest (``boost_nodes``), whose packed encrypted
histograms it decrypts once each (``boost_histogram``, sizes it derives from the job);
the best split over every party by learning.secureboost.grow_tree; the winner told
its column and bin (``boost_split``) and its partition passed on (``boost_partition``).
With ``instance_space = "hidden"`` the nodes go out as ``boost_masked`` (per level, one
fresh ciphertext per row and lane of nodes), the right children's histograms are
derived here, no partition reaches a guest (hidden.py), and the winner is read from
the guest's candidate sets by one masked decryption per split node and guest, won or
not (oblivious.py); the evaluation's decisions come from the same sets.
After each tree, every guest's decisions on the training and held-out rows
(``boost_decisions``) update the scores, the metrics and early stopping.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from privfl.crypto.engine import POOL, Engine
from privfl.crypto.paillier import (
    PrivateKey,
    PublicKey,
    generate_keypair,
    private_primes,
)
from privfl.crypto.pools import NoisePool, decrypt_split
from privfl.data.views import PartyData
from privfl.errors import ConfigError, ProtocolError
from privfl.learning import secureboost as sb
from privfl.learning.taylor import sigmoid
from privfl.models.registry import model_entry
from privfl.parties import checkpoint
from privfl.parties.files import append_jsonl, open_private, write_json
from privfl.parties.label_draws import LabelDraw, check_agreement
from privfl.parties.session import PartyContext
from privfl.parties.vertical.facts import run_facts
from privfl.parties.vertical.handshake import announce, check_hello, check_rows, rows_digest
from privfl.parties.vertical.host_steps import FlipReport
from privfl.parties.vertical.keyproof import prove_key
from privfl.parties.vertical.secureboost import hidden, oblivious, proofs, report, reveal
from privfl.parties.vertical.secureboost.checks import (
    candidate_left,
    check_histogram,
    check_partition,
)
from privfl.parties.vertical.secureboost.common import (
    Layout,
    guest_features,
    params_of,
    row_plaintexts,
    unpack_sums,
)
from privfl.parties.vertical.secureboost.labels import (
    flip_report,
    label_facts,
    label_ledger,
    take_labels,
)
from privfl.protocol import fresh
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
from privfl.protocol.channel import Channel
from privfl.protocol.messages import (
    Checkpoints,
    Finish,
    Hello,
    Kind,
    PublicKeyMessage,
    Resume,
)

log = logging.getLogger("privfl.host")
GUESTS_SEE = {
    "shared": "fresh encryptions of the Host's g/h, the row set of every node "
    "(the instance space), and the bin of the splits they own; all computed from "
    "the flipped labels. " + report.SHARED_READS,
    "hidden": "fresh encryptions of the Host's g/h (per level, every row of the tree, in "
    "its node's slot or [[0]]), the ids of the open nodes, and one masked decryption "
    "request per split node (uniform to them: not which split won, nor whether theirs "
    "did); no node's rows; all computed from the flipped labels",
}


@dataclass
class RemoteGuest:
    """A guest's columns as the tree builder sees them: histograms decrypted here, splits there."""

    name: str
    group: int
    columns: int
    channel: Channel
    key: PrivateKey
    params: sb.BoostParams
    floor: int
    pool: NoisePool | None = None  # the Host's own workers, which decrypt in parallel
    layout: Layout | None = None
    asked: tuple[int, int, list[int]] | None = None  # tree, level, nodes
    decrypted: int = 0
    g: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # the tree's gradients
    h: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    rows: dict[int, np.ndarray] = field(default_factory=dict)  # asked nodes -> their rows
    hists: dict[int, sb.Histogram] = field(default_factory=dict)  # their decrypted histograms
    queued: list[BoostSplit] = field(default_factory=list)  # proposed; the first is out
    hidden: bool = False  # instance_space = "hidden": masked rows, no partitions (hidden.py)
    tree_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    plain: list[int] = field(default_factory=list)  # the tree's row plaintexts
    encrypted: int = 0  # masked ciphertexts sent (hidden mode)
    check: proofs.Bounds | None = None  # host_check: each row and mask proven (proofs.py)
    cts: tuple[int, ...] = ()  # the tree's row ciphertexts this guest got
    flags: dict[int, list[int]] = field(default_factory=dict)  # hidden check: node -> [[b]]s
    proven: int = 0  # bits and indicators encrypted and proven for this guest
    sets: reveal.HostSets | None = None  # hidden: the guest's key and candidate sets
    picks: dict[int, int] = field(default_factory=dict)  # hidden: node -> candidate won
    masks: dict[int, list[int]] = field(default_factory=dict)  # hidden: node -> its masks
    won: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)  # over train+test
    train_rows: int = 0  # hidden: where the held-out rows start in a candidate set
    requests: int = 0  # hidden: boost_reveal sent (one per split node)
    masked_values: int = 0  # hidden: mask encryptions under the guest's key

    def features(self, tree: int) -> np.ndarray:
        return sb.tree_features(self.params, tree, self.group, self.columns)

    def ask(self, tree: int, level: int, nodes: dict[int, np.ndarray]) -> None:
        ids = sorted(nodes)
        self.asked = (tree, level, ids)
        self.rows = dict(nodes)
        if self.hidden:
            msg, inside = self.masked(tree, level, ids)
            self.channel.send(self.name, msg, tree)
            if self.check is not None and inside:
                self.prove_masked(msg, inside)
        else:
            self.channel.send(self.name, BoostNodes(tree, level, np.array(ids, np.int64)), tree)

    def prove_masked(self, msg: BoostMasked, inside: list[int]) -> None:
        """Prove a level's masks; its nodes' indicators become the next level's parents.

        Under the check each lane holds one direct node (hidden.lane_width), so the
        lane ciphertexts are the per-node masked ciphertexts proofs.py proves.
        """
        direct = msg.direct.tolist()
        parents = proofs.parent_flags(self.flags, direct)
        proof = proofs.prove_masked(
            self.key, msg.tree, msg.level, self.cts, msg.values.values, inside, parents
        )
        self.prove(proof)
        public = self.key.public_key
        proofs.next_flags(public, self.flags, msg.nodes.tolist(), direct, proof.values.values)

    def prove(self, proof: BoostProof) -> None:
        self.proven += len(proof.values)
        self.channel.send(self.name, proof, proof.tree)

    def masked(self, tree: int, level: int, ids: list[int]) -> tuple[BoostMasked, list[int]]:
        """One fresh ciphertext per row and lane of the level's direct nodes (hidden.py),
        and with the check each row's 0/1 per lane (lanes of one node then)."""
        assert self.layout is not None
        direct = [] if level == 0 else hidden.direct_nodes(ids)
        plain: list[int] = []
        inside: list[int] = []
        if direct:
            lanes = hidden.lanes(direct, self.layout, self.check is not None)
            plain = hidden.level_plaintexts(
                self.plain, self.tree_rows, self.rows, lanes, self.layout.slot
            )
            if self.check is not None:
                inside = [
                    int(k)
                    for lane in lanes
                    for k in np.isin(self.tree_rows, self.rows[lane[0]]).tolist()
                ]
        noise = self.pool.take(len(plain)) if self.pool is not None and plain else None
        values = fresh.encrypt(self.key.public_key, plain, noise)
        self.encrypted += len(plain)
        named, chosen = np.array(ids, np.int64), np.array(direct, np.int64)
        return BoostMasked(tree, level, named, chosen, values), inside

    def histograms(self) -> dict[int, sb.Histogram]:
        """Exactly one histogram per named node, of the size the job implies, decrypted once.

        Each is checked against the node's rows (checks.check_histogram) and kept for
        the partition check of the node's split.
        """
        assert self.asked is not None and self.layout is not None
        tree, level, ids = self.asked
        self.asked = None
        body = self.channel.expect_body(BoostHistogram, {self.name})
        direct = (hidden.direct_nodes(ids) or [0]) if self.hidden else ids
        if (body.tree, body.level, body.nodes.tolist()) != (tree, level, direct):
            raise ProtocolError(f"{self.name} answered for other nodes than tree {tree} {direct}")
        shape = (len(self.features(tree)), self.params.bins)
        if self.hidden:
            checked = self.check is not None
            lanes = hidden.lanes([] if direct == [0] else direct, self.layout, checked)
            want = hidden.histogram_count(lanes, shape[0] * shape[1], self.layout)
        else:
            want = self.layout.packed(len(ids) * shape[0] * shape[1])
        if len(body.values) != want:
            raise ProtocolError(
                f"{self.name} sent {len(body.values)} histogram ciphertexts, expected {want}"
            )
        plain = decrypt_split(self.key, self.pool, body.values.values)
        self.decrypted += len(plain)
        if self.hidden:  # the right children from their parents, kept from the last level
            self.hists.update(hidden.unpack_level(plain, lanes, shape, self.layout))
            hidden.derive(self.hists, ids, direct)
        else:
            flat = unpack_sums(plain, len(ids) * shape[0] * shape[1], self.layout)
            hists = flat.reshape(len(ids), *shape, 3)
            self.hists = {node: hists[i] for i, node in enumerate(ids)}
        for node in ids:
            check_histogram(self.name, node, self.hists[node], self.g, self.h, self.rows[node])
        return {node: self.hists[node] for node in ids}

    def propose(self, tree: int, node: int, feature: int, bin_: int) -> None:
        """Queue a won split and send it if none of this guest's is out.

        One at a time: a guest that crafted its histograms is caught at that split's
        partition (checks.check_partition) before it is told another winner. Hidden:
        only noted; the guest is never told (``reveal``).
        """
        if self.sets is not None:
            self.picks[node] = oblivious.candidate(feature, bin_, self.params.bins)
            return
        self.queued.append(BoostSplit(tree, node, feature, bin_))
        if len(self.queued) == 1:
            self.channel.send(self.name, self.queued[0], tree)

    def reveal(self, tree: int, nodes: list[int]) -> None:
        """Hidden: one masked decryption request per split node, the won candidate's
        sets or a dummy: the guest cannot tell which (oblivious.py)."""
        if self.sets is None:
            return
        for node in nodes:
            request, self.masks[node] = self.sets.request(tree, node, self.picks.pop(node, None))
            self.channel.send(self.name, request, tree)
            self.requests += 1
            self.masked_values += len(request.values)

    def revealed(self, tree: int, node: int) -> np.ndarray:
        """The guest's answer to a node's request, unmasked: a set over train+test rows."""
        assert self.sets is not None
        body = self.channel.expect_body(BoostRevealed, {self.name})
        return self.sets.read(self.name, body, tree, node, self.masks.pop(node))

    def split(self, tree: int, node: int, rows: np.ndarray, feature: int, bin_: int) -> np.ndarray:
        if self.sets is not None:  # hidden: the won candidate's set, cut to the node
            full = self.revealed(tree, node)
            self.won[(tree, node)] = full
            cut = full[: self.train_rows][self.tree_rows]
            left = hidden.node_left(self.name, cut, self.tree_rows, rows, self.floor)
            won = candidate_left(self.hists[node], self.features(tree), feature, bin_)
            check_partition(self.name, node, won, self.g, self.h, rows[left])
            return left
        body = self.channel.expect_body(BoostPartition, {self.name})
        if (body.tree, body.node) != (tree, node) or len(body.left) != len(rows):
            raise ProtocolError(f"{self.name} sent the partition of another node")
        elif min(int(body.left.sum()), int((~body.left).sum())) < self.floor:
            raise ProtocolError(f"{self.name}'s split leaves a child below {self.floor} rows")
        else:
            left = body.left
        won = candidate_left(self.hists[node], self.features(tree), feature, bin_)
        check_partition(self.name, node, won, self.g, self.h, rows[left])
        self.queued.pop(0)
        if self.queued:
            self.channel.send(self.name, self.queued[0], tree)
        return left

    def learn(self, tree: int, node: int, left: np.ndarray) -> None:
        if self.sets is not None:  # hidden: the dummy's answer, read and dropped
            self.revealed(tree, node)
            return
        self.channel.send(self.name, BoostPartition(tree, node, left.astype(np.bool_)), tree)

    def ask_decisions(self, tree: int, split: str) -> None:
        """Ask for this guest's left masks of one tree on a split's rows (``decisions`` reads)."""
        self.channel.send(self.name, BoostDecide(tree, 1, split), tree)

    def decisions(self, tree: int, split: str, rows: int, owned: set[int]) -> dict[int, np.ndarray]:
        """The asked-for left masks of this guest's nodes (``owned``), in the order asked."""
        body = self.channel.expect_body(BoostDecisions, {self.name})
        got = check_decisions(self.name, body, tree, split, rows)
        if set(got) != owned or len(body.nodes) != len(owned):
            raise ProtocolError(f"{self.name} sent decisions for other nodes than it owns")
        return got


def check_decisions(
    guest: str, body: BoostDecisions, tree: int, split: str, rows: int
) -> dict[int, np.ndarray]:
    """The decisions of one tree for ``rows`` rows, as node -> mask."""
    if body.tree != tree or body.split != split or body.left.shape[1:] != (rows,):
        raise ProtocolError(f"{guest} sent decisions for another tree, split or row count")
    return {int(n): body.left[i] for i, (t, n) in enumerate(body.nodes.tolist()) if t == tree}


@dataclass
class HostBoost:
    """The Host's data, key, booster state and metrics."""

    data: PartyData  # y_train is None here: only the flipped labels below are kept
    labels: np.ndarray
    flip: FlipReport
    params: sb.BoostParams
    key: PrivateKey
    noise: NoisePool
    local: sb.LocalColumns
    guests: list[RemoteGuest]
    edges: np.ndarray
    test_binned: np.ndarray
    base: float
    margin: np.ndarray = field(init=False)
    test_margin: np.ndarray = field(init=False)
    trees: list[sb.Tree] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)
    encrypted: int = 0
    seeded_noise: bool = False  # the flips came from a caller's seeded generator: not private

    def __post_init__(self) -> None:
        self.margin = np.full(len(self.labels), self.base)
        self.test_margin = np.full(len(self.data.x_test), self.base)

    @property
    def public(self) -> PublicKey:
        return self.key.public_key


def handshake(ctx: PartyContext, data: PartyData) -> PrivateKey:
    """Hello to the Server, the guests' Hellos checked, our own key pair sent to every guest."""
    job = ctx.job
    digest = rows_digest(ctx, data.train_ids, data.test_ids)
    announce(ctx, "host", data.rows, data.x_train.shape[1], [job.server], digest, len(data.x_train))
    for sender, hello in ctx.channel.gather(Hello, job.guests).items():
        check_hello(ctx, sender, hello)
        if hello.rows != data.rows or hello.features != guest_features(job, sender):
            raise ConfigError(
                f"{sender} has {hello.rows} rows and {hello.features} features; the host has "
                f"{data.rows} rows and the job declares {guest_features(job, sender)} features"
            )
        check_rows(sender, hello.rows_digest, digest, "the host's")
    public, private = generate_keypair(job.key_bits, job.obfuscation)
    log.info("generated a %d-bit Paillier key pair for boosting (%s)", public.bits, job.obfuscation)
    proof = prove_key(private, session=job.session, kind=Kind.PUBLIC_KEY, sender=ctx.name)
    key = PublicKeyMessage(n=public.n, bits=public.bits, h_s=public.h_s, proof=proof)
    ctx.channel.broadcast(job.guests, key)
    return private


def take_candidates(ctx: PartyContext, data: PartyData, guests: list[RemoteGuest]) -> None:
    """Hidden: every guest's key and candidate sets over the training then held-out rows."""
    rows = len(data.x_train) + len(data.x_test)
    seed = reveal.host_seed(ctx.out, ctx.job.fingerprint())  # one per job: every start's masks
    for name, body in ctx.channel.gather(BoostCandidates, ctx.job.guests).items():
        guest = next(g for g in guests if g.name == name)
        guest.sets = reveal.check_candidates(
            ctx.job, name, body, "train", rows, guest.columns, seed
        )
        guest.train_rows = len(data.x_train)


def run_boost_host(
    ctx: PartyContext,
    data: PartyData,
    workers: int = 1,
    label_rng: np.random.Generator | None = None,
    redraw_labels: bool = False,
    engine: Engine = POOL,
) -> dict[str, Any]:
    """Train every tree with the guests, evaluate after each, finish, write the outputs.

    ``label_rng``: None (always, outside tests and experiments) draws the label flips
    from the OS CSPRNG; a seeded generator makes the run reproducible and not private.
    The flips are drawn once per job and reused on every start (parties/label_draws.py);
    ``redraw_labels`` (the operator's ``--redraw-labels``) draws anew and books the ε.
    """
    start = time.monotonic()
    job = ctx.job
    if data.y_train is None or data.y_test is None:
        raise ConfigError("the host needs the label column")
    params = params_of(job)
    drawn = take_labels(ctx, data.y_train, label_rng, redraw_labels)  # before any message
    key = handshake(ctx, data)
    public = key.public_key  # the Host's own workers: CRT obfuscators (docs/security.md)
    # Next tree's obfuscators are background work (niced): they fill the waits between
    # levels instead of taking cores from the guest's sums and our own decryptions.
    noise = engine.pool(public.n, workers, public.h_s, primes=private_primes(key))
    try:
        state = init_state(ctx, data, params, key, noise, drawn)
        if ctx.job.model.instance_space == "hidden":
            take_candidates(ctx, data, state.guests)
        first = len(sb.tree_rows(params, 0, len(state.labels))) * len(state.guests)
        noise.prefetch(first, bulk=True)
        resume_host(ctx, state, drawn)
        reason = train(ctx, state)
    finally:
        noise.close()
    ctx.channel.broadcast([*job.guests, job.server], Finish(len(state.trees), reason))
    return finish(ctx, state, round(time.monotonic() - start, 3), reason)


def init_state(
    ctx: PartyContext,
    data: PartyData,
    params: sb.BoostParams,
    key: PrivateKey,
    noise: NoisePool,
    drawn: LabelDraw,
) -> HostBoost:
    """Start from the job's one label draw (ε-label-DP, before the first gradient).

    The true training labels are dropped: the state keeps only the flipped ones.
    """
    labels, flip, seeded = drawn.labels, flip_report(drawn), bool(drawn.info["seeded"])
    edges = sb.quantile_edges(data.x_train, params.bins)
    floor = sb.node_floor(params.min_child_weight)
    hidden = ctx.job.model.instance_space == "hidden"
    guests = [
        RemoteGuest(
            g,
            i + 1,
            guest_features(ctx.job, g),
            ctx.channel,
            key,
            params,
            floor,
            noise,
            hidden=hidden,
            check=proofs.Bounds() if ctx.job.model.host_check else None,
        )
        for i, g in enumerate(ctx.job.guests)
    ]
    return HostBoost(
        data=replace(data, y_train=None),
        labels=labels,
        flip=flip,
        seeded_noise=seeded,
        params=params,
        key=key,
        noise=noise,
        local=sb.LocalColumns(sb.bin_columns(data.x_train, edges), params, 0),
        guests=guests,
        edges=edges,
        test_binned=sb.bin_columns(data.x_test, edges),
        base=sb.base_margin(labels),
    )


def train(ctx: PartyContext, state: HostBoost) -> str:
    """Grow trees until the last one, or until early stopping; returns the stop reason."""
    params = state.params
    metrics = ctx.out / "metrics.jsonl"
    for t in range(len(state.trees), params.trees):
        began = time.monotonic()
        tree = grow(ctx, state, t)
        record = evaluate(state, t, tree)
        record["seconds"] = round(time.monotonic() - began, 3)
        state.records.append(record)
        append_jsonl(metrics, record)
        save_host(ctx, state)
        log.info(
            "tree %d: valid logloss %.4f, AUC %.4f", t + 1, record["valid_logloss"], record["auc"]
        )
        if stop_early(state):
            best = best_trees(state)
            del state.trees[best:]
            return "early_stopping"
    return "max_trees"


def grow(ctx: PartyContext, state: HostBoost, t: int) -> sb.Tree:
    """One tree: fresh gradients to every guest, then grow_tree over every party's columns."""
    g, h = sb.gradients(state.margin, state.labels)
    state.local.set_gradients(g, h)
    rows = sb.tree_rows(state.params, t, len(state.labels))
    layout = Layout(len(rows), state.public.bits)
    plain = row_plaintexts(g[rows], h[rows], layout)
    for guest in state.guests:
        guest.layout, guest.g, guest.h = layout, g, h
        guest.tree_rows, guest.plain, guest.hists = rows, plain, {}
        values = fresh.encrypt(state.public, plain, state.noise.take(len(plain)))
        state.encrypted += len(plain)
        ctx.channel.send(guest.name, BoostGradients(t, rows, values), t)
        guest.cts = values.values
        guest.flags = {0: proofs.root_flags(state.public, len(rows))}
        if guest.check is not None:
            guest.prove(proofs.prove_rows(state.key, t, values.values, plain, layout, guest.check))
        if guest.hidden:  # this tree's masked levels, computed while the guest sums the root
            per_row = hidden.masked_bound(state.params.depth, layout, guest.check is not None)
            state.noise.prefetch(per_row * len(plain), bulk=True)
        if t + 1 < state.params.trees:
            state.noise.prefetch(len(plain), bulk=True)
    return sb.grow_tree(t, rows, g, h, [state.local, *state.guests], state.params)


def evaluate(state: HostBoost, t: int, tree: sb.Tree) -> dict[str, Any]:
    """Route the training and held-out rows through the new tree; metrics on the held-out rows."""
    from privfl.learning.metrics import binary_metrics

    state.trees.append(tree)
    splits = (
        ("train", state.local.binned, state.margin),
        ("test", state.test_binned, state.test_margin),
    )
    asked = [g for g in state.guests if g.sets is None]  # hidden: the sets are here
    for split, _, _ in splits:  # both asked before either is read: one wait per guest
        for guest in asked:
            guest.ask_decisions(t, split)
    for split, binned, margin in splits:
        decide = sb.local_decisions(tree, 0, binned)
        for guest in state.guests:
            owned = {n for n, node in tree.items() if node.group == guest.group}
            if guest.sets is None:
                decide.update(guest.decisions(t, split, len(binned), owned))
                continue
            at = slice(0, guest.train_rows) if split == "train" else slice(guest.train_rows, None)
            decide.update({n: guest.won[(t, n)][at] for n in owned})
        margin += sb.route(tree, decide, len(binned))
    y_test = state.data.y_test
    assert y_test is not None
    record: dict[str, Any] = {"tree": t}
    record["train_logloss"] = sb.logloss(state.labels, state.margin)  # the flipped labels
    record["loss"] = record["train_logloss"]  # what the progress bars show
    record["valid_logloss"] = sb.logloss(y_test, state.test_margin)
    record.update(binary_metrics(y_test, sigmoid(state.test_margin)))
    return record


def best_trees(state: HostBoost) -> int:
    """How many trees gave the lowest held-out logloss (the first such prefix)."""
    losses = [r["valid_logloss"] for r in state.records]
    return int(np.argmin(losses)) + 1


def stop_early(state: HostBoost) -> bool:
    rounds = state.params.early_stopping_rounds
    return bool(rounds) and len(state.records) - best_trees(state) >= rounds


def agree(ctx: PartyContext, offered: list[int], drawn: LabelDraw) -> int:
    """The latest tree count every guest and we hold a checkpoint of (the Server keeps none).

    A ``--resume`` start with none in common would start over on the saved label draw:
    refused (label_draws.check_agreement), every party keeping its checkpoints.
    """
    guests = ctx.job.guests
    offers = ctx.channel.gather(Checkpoints, guests)
    common = set(offered)
    for offer in offers.values():
        common &= set(offer.completed.tolist())
    completed = max(common, default=0)
    check_agreement(drawn, ctx.resume, completed)
    ctx.channel.broadcast(guests, Resume(completed=completed))
    return completed


def resume_host(ctx: PartyContext, state: HostBoost, drawn: LabelDraw) -> None:
    """Agree with the guests; restore the trees, scores and metrics of the trees kept."""
    metrics = ctx.out / "metrics.jsonl"
    completed = agree(ctx, checkpoint.available(ctx) if ctx.resume else [], drawn)
    if not completed:
        metrics.unlink(missing_ok=True)
        return
    saved = checkpoint.load(ctx, completed)
    state.trees = [report.tree_from_json(t) for t in saved["trees"]]
    state.margin = np.array(saved["margin"], dtype=np.float64)
    state.test_margin = np.array(saved["test_margin"], dtype=np.float64)
    state.records = saved["records"]
    # The flipped labels need no restoring: init_state took them from the job's one
    # label draw (label-draw.json), which every start of this job reuses.
    with open_private(metrics) as handle:  # 0600 like every run file (parties/files.py)
        handle.write("".join(report.json_line(r) for r in state.records))
    for guest in state.guests:  # they continue from the same tree
        guest.layout = None
    log.info("resuming after %d trees", completed)


def save_host(ctx: PartyContext, state: HostBoost) -> None:
    checkpoint.save(
        ctx,
        len(state.trees),
        {
            "trees": [report.tree_to_json(t) for t in state.trees],
            "margin": state.margin.tolist(),
            "test_margin": state.test_margin.tolist(),
            "records": state.records,
        },
    )


def finish(ctx: PartyContext, state: HostBoost, wall: float, reason: str) -> dict[str, Any]:
    """Write model.json, the plots and summary.json; return the summary."""
    model = report.host_model(ctx, state.data, state.trees, state.edges, state.base)
    write_json(ctx.out / "model.json", model)
    gains = report.importance(ctx, state.trees, state.data.feature_names)
    if ctx.plots:
        report.plot(state.records, gains, ctx.out)
    kept = len(state.trees)
    last = state.records[kept - 1] if kept else {}
    job = ctx.job
    summary: dict[str, Any] = {
        "model": model_entry(ctx.job.model.kind, **report.vars_of(state.params)),
        **{k: last.get(k) for k in ("accuracy", "precision", "recall", "f1", "auc")},
        "valid_logloss": last.get("valid_logloss"),
        "trees": kept,
        "trees_grown": len(state.records),
        "tree_seconds": [r["seconds"] for r in state.records],
        "history": state.records,
        "importance_by_gain": gains,
        "importance_by_party": {p: sum(v.values()) for p, v in gains.items()},
        "instance_space": job.model.instance_space,
        "encryptions": state.encrypted + sum(g.encrypted for g in state.guests),
        "decryptions": sum(g.decrypted for g in state.guests),
        "oblivious_selection": {  # hidden: the guests' keys (oblivious.py)
            "requests": sum(g.requests for g in state.guests),
            "masks_encrypted": sum(g.masked_values for g in state.guests),
        },
        "host_check": {
            "on": job.model.host_check,
            "proven": sum(g.proven for g in state.guests),
        },
        **label_facts(job, state.flip, state.seeded_noise),
        "privacy": {
            "label_dp": label_ledger(job, state.seeded_noise),
            "guests_see": GUESTS_SEE[job.model.instance_space],
            "host_sees": "per-bin sums of its own g/h and row counts of every guest column "
            "at every node, the guests' split decisions on training and held-out rows",
            "server_sees": "Hello messages only",
        },
        **run_facts(
            job,
            wall=wall,
            reason=reason,
            train_rows=len(state.labels),
            test_rows=len(state.data.x_test),
        ),
    }
    write_json(ctx.out / "summary.json", summary)
    return summary
