"""Federated SecureBoost over the in-memory hub: the same trees as the plain reference booster."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import (
    decoded_traffic,
    failures,
    memory_job,
    party_data,
    read_model,
    read_summary,
    run_in_threads,
    run_parties,
    run_resumable,
)
from sklearn.metrics import roc_auc_score

from privfl.config.vertical import JobConfig, ModelConfig
from privfl.crypto.paillier import generate_keypair
from privfl.data.tables import IdTable
from privfl.errors import ConfigError
from privfl.learning import secureboost as sb
from privfl.mechanisms.label_dp import flip_probability, randomized_response
from privfl.parties.vertical.secureboost import oblivious, report
from privfl.parties.vertical.secureboost.common import (
    Layout,
    pack_sums,
    params_of,
    row_plaintexts,
    unpack_sums,
)
from privfl.parties.vertical.secureboost.labels import draw_noisy_labels
from privfl.parties.vertical.secureboost.predict import load_boost_model, predict_boost_party
from privfl.protocol.boost_messages import BoostGradients
from privfl.protocol.memory import InMemoryHub


def boost_job(guests: int = 1, **model: object) -> JobConfig:
    settings: dict[str, object] = {
        "kind": "secureboost",
        "trees": 2,
        "depth": 3,
        "bins": 16,
        "instance_space": "shared",  # the cases below ask for "hidden" (the default) by name
    }
    settings.update(model)
    return memory_job(guests, timeout=60.0, model=ModelConfig(**settings))  # type: ignore[arg-type]


def reference(job: JobConfig) -> sb.Booster:
    data = party_data(job)
    host = data[job.host]
    assert host.y_train is not None and host.y_test is not None
    groups = [data[p].x_train for p in [job.host, *job.guests]]
    valid = ([data[p].x_test for p in [job.host, *job.guests]], host.y_test.astype(float))
    return sb.fit(groups, host.y_train.astype(float), params_of(job), valid=valid)


def federated_trees(out: Path) -> list[sb.Tree]:
    files = sorted((out / "host" / "checkpoints").glob("epoch-*.json"))
    saved = json.loads(files[-1].read_text())["state"]
    return [report.tree_from_json(t) for t in saved["trees"]]


@pytest.mark.parametrize(
    ("guests", "model"),
    [
        (1, {}),
        (2, {"subsample": 0.8, "colsample": 0.5, "min_child_weight": 2.0, "gamma": 0.1}),
        (1, {"instance_space": "hidden"}),
        (
            2,
            {
                "subsample": 0.8,
                "colsample": 0.5,
                "min_child_weight": 2.0,
                "instance_space": "hidden",
            },
        ),
    ],
)
def test_federated_trees_equal_the_reference(tmp_path: Path, guests: int, model: dict) -> None:
    job = boost_job(guests, **model)
    results = run_in_threads(job, InMemoryHub(), tmp_path)
    assert not failures(results), failures(results)
    ours = federated_trees(tmp_path)
    plain = reference(job)
    assert ours == plain.trees
    summary = read_summary(tmp_path)
    data = party_data(job)
    tests = [data[p].x_test for p in [job.host, *job.guests]]
    y_test = data[job.host].y_test
    assert y_test is not None
    plain_auc = roc_auc_score(y_test, plain.predict_proba(tests))
    assert summary["model"]["trees"] == 2 and summary["trees"] == 2
    assert summary["auc"] == pytest.approx(plain_auc, abs=1e-12)
    guest_model = read_model(tmp_path, "guest-1")
    owned = {(s["tree"], s["node"]) for s in guest_model["splits"]}
    expected = {
        (t, n) for t, tree in enumerate(plain.trees) for n, v in tree.items() if v.group == 1
    }
    if job.model.instance_space == "hidden":  # the guest keeps no record of which won
        assert owned == set()
        assert len(guest_model["candidates"]) == guest_model_columns(job) * (job.model.bins - 1)
        picked = {
            (t, e["node"]): e["candidate"]
            for t, tree in enumerate(read_model(tmp_path, "host")["trees"])
            for e in tree
            if e.get("party") == "guest-1"
        }
        assert picked == {
            (t, n): oblivious.candidate(v.feature, v.bin, job.model.bins)
            for t, tree in enumerate(plain.trees)
            for n, v in tree.items()
            if v.group == 1
        }
    else:
        assert owned == expected
    for tree in read_model(tmp_path, "host")["trees"]:
        for node in tree:  # thresholds of the Host's own splits only
            assert ("threshold" in node) == (node.get("party") == "host")
    # The guest's tallies tree by tree (the SecureBoost bench's steady window) add up to
    # its totals; with one guest the Host decrypts each packed histogram once.
    work = json.loads((tmp_path / "guest-1" / "work.json").read_text())
    per_tree = work["per_tree"]
    assert len(per_tree) == 2 and all(t["packed"] > 0 and t["additions"] > 0 for t in per_tree)
    assert {k: sum(t[k] for t in per_tree) for k in per_tree[0]} == {
        k: work[k] for k in per_tree[0]
    }
    if guests == 1:
        assert summary["decryptions"] == work["packed"]


def guest_model_columns(job: JobConfig) -> int:
    return party_data(job)["guest-1"].x_train.shape[1]


def test_packed_histogram_round_trip() -> None:
    public, private = generate_keypair(512)
    rng = np.random.default_rng(0)
    rows = 300
    layout = Layout(rows, public.bits)
    assert layout.per_ciphertext >= 5
    g = rng.integers(-(2**sb.FRAC_BITS), 2**sb.FRAC_BITS + 1, size=rows)
    h = rng.integers(0, 2**sb.FRAC_BITS + 1, size=rows)
    cts = public.encrypt(row_plaintexts(g, h, layout))
    bins = rng.integers(0, 11, size=rows)
    sums = [public.sum([c for c, b in zip(cts, bins, strict=True) if b == k]) for k in range(11)]
    packed = pack_sums(sums, layout, public.nsquare)
    assert len(packed) == layout.packed(11)
    got = unpack_sums(private.decrypt(packed), 11, layout)
    want = [[g[bins == k].sum(), h[bins == k].sum(), (bins == k).sum()] for k in range(11)]
    assert got.tolist() == want


def test_extreme_gradients_do_not_overflow_a_slot() -> None:
    public, private = generate_keypair(512)
    rows = 1000
    layout = Layout(rows, public.bits)
    top = 2**sb.FRAC_BITS
    g = np.full(rows, top)
    h = np.full(rows, top)
    cts = public.encrypt(row_plaintexts(g, h, layout))
    total = public.sum(cts)
    neg = public.sum(public.encrypt(row_plaintexts(-g, np.zeros(rows, np.int64), layout)))
    got = unpack_sums(private.decrypt(pack_sums([total, neg], layout, public.nsquare)), 2, layout)
    assert got.tolist() == [[rows * top, rows * top, rows], [-rows * top, 0, rows]]


def test_an_interrupted_run_resumes_to_the_same_trees(tmp_path: Path) -> None:
    job = replace(boost_job(1, trees=4, depth=2), timeout_seconds=5.0)
    whole = run_resumable(job, tmp_path / "whole")
    assert not failures(whole), failures(whole)
    broken = run_resumable(job, tmp_path / "cut", die=(job.host, 30))  # during the third tree
    assert failures(broken)
    held = sorted((tmp_path / "cut" / "host" / "checkpoints").glob("epoch-*.json"))
    assert held, "the host saved no tree before it failed"
    hub = InMemoryHub()
    resumed = run_resumable(job, tmp_path / "cut", resume=True, hub=hub)
    assert not failures(resumed), failures(resumed)
    grown = [b for _, _, _, b in decoded_traffic(hub) if isinstance(b, BoostGradients)]
    assert 0 < len(grown) < 4  # only the trees after the last common checkpoint
    assert federated_trees(tmp_path / "cut") == federated_trees(tmp_path / "whole")
    assert (
        read_model(tmp_path / "cut", "guest-1")["splits"]
        == read_model(tmp_path / "whole", "guest-1")["splits"]
    )


def test_early_stopping_keeps_the_reference_prefix(tmp_path: Path) -> None:
    job = boost_job(1, trees=20, depth=2, learning_rate=1.0, early_stopping_rounds=2)
    results = run_in_threads(job, InMemoryHub(), tmp_path)
    assert not failures(results), failures(results)
    plain = reference(job)
    summary = read_summary(tmp_path)
    assert summary["stop_reason"] == "early_stopping"
    assert summary["trees"] == len(plain.trees) < summary["trees_grown"] < 20
    assert federated_trees(tmp_path)[: summary["trees"]] == plain.trees
    kept = {s["tree"] for s in read_model(tmp_path, "guest-1")["splits"]}
    assert max(kept) < summary["trees"]


def test_histograms_on_worker_processes_equal_inline_ones() -> None:
    from privfl.crypto.pools import NoisePool
    from privfl.parties.vertical.secureboost.guest import GuestBoost, step
    from privfl.parties.vertical.secureboost.host import decrypt_split
    from privfl.protocol import fresh
    from privfl.protocol.boost_messages import BoostHistogram, BoostNodes

    public, private = generate_keypair(512)
    data = party_data(memory_job(1))["guest-1"]
    params = sb.BoostParams(depth=2, bins=8)
    rows = len(data.x_train)
    layout = Layout(rows, public.bits)
    rng = np.random.default_rng(3)
    g = rng.integers(-(2**20), 2**20, size=rows)
    h = rng.integers(0, 2**18, size=rows)
    values = list(fresh.encrypt(public, row_plaintexts(g, h, layout)).values)
    got = []
    for workers in (1, 2):
        pool = NoisePool(public.n, workers)
        try:
            state = GuestBoost(data=data, key=public, params=params, group=1, noise=pool)
            everyone = np.arange(rows, dtype=np.int64)
            msg = BoostGradients(0, everyone, fresh.rerandomize(public, values))
            step(state, msg)
            reply = step(state, BoostNodes(0, 0, np.array([0], np.int64)))
            assert isinstance(reply, BoostHistogram)
            assert len(reply.values) >= 8  # spread over the workers: packing, decryption
            plain = decrypt_split(private, pool, reply.values.values)  # the Host's workers
            assert plain == private.decrypt(reply.values.values)
            got.append(plain)
        finally:
            pool.close()
    assert got[0] == got[1]
    sums = unpack_sums(got[0], data.x_train.shape[1] * 8, layout).reshape(-1, 8, 3)
    binned = sb.bin_columns(data.x_train, sb.quantile_edges(data.x_train, 8))
    assert sums.tolist() == sb.histogram(binned, g, h, 8).tolist()


def test_trees_grow_from_the_flipped_labels_and_metrics_use_the_true_ones(tmp_path: Path) -> None:
    # Prepare: ε = 1 flips about a quarter of the labels; a seeded generator (not
    # private, tests only) lets the test redraw the Host's flips.
    job = replace(memory_job(1, timeout=60.0, epsilon=1.0), model=boost_job().model)
    host = party_data(job)[job.host]
    assert host.y_train is not None and host.y_test is not None
    noisy = randomized_response(host.y_train, 1.0, np.random.default_rng(5))

    # Act
    results = run_resumable(job, tmp_path, label_seed=5)

    # Assert: the trees are the plain booster's on the flipped labels, not the true ones
    assert not failures(results), failures(results)
    groups = [data.x_train for data in party_data(job).values()]
    on_flips = sb.fit(groups, noisy.astype(float), params_of(job))
    assert federated_trees(tmp_path) == on_flips.trees != reference(job).trees
    summary = read_summary(tmp_path)
    tests = [data.x_test for data in party_data(job).values()]
    assert summary["auc"] == pytest.approx(
        roc_auc_score(host.y_test, on_flips.predict_proba(tests)), abs=1e-12
    )
    assert summary["label_epsilon"] == 1.0
    assert summary["flip"]["count"] == int((noisy != host.y_train).sum()) > 0
    assert summary["flip"]["probability"] == pytest.approx(flip_probability(1.0))
    assert summary["privacy"]["label_dp"]["epsilon"] == 1.0
    assert "not private" in summary["privacy"]["label_dp"]["noise"]


def test_a_resumed_run_keeps_the_flips_it_started_with(tmp_path: Path) -> None:
    job = replace(memory_job(1, timeout=5.0, epsilon=1.0), model=boost_job(trees=4, depth=2).model)
    whole = run_resumable(job, tmp_path / "whole", label_seed=5)
    assert not failures(whole), failures(whole)
    broken = run_resumable(job, tmp_path / "cut", die=(job.host, 30), label_seed=5)
    assert failures(broken)

    # A fresh draw on resume would grow other trees (and spend ε twice).
    resumed = run_resumable(job, tmp_path / "cut", resume=True, label_seed=8)

    assert not failures(resumed), failures(resumed)
    assert federated_trees(tmp_path / "cut") == federated_trees(tmp_path / "whole")
    assert read_summary(tmp_path / "cut")["flip"] == read_summary(tmp_path / "whole")["flip"]
    cut, whole = read_model(tmp_path / "cut", "host"), read_model(tmp_path / "whole", "host")
    assert cut["base_margin"] == whole["base_margin"]


def test_labels_other_than_0_and_1_are_refused() -> None:
    job = replace(memory_job(1, epsilon=1.0), model=boost_job().model)

    with pytest.raises(ConfigError, match="0 and 1"):
        draw_noisy_labels(job, np.array([0, 1, 2]))


def test_a_hidden_model_predicts_as_the_reference_by_oblivious_selection(tmp_path: Path) -> None:
    # Prepare: a hidden-space training run, its models, the held-out rows in raw units.
    job = boost_job(1, instance_space="hidden")
    results = run_in_threads(job, InMemoryHub(), tmp_path / "train")
    assert not failures(results), failures(results)
    data = party_data(job)
    models = {p: load_boost_model(tmp_path / "train" / p, p) for p in (job.host, *job.guests)}
    tables = {
        p: IdTable(
            ids=tuple(str(i) for i in range(len(data[p].x_test))),
            x=data[p].x_test * data[p].scale + data[p].mean,
            feature_names=models[p].features,
        )
        for p in models
    }
    hub, out = InMemoryHub(), tmp_path / "predict" / "host" / "predictions.csv"

    # Act: every party of the prediction session in its own thread.
    got = run_parties(
        job.parties,
        lambda name: predict_boost_party(
            job,
            name,
            out if name == job.host else tmp_path / "predict" / name / "p.csv",
            model=models.get(name),
            table=tables.get(name),
            by_id=False,
            transport=hub.transport(name),
        ),
    )

    # Assert: the reference's probabilities (up to rows on a bin edge after rescaling),
    # and the guest was asked one masked decryption per guest node, never a decision.
    assert not [r for r in got.values() if isinstance(r, Exception)], got
    plain = reference(job).predict_proba([data[p].x_test for p in (job.host, *job.guests)])
    probability = pd.read_csv(out)["probability"].to_numpy()
    assert np.sum(~np.isclose(probability, plain, atol=1e-9)) <= 2
    kinds = [type(body).__name__ for _, receiver, _, body in decoded_traffic(hub)]
    trees = models["host"].raw["trees"]
    assert any(e.get("party") == "guest-1" for t in trees for e in t)
    split = sum("party" in e for t in trees for e in t)  # every split node, won or not
    assert kinds.count("BoostReveal") == split and "BoostDecide" not in kinds
