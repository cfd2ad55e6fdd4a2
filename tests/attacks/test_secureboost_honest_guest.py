"""Attack: an honest SecureBoost guest clusters the training rows by what it receives.

At the defaults (hidden instance space, label ε = 2, ``min_child_weight`` = 4) a guest
receives, per tree, fresh ciphertexts (IND-CPA without the Host's key), the ids of the
open nodes (the tree's shape: the same for every row), and the column and bin of each
split it wins; it answers each won split with its column's left set over every row
of the tree. The only per-row facts it holds are those left sets, which are its own
columns cut at thresholds the Host chose. The attacker below runs the two published
clusterings over them: 2-means on the one-hot sides (leaf clustering), and instance
clustering (ID2Graph-style: rows joined by how often they share a side, spectral
clustering of that graph), each with and without the guest's own columns; the
larger cluster is called the majority class (benign, public knowledge). Its best
read is held to what 2-means on its own columns alone reads, plus 0.01 — a target
the defaults do not meet (the test is a strict xfail): the thresholds the Host chose
say which of the guest's columns, cut where, separate the (flipped) labels, and
clustering on those cuts reads more than clustering on the raw columns.

Leaky arm: the old defaults (shared instance space, ε = 8, ``min_child_weight`` = 1),
where the Host forwards every partition and 2-means on the leaves reads ≈ 0.97.

The runs flip the labels with a seeded generator (tests only; the draw is the same
code as the OS-CSPRNG one), so every number here is a known answer, not a random
variable. docs/results.md has the same attack over 20 private draws.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from helpers import decoded_traffic, failures, memory_job, party_data, run_resumable
from sklearn.cluster import KMeans, SpectralClustering

from privfl.config.vertical import JobConfig, LabelDPConfig, switch_kind
from privfl.protocol.boost_messages import BoostGradients, BoostPartition
from privfl.protocol.memory import InMemoryHub

MAJORITY = 1  # breast cancer: benign, 63 % of the rows (public knowledge)
GUEST = "guest-1"
LABEL_SEEDS = (12, 11)  # draws of the Host's flips: 12 for the defaults arm, 11 for the leaky one


def default_job() -> JobConfig:
    """The job `privfl init vfl --model secureboost` writes, on the in-memory hub."""
    glm = memory_job(1, timeout=300.0, epsilon=LabelDPConfig().epsilon)
    return switch_kind(glm, "secureboost")


def old_default_job() -> JobConfig:
    """The defaults before this change: shared instance space, ε = 8, min_child_weight 1."""
    job = memory_job(1, timeout=300.0, epsilon=8.0)
    boost = switch_kind(job, "secureboost")
    model = replace(boost.model, instance_space="shared", min_child_weight=1.0)
    return replace(boost, model=model, label_dp=job.label_dp)


# --- the attacker: what the guest's inbox and outbox hold ---------------------------


def sides(hub: InMemoryHub, rows: int) -> np.ndarray:
    """``(rows, k)``: every per-row fact the guest holds, one column per row set.

    Hidden mode: each of its own won splits' left set over the tree's rows. Shared mode:
    each leaf it can derive from every partition it was sent or sent (one-hot leaves).
    """
    trees: dict[int, dict[int, np.ndarray]] = {}
    order: dict[int, np.ndarray] = {}  # each tree's rows, ascending
    columns: list[np.ndarray] = []
    for sender, receiver, _, body in decoded_traffic(hub):
        if GUEST not in (sender, receiver):
            continue
        if isinstance(body, BoostGradients):
            trees[body.tree] = {0: np.asarray(body.rows)}
            order[body.tree] = np.asarray(body.rows)
        elif isinstance(body, BoostPartition):
            members = trees[body.tree].get(body.node)
            if members is not None and len(members) == len(body.left):  # a node it knows
                trees[body.tree].pop(body.node)
                trees[body.tree][2 * body.node + 1] = members[body.left]
                trees[body.tree][2 * body.node + 2] = members[~body.left]
            else:  # hidden mode: its own split, over every row of the tree
                side = np.zeros(rows)
                side[order[body.tree][body.left]] = 1.0
                columns.append(side)
    for tree in trees.values():
        if len(tree) > 1:  # leaves derived (shared mode)
            for members in tree.values():
                one_hot = np.zeros(rows)
                one_hot[members] = 1.0
                columns.append(one_hot)
    return np.stack(columns, axis=1) if columns else np.zeros((rows, 0))


def majority_named(cluster: np.ndarray) -> np.ndarray:
    return np.where(cluster == int(np.bincount(cluster).argmax()), MAJORITY, 1 - MAJORITY)


def two_means(features: np.ndarray) -> np.ndarray:
    return majority_named(KMeans(n_clusters=2, n_init=10, random_state=0).fit_predict(features))


def instance_clustering(view: np.ndarray) -> np.ndarray:
    """ID2Graph-style: rows joined by how many row sets they share; 2 spectral clusters."""
    both = np.hstack([view, 1.0 - view]) if view.shape[1] else np.ones((len(view), 1))
    graph = both @ both.T + 1e-6
    labels = SpectralClustering(2, affinity="precomputed", random_state=0).fit_predict(graph)
    return majority_named(labels)


def standardised(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = (x - x.mean(axis=0)) / (x.std(axis=0) + 1e-12)
    return out


def reads(view: np.ndarray, own: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """The attacker's reads of the training labels, per clustering and input."""
    cols = standardised(own) / np.sqrt(own.shape[1])  # its columns weigh as one row set
    out = {"own columns (2-means)": float((two_means(cols) == y).mean())}
    if view.shape[1]:
        out["received (2-means)"] = float((two_means(view) == y).mean())
        out["received + own (2-means)"] = float((two_means(np.hstack([view, cols])) == y).mean())
        out["received (instance clustering)"] = float((instance_clustering(view) == y).mean())
    return out


def attack(job: JobConfig, tmp_path: Path, label_seed: int) -> dict[str, float]:
    hub = InMemoryHub()
    results = run_resumable(job, tmp_path, label_seed=label_seed, hub=hub)
    assert not failures(results), failures(results)
    data = party_data(job)
    y = data[job.host].y_train
    assert y is not None
    return reads(sides(hub, len(y)), data[GUEST].x_train, y)


@pytest.mark.xfail(
    strict=True,
    reason="not met: at the defaults a guest's own won splits (its columns cut at the "
    "thresholds the Host chose from the flipped labels) read 0.92 (2-means) and 0.95 "
    "(instance clustering) against 0.897 from its columns alone; label DP bounds each "
    "label, not what the chosen thresholds say about the features (docs/security.md)",
)
def test_an_honest_guest_reads_no_more_than_its_own_columns_at_the_defaults(
    tmp_path: Path,
) -> None:
    job = default_job()
    assert job.model.instance_space == "hidden" and job.label_dp.epsilon == 2.0
    label_seed = LABEL_SEEDS[0]

    read = attack(job, tmp_path, label_seed)

    prior = read.pop("own columns (2-means)")
    print(f"defaults, flips seed {label_seed}: own columns {prior:.3f}, {read}")
    assert prior == pytest.approx(0.897, abs=0.001)  # the audit's own-column read
    assert read, "the guest won no split: nothing to cluster, the arm proves nothing"
    # the target; measured 0.923 (2-means), 0.925 (with its columns), 0.946 (instance
    # clustering) at flips seed 12
    assert max(read.values()) <= prior + 0.01


def test_the_old_defaults_give_the_labels_away(tmp_path: Path) -> None:
    job = old_default_job()

    read = attack(job, tmp_path, LABEL_SEEDS[1])

    print(f"shared, ε = 8: {read}")
    # measured 0.969 (the audit: 413/426), instance clustering 0.974
    assert read["received (2-means)"] >= 0.95
