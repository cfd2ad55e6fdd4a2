"""Attack: an honest SecureBoost guest reads the other parties' partitions from its inbox.

With ``instance_space = "shared"`` (the leaky arm) the Host forwards every partition it
or another guest made (``boost_partition``), so the guest knows each training row's
leaf in every tree and 2-means on that reads the labels
(tests/attacks/test_secureboost_partition_labels.py). With ``"hidden"`` the guest's
inbox holds no partition at all: per level it gets ``boost_masked``, one fresh
ciphertext for *every* row of the tree per lane of direct nodes (the row's value in its
node's slot, ``[[0]]`` outside them), so neither the lengths nor the values (all
distinct, IND-CPA) depend on which rows are in a node. The attacker below derives
every row set it can from what it receives and is left with none of another party's
splits; the leaf clustering has nothing to run on. The Host still holds a hidden-mode
guest to its won candidate.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from helpers import decoded_traffic, failures, memory_job, party_data, read_model, run_in_threads
from sklearn.cluster import KMeans

from privfl.config.vertical import JobConfig, ModelConfig
from privfl.crypto.engine import POOL
from privfl.crypto.paillier import generate_keypair
from privfl.crypto.pools import NoisePool
from privfl.errors import PeerAborted, ProtocolError
from privfl.learning import secureboost as sb
from privfl.parties.vertical import keyproof
from privfl.parties.vertical.secureboost import hidden, oblivious, reveal
from privfl.parties.vertical.secureboost.common import Layout, row_plaintexts
from privfl.parties.vertical.secureboost.guest import GuestBoost, step
from privfl.parties.vertical.secureboost.ledger import Ledger, unkept
from privfl.protocol import fresh
from privfl.protocol.bigints import BigInts
from privfl.protocol.boost_messages import (
    BoostCandidates,
    BoostGradients,
    BoostHistogram,
    BoostMasked,
    BoostNodes,
    BoostPartition,
    BoostReveal,
    BoostRevealed,
    BoostSplit,
)
from privfl.protocol.memory import InMemoryHub

GUEST = "guest-1"
MAJORITY = 1  # breast cancer: benign (public knowledge)


def boost_job(space: str, trees: int = 10) -> JobConfig:
    model = ModelConfig(kind="secureboost", trees=trees, depth=3, bins=32, instance_space=space)
    return replace(memory_job(1, timeout=120.0), model=model)  # no label DP: the worst case


def traffic(hub: InMemoryHub, guest: str) -> list[tuple[str, object]]:
    """Every message body the guest received or sent, in order, with its sender."""
    return [(s, body) for s, r, _, body in decoded_traffic(hub) if guest in (s, r)]


def derive(seen: list[tuple[str, object]]) -> dict[tuple[int, int], np.ndarray]:
    """The attacker: every (tree, node) -> left rows it can derive, its own splits included.

    A partition says something only of a node whose rows the guest already knows (the
    root, or a child of a node it derived); hidden mode's own partitions cover every
    row of the tree, so they fit the root alone.
    """
    rows: dict[int, dict[int, np.ndarray]] = {}
    found: dict[tuple[int, int], np.ndarray] = {}
    for _, body in seen:
        if isinstance(body, BoostGradients):
            rows[body.tree] = {0: np.asarray(body.rows)}
        elif isinstance(body, BoostPartition):
            members = rows[body.tree].get(body.node)
            if members is not None and len(members) == len(body.left):
                found[(body.tree, body.node)] = members[body.left]
                rows[body.tree][2 * body.node + 1] = members[body.left]
                rows[body.tree][2 * body.node + 2] = members[~body.left]
    return found


def leaves(found: dict, rows: int, trees: int) -> list[np.ndarray]:
    """Per tree, each row's deepest derived node (the root where nothing is derived)."""
    out = []
    for t in range(trees):
        leaf = np.zeros(rows, np.int64)
        for (tree, node), left in sorted(found.items(), key=lambda kv: kv[0][1]):
            if tree == t:
                below = np.isin(np.arange(rows), left)
                leaf[(leaf == node) & below] = 2 * node + 1
                leaf[(leaf == node) & ~below] = 2 * node + 2
        out.append(leaf)
    return out


def two_means(views: list[np.ndarray]) -> np.ndarray:
    one_hot = np.hstack([(v[:, None] == np.unique(v)).astype(float) for v in views])
    cluster = KMeans(n_clusters=2, n_init=10, random_state=0).fit_predict(one_hot)
    return np.where(cluster == int(np.bincount(cluster).argmax()), MAJORITY, 1 - MAJORITY)


@pytest.mark.parametrize("space", ["shared", "hidden"])
def test_a_guest_derives_no_partition_of_another_partys_split(space: str, tmp_path: Path) -> None:
    # Prepare / act: a full run, every message the guest receives recorded.
    job = boost_job(space)
    hub = InMemoryHub()
    results = run_in_threads(job, hub, tmp_path)
    assert not failures(results), failures(results)
    own = {(s["tree"], s["node"]) for s in read_model(tmp_path, GUEST)["splits"]}
    seen = traffic(hub, GUEST)
    found = derive(seen)
    others = set(found) - own
    if space == "shared":  # the leak: the Host's splits' row sets, and the labels with them
        y = party_data(job)[job.host].y_train
        assert y is not None
        guess = two_means(leaves(found, len(y), job.model.trees))
        assert len(others) >= 10
        assert float((guess == y).mean()) >= 0.90  # 0.969 (test_secureboost_partition_labels)
        return
    assert not others  # not one row set of a split the guest did not make
    received = [body for sender, body in seen if sender != GUEST]
    assert not any(isinstance(b, (BoostPartition, BoostNodes)) for b in received)
    masked = [b for b in received if isinstance(b, BoostMasked)]
    assert masked, "the hidden mode named no node"
    tree_rows = {b.tree: len(b.rows) for b in received if isinstance(b, BoostGradients)}
    for body in masked:  # full length whatever the nodes hold: one lane at depth 3
        assert len(body.values) == (tree_rows[body.tree] if len(body.direct) else 0)
    values = [
        v for b in received if isinstance(b, BoostMasked | BoostGradients) for v in b.values.values
    ]
    assert len(set(values)) == len(values)  # every ciphertext fresh: no [[0]] twice


# --- the guest's rules in hidden mode (in memory, small key) --------------------------

KEY = generate_keypair(512)


def hidden_guest(rows: int = 40) -> GuestBoost:
    data = party_data(memory_job(1))[GUEST]
    data = replace(data, x_train=data.x_train[:rows])
    params = sb.BoostParams(trees=2, depth=3, bins=8)
    public = KEY[0]
    noise = NoisePool(public.n, 1)
    return GuestBoost(data=data, key=public, params=params, group=1, noise=noise, hidden=True)


def start(state: GuestBoost) -> None:
    rows = len(state.data.x_train)
    at = np.arange(rows, dtype=np.int64)
    layout = Layout(rows, state.key.bits)
    plain = row_plaintexts(np.zeros(rows, np.int64), np.full(rows, 1000, np.int64), layout)
    step(state, BoostGradients(0, at, fresh.encrypt(state.key, plain)))


def masked(state: GuestBoost, level: int, nodes: list[int], direct: list[int]) -> BoostMasked:
    rows = len(state.data.x_train)
    lanes = len(hidden.lanes(direct, Layout(rows, state.key.bits))) if direct else 0
    values = fresh.encrypt(state.key, [0] * (rows * lanes))
    ids = np.array(nodes, np.int64)
    return BoostMasked(0, level, ids, np.array(direct, np.int64), values)


def with_sets(state: GuestBoost) -> reveal.HostSets:
    """The guest's candidate sets (its own key: KEY here) and the Host's view of them."""
    rows = len(state.data.x_train)
    count = oblivious.shape(rows, KEY[0].bits)[1]
    state.sets = reveal.GuestSets(Ledger(KEY[1], None), rows, count)
    sets = oblivious.candidate_sets(state.binned["train"], state.params.bins)
    values = KEY[0].encrypt(oblivious.pack(sets, KEY[0].bits))
    return reveal.HostSets(KEY[0], rows, count, tuple(values))


def ask(state: GuestBoost, held: reveal.HostSets, node: int, pick: int | None) -> np.ndarray:
    request, masks = held.request(0, node, pick)
    answer = step(state, request)
    assert isinstance(answer, BoostRevealed)
    return held.read(GUEST, answer, 0, node, masks)


def test_an_honest_hidden_sequence_is_answered() -> None:
    state = hidden_guest()
    held = with_sets(state)
    start(state)
    assert isinstance(step(state, masked(state, 0, [0], [])), BoostHistogram)
    pick = oblivious.candidate(1, 3, state.params.bins)
    left = ask(state, held, 0, pick)  # the Host reads column 1's left set at bin 3
    assert np.array_equal(left, state.binned["train"][:, 1] <= 3)
    assert isinstance(step(state, masked(state, 1, [1, 2], [1])), BoostHistogram)
    ask(state, held, 2, None)  # a dummy: the guest cannot tell it from a pick


def test_a_guest_decrypts_one_request_per_split_node_of_the_right_size() -> None:
    state = hidden_guest()
    held = with_sets(state)
    start(state)
    step(state, masked(state, 0, [0], []))
    with pytest.raises(ProtocolError, match="decryption request for tree 0 node 1"):
        ask(state, held, 1, 0)  # a node not named at this level
    ask(state, held, 0, 0)
    with pytest.raises(ProtocolError, match="a second or unexpected decryption request"):
        ask(state, held, 0, 5)  # the same node again: a second set's worth of bits
    step(state, masked(state, 1, [1, 2], [1]))
    extra = fresh.encrypt(KEY[0], [1] * (held.count + 1))
    with pytest.raises(ProtocolError, match=f"{held.count + 1} ciphertexts to decrypt"):
        step(state, BoostReveal(0, 1, extra))
    with pytest.raises(ProtocolError, match="may not name a split"):
        step(state, BoostSplit(0, 1, 1, 3))  # the Host may not tell the guest it won


def test_a_guest_reads_nothing_from_its_decryptions() -> None:
    # The attacker: the guest matches each decryption against every candidate set it holds.
    state = hidden_guest(rows=40)
    held = with_sets(state)
    sets = oblivious.candidate_sets(state.binned["train"], state.params.bins)
    per = oblivious.shape(40, KEY[0].bits)[0]

    def named(values: tuple[int, ...]) -> bool:
        low = KEY[1].decrypt([values[0]])[0] & ((1 << per) - 1)
        bits = np.array([(low >> i) & 1 for i in range(40)], np.bool_)
        return any(np.array_equal(bits, s) for s in sets)

    pick = oblivious.candidate(2, 4, state.params.bins)
    request, _ = held.request(0, 0, pick)
    # Leaky arm: without the Host's mask the decryption is the won set itself.
    unmasked = held.values[pick * held.count : (pick + 1) * held.count]
    assert named(unmasked)
    assert not named(request.values.values)  # masked: uniform mod N, no candidate's bits


@pytest.mark.parametrize("padded", [True, False], ids=["pads", "leaky-no-pads"])
def test_a_combination_request_reads_one_set_not_many(
    padded: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The attack: one request that is no candidate's ciphertexts but Π c_k^(2^(per·k)),
    # every candidate set of column 0 shifted into its own window of the plaintext,
    # masked and re-randomised as a real request is. The guest decrypts it (the count
    # and node are right; it cannot see the plaintext). Without the pads above each
    # set's bits every window is a set (leaky arm); with them, none.
    if not padded:
        monkeypatch.setattr(oblivious.secrets, "randbits", lambda bits: 0)
    state = hidden_guest(rows=40)
    held = with_sets(state)
    start(state)
    step(state, masked(state, 0, [0], []))
    per = oblivious.shape(40, KEY[0].bits)[0]
    windows = (KEY[0].bits - 2) // per  # 12 sets of 40 bits in one 512-bit plaintext
    n2 = KEY[0].nsquare
    combined = 1
    for k in range(windows):
        combined = combined * pow(held.values[k], 1 << (per * k), n2) % n2
    values, masks = fresh.mask(KEY[0], [combined])
    answer = step(state, BoostReveal(0, 0, values))
    assert isinstance(answer, BoostRevealed)

    plain = (answer.values.values[0] - masks[0]) % KEY[0].n
    sets = oblivious.candidate_sets(state.binned["train"], state.params.bins)
    read = [
        np.array([(plain >> (per * k + i)) & 1 for i in range(40)], np.bool_)
        for k in range(windows)
    ]
    named = sum(np.array_equal(bits, sets[k]) for k, bits in enumerate(read))
    if not padded:
        assert named == windows  # 12 candidate sets from one decryption
        return
    # With the pads every shifted term is |N|-wide and the sum wraps mod N: not even the
    # lowest window is a set (each window matching one by chance: 31·2^-40)
    assert named == 0


def honest_candidates(job: JobConfig, rows: int) -> tuple[reveal.GuestSets, BoostCandidates]:
    """A guest's own key and its real ``boost_candidates`` over ``rows`` training rows."""
    binned = hidden_guest(rows).binned["train"]
    return reveal.candidates(
        job, GUEST, binned, "train", POOL, 1, unkept(job.key_bits, job.obfuscation)
    )


@pytest.mark.parametrize(
    ("lie", "refusal"),
    [
        ({"rows": 39}, "candidate sets of 39 rows"),
        ({"candidates": 1}, "sent 1 candidate sets"),
        ({"split": "rows"}, r"\(rows\)"),
        ({"values": "twice"}, "candidate ciphertexts, expected"),
        ({"values": "zero"}, "candidate sets are malformed"),
        ({"proof": "another session's"}, "modulus proof"),
    ],
    ids=[
        "fewer-rows",
        "fewer-candidates",
        "prediction-sets",
        "two-per-set",
        "not-a-unit",
        "replayed-proof",
    ],
)
def test_the_host_refuses_candidate_sets_of_another_shape(lie: dict, refusal: str) -> None:
    # A guest that lies about its rows or sends sets the Host cannot use is refused in
    # one line naming it, before any of its ciphertexts is used; a proof of its key made
    # for another session is refused too (the proof binds the session).
    job = boost_job("hidden", trees=1)
    sets, body = honest_candidates(job, 40)
    columns = hidden_guest(40).binned["train"].shape[1]
    reveal.check_candidates(job, GUEST, body, "train", 40, columns)  # the honest sets pass
    change = dict(lie)
    if change.get("values") == "twice":  # two plaintexts a set where the key needs one
        change["values"] = BigInts(body.values.values * 2)
    elif change.get("values") == "zero":
        change["values"] = BigInts((0, *body.values.values[1:]))
    elif change.get("proof"):
        session = job.session[::-1]
        change["proof"] = keyproof.prove_key(
            sets.key, session=session, kind=reveal.KIND, sender=GUEST
        )

    with pytest.raises(ProtocolError, match=refusal) as refused:
        reveal.check_candidates(job, GUEST, replace(body, **change), "train", 40, columns)
    assert "\n" not in str(refused.value) and GUEST in str(refused.value)


def test_a_level_of_many_nodes_is_one_pass_per_lane_and_equals_numpy() -> None:
    # Prepare: depth 5 over 400 rows (7 bin sums per 512-bit plaintext), every node of
    # every level named; level 4 has 8 direct nodes, two lanes (7 + 1).
    state = hidden_guest(rows=400)
    state.params = replace(state.params, depth=5)
    start(state)
    rows, layout = np.arange(400, dtype=np.int64), Layout(400, state.key.bits)
    rng = np.random.default_rng(5)
    g = rng.integers(-(2**20), 2**20 + 1, 400)
    h = rng.integers(0, 2**18, 400)
    plain = row_plaintexts(g, h, layout)
    leaf = rng.integers(0, 16, 400)  # each row's node at level 4: 15 + leaf
    for level in range(4):
        ids = list(range(2**level - 1, 2 ** (level + 1) - 1))
        step(state, masked(state, level, ids, hidden.direct_nodes(ids)))
    ids = list(range(15, 31))
    direct = hidden.direct_nodes(ids)
    members = {node: rows[leaf == node - 15] for node in ids}
    lanes = hidden.lanes(direct, layout)
    values = hidden.level_plaintexts(plain, rows, members, lanes, layout.slot)

    # Act
    reply = step(
        state, BoostMasked(0, 4, np.array(ids), np.array(direct), fresh.encrypt(KEY[0], values))
    )

    # Assert: one ciphertext per row and lane in; each direct node's histogram out
    assert [len(lane) for lane in lanes] == [7, 1] and len(values) == 2 * 400
    assert isinstance(reply, BoostHistogram) and reply.nodes.tolist() == direct
    features = sb.tree_features(state.params, 0, 1, state.binned["train"].shape[1])
    shape = (len(features), state.params.bins)
    got = hidden.unpack_level(KEY[1].decrypt(reply.values.values), lanes, shape, layout)
    binned = state.binned["train"][:, features]
    for node in direct:
        want = np.zeros((*shape, 3), np.int64)
        for r in members[node]:
            want[np.arange(shape[0]), binned[r]] += (g[r] + 2**20, h[r], 1)
        want[..., 0] -= want[..., 2] * 2**20
        assert (got[node] == want).all(), node


LEVEL_0 = (0, [0], [])


@pytest.mark.parametrize(
    ("before", "named"),
    [
        ([], (0, [0], [0])),  # the root comes from the gradients, never direct
        ([LEVEL_0], (1, [1, 2], [])),  # neither sibling direct: nothing to derive from
        ([LEVEL_0], (1, [1, 2], [1, 2])),  # the right child sent though derivable
        ([LEVEL_0], (1, [2], [])),  # derived without its sibling
        ([LEVEL_0, (1, [1], [1])], (2, [5], [5])),  # its parent 2 was never named
    ],
)
def test_nodes_that_do_not_fit_are_refused(before: list, named: tuple) -> None:
    state = hidden_guest()
    start(state)
    for level, nodes, direct in before:
        step(state, masked(state, level, nodes, direct))
    with pytest.raises(ProtocolError, match="is not open at level"):
        step(state, masked(state, *named))


def test_masked_ciphertexts_of_another_length_are_refused() -> None:
    state = hidden_guest()
    start(state)
    step(state, masked(state, 0, [0], []))
    short = BoostMasked(0, 1, np.array([1, 2]), np.array([1]), fresh.encrypt(KEY[0], [0] * 39))
    with pytest.raises(ProtocolError, match="39 masked ciphertexts"):
        step(state, short)


def test_a_hidden_guest_refuses_partitions_and_shared_nodes() -> None:
    state = hidden_guest()
    start(state)
    with pytest.raises(ProtocolError, match="hides the instance space"):
        step(state, BoostNodes(0, 0, np.array([0], np.int64)))
    with pytest.raises(ProtocolError, match="hides the instance space"):
        step(state, BoostPartition(0, 0, np.arange(40) < 20))
    state.hidden = False  # a shared-mode guest refuses boost_masked the same way
    with pytest.raises(ProtocolError, match="shares the instance space"):
        step(state, masked(state, 0, [0], []))


def test_a_hidden_guest_whose_partition_differs_from_its_win_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    honest = oblivious.candidate_sets

    def deviating(binned: np.ndarray, bins: int) -> np.ndarray:
        return ~honest(binned, bins)  # every set the other side of its threshold

    monkeypatch.setattr(oblivious, "candidate_sets", deviating)
    results = run_in_threads(boost_job("hidden", trees=1), InMemoryHub(), tmp_path)
    host_error = failures(results).get("host")
    assert isinstance(host_error, ProtocolError)
    assert "does not match the histogram its split won" in str(host_error)
    assert isinstance(failures(results).get(GUEST), PeerAborted)


def test_direct_nodes_follow_the_ids_alone() -> None:
    from privfl.parties.vertical.secureboost.hidden import direct_nodes, masked_bound

    assert direct_nodes([0]) == []  # the root: the tree's gradients
    assert direct_nodes([1, 2]) == [1]  # 2 = parent ÷ 1
    assert direct_nodes([2]) == [2]  # no sibling to derive it from
    assert direct_nodes([3, 4, 6]) == [3, 6]
    layout = Layout(426, 1024)  # 14 bin sums per plaintext
    assert masked_bound(3, layout) == 2  # one lane at levels 1 and 2
    assert masked_bound(6, layout) == 1 + 1 + 1 + 1 + 2  # level 5: 16 direct nodes
    assert [len(lane) for lane in hidden.lanes(list(range(1, 32, 2)), layout)] == [14, 2]


# --- what the hidden mode gives up: the guest cannot count a node's rows --------------


@pytest.mark.parametrize("space", ["shared", "hidden"])
def test_a_deviating_host_reads_a_chosen_rows_bins_only_in_hidden_mode(space: str) -> None:
    # The attack: a node of one row. Shared: the guest derives node sizes from the
    # partitions and refuses a child below the floor. Hidden: the Host's masked
    # vector puts one honest row in the left child and [[0]] everywhere else.
    from privfl.parties.vertical.secureboost.common import unpack_sums

    state = hidden_guest()
    state.hidden = space == "hidden"
    start(state)
    step(
        state,
        masked(state, 0, [0], []) if state.hidden else BoostNodes(0, 0, np.zeros(1, np.int64)),
    )
    target, rows = 7, len(state.data.x_train)
    if not state.hidden:
        with pytest.raises(ProtocolError, match="fewer than"):
            step(state, BoostPartition(0, 0, np.arange(rows) == target))
        return
    layout = Layout(rows, state.key.bits)
    one = row_plaintexts(np.array([0]), np.array([1000]), layout)[0]
    plain = [one if i == target else 0 for i in range(rows)]
    ids = np.array([1, 2], np.int64)
    reply = step(state, BoostMasked(0, 1, ids, ids[:1], fresh.encrypt(state.key, plain)))

    assert isinstance(reply, BoostHistogram)
    bins = state.params.bins
    width = state.binned["train"].shape[1]
    assert reply.nodes.tolist() == [1]  # node 2 is the Host's to derive
    sums = unpack_sums(KEY[1].decrypt(reply.values.values), width * bins, layout)
    counts = sums[:, 2].reshape(width, bins)  # node 1: the one row
    assert (counts.argmax(axis=1) == state.binned["train"][target]).all()
    assert (counts.sum(axis=1) == 1).all()  # that row's bin in every guest column
