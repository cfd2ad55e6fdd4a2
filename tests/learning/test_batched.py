"""Batched local training equals sequential training; populations are index views.

Both batched trainers are compared: the generic ``vmap`` one
(:mod:`privfl.learning.batched`) and the MLP's fused step (:mod:`privfl.learning.batched_mlp`).
"""

from __future__ import annotations

import sys
from dataclasses import replace

import numpy as np
import pytest
import torch

from privfl.config.horizontal import HflConfig
from privfl.data.population import ClientRows
from privfl.errors import ConfigError
from privfl.learning import fedavg as engine
from privfl.learning.batched_mlp import is_mlp
from privfl.learning.models import cnn2, get_flat, mlp
from privfl.runs.simulate import run_experiment

# Float tolerance of batched vs sequential weights after 5 epochs: the masked mean sums
# the batch in another order, so the last bits differ; measured ≤ 3e-6 on digits.
ATOL = 1e-5


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    """As the simulator and client hosts run: threads only contend on a shared machine."""
    torch.set_num_threads(1)


def _train_both(config: HflConfig, clients: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    batched = engine.make_setup(replace(config, batched=True))
    sequential = engine.make_setup(replace(config, batched=False))
    start = get_flat(batched.model)
    return (
        engine.train_clients(batched, clients, start, 3),
        engine.train_clients(sequential, clients, start, 3),
    )


@pytest.mark.parametrize(
    "config",
    [
        HflConfig(clients=6, seed=1),
        HflConfig(clients=7, dirichlet=0.5, seed=3),  # uneven sizes: 90..364 rows
        HflConfig(clients=5, fedprox_mu=0.3, dirichlet=0.3, seed=2),  # FedProx, uneven
        HflConfig(clients=40, local_epochs=2, batch_size=64, seed=4),  # one short batch
    ],
    ids=["iid", "uneven", "fedprox-uneven", "single-batch"],
)
@pytest.mark.parametrize("fused", [True, False], ids=["fused-mlp", "vmap"])
def test_batched_equals_sequential(config: HflConfig, fused: bool) -> None:
    """Both batched trainers: the MLP's hand-written step and the generic vmap one."""
    config = replace(config, fused_mlp=fused)
    clients = list(range(config.clients))
    batched, sequential = _train_both(config, clients)
    start = get_flat(engine.make_setup(config).model)
    assert (sequential - start).abs().max() > 0.05  # the clients did train
    torch.testing.assert_close(batched, sequential, atol=ATOL, rtol=0)


def test_uneven_clients_really_are_uneven() -> None:
    setup = engine.make_setup(HflConfig(clients=7, dirichlet=0.5, seed=3))
    sizes = {len(setup.shards[c]) for c in range(7)}
    assert max(sizes) > 2 * min(sizes) and max(sizes) > setup.config.batch_size * 3


def test_a_different_batch_order_is_detected() -> None:
    """The oracle can fail: another client's batch order gives other weights."""
    config = HflConfig(clients=4, seed=1)
    setup = engine.make_setup(config)
    start = get_flat(setup.model)
    own = engine.train_clients(setup, [0], start, 3)
    other = engine.train_clients(setup, [0], start, 4)  # round 4: another generator
    assert (own - other).abs().max() > 10 * ATOL


def test_groups_of_clients_give_the_same_result() -> None:
    config = HflConfig(clients=9, dirichlet=0.5, seed=5)
    whole = engine.make_setup(replace(config, batch_clients=100))
    pieces = engine.make_setup(replace(config, batch_clients=4))
    start = get_flat(whole.model)
    indices = engine.report_indices(whole, None, 1)
    a = engine.client_reports(whole, list(range(9)), start, indices, 1, None)  # type: ignore[arg-type]
    b = engine.client_reports(pieces, list(range(9)), start, indices, 1, None)  # type: ignore[arg-type]
    torch.testing.assert_close(torch.stack(a), torch.stack(b), atol=ATOL, rtol=0)


def test_a_run_batched_matches_a_run_sequential() -> None:
    config = HflConfig(clients=10, rounds=2, seed=0)
    batched = run_experiment(replace(config, batched=True))
    sequential = run_experiment(replace(config, batched=False))
    assert batched["accuracy"] == pytest.approx(sequential["accuracy"], abs=0.01)
    assert batched["accuracy"] > 0.8


def test_a_population_of_a_million_is_index_views() -> None:
    """1,000,000 clients over 1,347 rows: nothing stored per client, rows derived on demand."""
    config = HflConfig(
        clients=1_000_000, fraction=20 / 1_000_000, client_rows=8, rounds=1, local_epochs=1
    )
    setup = engine.make_setup(config)
    assert isinstance(setup.shards, ClientRows) and setup.shards.parts == ()
    assert len(setup.shards) == 1_000_000 and setup.shards.smallest == 8
    rows = setup.shards[999_999]
    assert rows.dtype == np.int64 and len(rows) == 8 and rows.max() < len(setup.data.y_train)
    assert np.array_equal(rows, setup.shards[999_999])  # a public function of the job
    assert not np.array_equal(rows, setup.shards[999_998])
    assert sys.getsizeof(setup.shards) < 1_000  # O(1) in the population
    summary = run_experiment(config)
    assert summary["reports_history"] == [20] and summary["max_asked"] == 1
    assert 0 <= summary["accuracy"] <= 1


def test_only_the_mlp_takes_the_fused_step() -> None:
    assert is_mlp(mlp(64, 10)) and not is_mlp(cnn2(1, 28, 10))


def test_client_rows_refuse_label_skew() -> None:
    with pytest.raises(ConfigError, match="client_rows > 0 draws IID rows"):
        HflConfig(client_rows=8, dirichlet=0.5)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("fused", [True, False], ids=["fused-mlp", "vmap"])
def test_batched_cuda_equals_batched_cpu(fused: bool) -> None:
    config = HflConfig(clients=12, dirichlet=0.5, fedprox_mu=0.1, seed=6, fused_mlp=fused)
    cpu = engine.make_setup(replace(config, device="cpu"))
    cuda = engine.make_setup(replace(config, device="cuda"))
    start = get_flat(cpu.model)
    on_cpu = engine.train_clients(cpu, list(range(12)), start, 2)
    on_cuda = engine.train_clients(cuda, list(range(12)), start.to("cuda"), 2)
    assert on_cuda.device.type == "cuda"
    torch.testing.assert_close(on_cuda.cpu(), on_cpu, atol=1e-4, rtol=0)


def test_the_command_line_switches_reach_the_job() -> None:
    from privfl.cli.hfl import build_config

    config = build_config(None, {"iid": False, "batched": False, "client_rows": 4})
    assert config.batched is False and config.client_rows == 4
    assert HflConfig().batched is True and HflConfig().client_rows == 0
