"""The ledger's units and budget stop, the data loaders, and in-process training."""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from privfl.config.horizontal import HflConfig
from privfl.data.images import load_dataset, read_idx, split_clients
from privfl.errors import ConfigError
from privfl.learning.models import build_model
from privfl.mechanisms.accountants import subsampling_amplification, zcdp_epsilon
from privfl.parties.horizontal.ledger import PrivacyLedger
from privfl.runs.simulate import run_experiment


def test_pnpm_ledger_states_per_weight_and_per_report_epsilon() -> None:
    ledger = PrivacyLedger(HflConfig(mechanism="pnpm", epsilon=0.5, fraction=0.5), dims=100, k=10)
    ledger.record([0, 1], [0, 1], 2)
    snap = ledger.snapshot()
    assert snap["epsilon_per_weight"] == 0.5
    assert snap["epsilon_per_client_round"] == 50.0  # d·ε, basic composition over weights
    # the K-of-N sample is public: no amplification, one release costs its full ε
    assert snap["epsilon_total"] == 50.0 and snap["amplification_rate"] == 1.0
    assert set(snap["epsilon_assumptions"]) >= {"epsilon_per_weight", "epsilon_total"}
    assert "no amplification" in snap["epsilon_assumptions"]["epsilon_total"]


def test_amplification_needs_the_clients_own_coin_and_a_shuffler() -> None:
    base = dict(mechanism="laplace-topk", epsilon=2.0, participation=0.5)
    hidden = PrivacyLedger(HflConfig(**base, shuffler=True), dims=100, k=10)
    seen = PrivacyLedger(HflConfig(**base), dims=100, k=10)
    seeded = PrivacyLedger(HflConfig(**base, shuffler=True, seeded_noise=True), dims=100, k=10)
    for ledger in (hidden, seen, seeded):
        ledger.record([0, 1], None if ledger.config.shuffler else [0], 2)
    assert hidden.total_epsilon() == pytest.approx(subsampling_amplification(2.0, 0.5))
    assert seen.total_epsilon() == 2.0  # client 0 released once, the aggregator saw it
    assert seeded.total_epsilon() == 2.0  # a job-derived coin is no secret
    assert "seeded noise" in seeded.snapshot()["noise"]


def test_topk_ledger_splits_epsilon_over_k_and_composes_over_releases() -> None:
    ledger = PrivacyLedger(HflConfig(mechanism="laplace-topk", epsilon=2.0), dims=100, k=10)
    for _ in range(3):
        ledger.record([0, 1], [0], 1)
    assert ledger.epsilon_per_weight == pytest.approx(0.2)
    assert ledger.total_epsilon() == pytest.approx(6.0)  # basic beats advanced here
    assert ledger.snapshot()["max_participations"] == 3


def test_gaussian_ledger_composes_zcdp() -> None:
    config = HflConfig(mechanism="gaussian", epsilon=1.0, fraction=0.2)
    ledger = PrivacyLedger(config, dims=10, k=1, rho=0.05)
    for _ in range(40):
        ledger.record([3], [3], 1)
    assert ledger.total_epsilon() == pytest.approx(zcdp_epsilon(40 * 0.05, 1e-5))


def test_budget_stops_training_before_it_is_exceeded() -> None:
    config = HflConfig(
        mechanism="laplace-topk", epsilon=2.0, epsilon_budget=5.0, rounds=5, clients=4
    )
    summary = run_experiment(config)
    assert summary["rounds"] == 2  # a third report would make it 6 > 5
    assert summary["epsilon_total"] == pytest.approx(4.0)
    assert summary["stop_reason"].startswith("privacy budget")


def test_default_in_process_run_learns_digits(tmp_path: Path) -> None:
    summary = run_experiment(HflConfig(rounds=5), out=tmp_path)
    assert summary["accuracy"] >= 0.93
    assert summary["epsilon_total"] == "inf" and summary["mechanism"] == "none"
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 5 and "epsilon_total" in lines[0]
    assert (tmp_path / "training.png").stat().st_size > 0
    checkpoint = torch.load(tmp_path / "checkpoint.pt")
    assert checkpoint["round"] == 5 and checkpoint["ledger"]["rounds"] == 5


def test_fedprox_and_dirichlet_run_and_differ_from_fedavg() -> None:
    base = run_experiment(HflConfig(rounds=2, clients=5, dirichlet=0.3))
    prox = run_experiment(HflConfig(rounds=2, clients=5, dirichlet=0.3, fedprox_mu=1.0))
    assert base["accuracy"] != prox["accuracy"] or base["loss"] != prox["loss"]


def test_dirichlet_split_is_skewed_and_covers_every_row() -> None:
    y = np.repeat(np.arange(10), 50)
    shards = split_clients(y, 5, 0.1, np.random.default_rng(0))
    assert sorted(np.concatenate(shards).tolist()) == list(range(500))
    assert all(len(s) > 0 for s in shards)
    assert max(len(np.unique(y[s])) for s in shards) < 10 or min(len(s) for s in shards) < 60


def test_idx_files_are_read_and_bad_ones_refused(tmp_path: Path) -> None:
    images = np.arange(2 * 28 * 28, dtype=np.uint8).reshape(2, 28, 28)
    header = b"\x00\x00\x08\x03" + b"".join(int(d).to_bytes(4, "big") for d in images.shape)
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(header + images.tobytes()))
    labels = b"\x00\x00\x08\x01" + (2).to_bytes(4, "big") + bytes([3, 7])
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(labels)
    assert np.array_equal(read_idx(header + images.tobytes()), images)
    with pytest.raises(ConfigError, match="t10k-images"):
        load_dataset("mnist", str(tmp_path))
    with pytest.raises(ConfigError, match="IDX"):
        read_idx(b"PK\x03\x04")
    with pytest.raises(ConfigError, match="--data-dir"):
        load_dataset("cifar10", "")


def test_models_match_their_inputs() -> None:
    for dataset, shape in (
        ("mnist", (1, 28, 28)),
        ("fmnist", (1, 28, 28)),
        ("cifar10", (3, 32, 32)),
    ):
        model = build_model(dataset, shape, 10)
        assert model(torch.zeros(2, *shape)).shape == (2, 10)
    assert (
        sum(p.numel() for p in build_model("digits", (64,), 10).parameters())
        == 64 * 256 + 256 + 2570
    )


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_a_round_on_cuda() -> None:
    summary = run_experiment(
        HflConfig(rounds=1, clients=4, device="cuda", mechanism="pnpm", epsilon=2.0)
    )
    assert summary["device"].startswith("cuda") and 0 <= summary["accuracy"] <= 1


def test_cuda_request_without_cuda_is_a_clear_error() -> None:
    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    with pytest.raises(ConfigError, match="no CUDA device"):
        run_experiment(HflConfig(rounds=1, device="cuda"))


def test_bad_settings_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="mechanism"):
        HflConfig(mechanism="magic")
    with pytest.raises(ConfigError, match="fraction"):
        HflConfig(fraction=0)
    assert math.isinf(HflConfig().epsilon_budget)


def test_local_training_leaves_the_global_weights_untouched() -> None:
    from privfl.learning import fedavg as engine
    from privfl.learning.models import get_flat

    setup = engine.make_setup(HflConfig(clients=4))
    global_weights = get_flat(setup.model)
    before = global_weights.clone()
    trained = engine.local_train(setup, 0, global_weights, 1)
    assert torch.equal(global_weights, before)
    assert not torch.equal(trained, before)
    # Every client starts from the same global model: order does not matter.
    a = engine.local_train(setup, 1, global_weights, 1)
    engine.local_train(setup, 2, global_weights, 1)
    assert torch.equal(engine.local_train(setup, 1, global_weights, 1), a)


def test_a_population_study_says_its_epsilon_is_not_per_record() -> None:
    cfg = HflConfig(mechanism="laplace-topk", local_dp="dpsgd", clients=50, client_rows=8)
    why = PrivacyLedger(cfg, dims=10, k=1).assumptions()
    assert "not per record" in why["epsilon_total"]
    assert "not per record" in why["epsilon_local_sample_level"]
    assert "not per record" not in PrivacyLedger(HflConfig(), 10, 1).assumptions()["epsilon_total"]


def test_the_amplified_epsilon_names_the_relay_that_sees_each_hosts_report_count() -> None:
    cfg = HflConfig(mechanism="pnpm", shuffler=True, participation=0.5)
    why = PrivacyLedger(cfg, dims=10, k=1).assumptions()
    for figure in ("epsilon_total", "epsilon_central_round"):
        assert "the relay's operator, who sees how many reports each host sends" in why[figure]
