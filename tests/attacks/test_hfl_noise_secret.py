"""The aggregator regenerates a client's noise from the job file, as it could before issue 12.

Everything in a client's report except the noise is reproducible from the job (data
split, initial weights, batch order come from the job seed), so an aggregator that
could regenerate the noise would read the clean update. It now comes from a
ChaCha20 generator keyed by the OS CSPRNG; only the research option
``seeded_noise`` makes it reproducible, and then every output says so.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from privfl.config.horizontal import HflConfig
from privfl.learning import fedavg as engine
from privfl.learning.models import get_flat
from privfl.mechanisms.noise import SEEDED_LABEL, private_source, seeded_source
from privfl.runs.simulate import run_experiment

LAPLACE = HflConfig(mechanism="laplace-topk", epsilon=50.0, clients=4, local_epochs=1, seed=7)
DPSGD = HflConfig(clients=4, local_epochs=1, local_dp="dpsgd", local_noise=1.0, seed=7)


def _client_report(config: HflConfig) -> torch.Tensor:
    """What client 1 sends in round 1, run as its own fresh process would (new CSPRNG)."""
    setup = engine.make_setup(config)
    weights = get_flat(setup.model)
    indices = engine.report_indices(setup, None, 1)
    return engine.client_report(setup, 1, weights, indices, 1, private_source())


def _aggregator_regenerates(config: HflConfig) -> torch.Tensor:
    """The attacker: replays the client's computation with noise derived from the job."""
    setup = engine.make_setup(config)
    weights = get_flat(setup.model)
    indices = engine.report_indices(setup, None, 1)
    return engine.client_report(setup, 1, weights, indices, 1, seeded_source(config.seed, 1, 1))


def test_two_runs_of_the_same_job_send_different_noise() -> None:
    for config in (LAPLACE, DPSGD):
        assert not torch.equal(_client_report(config), _client_report(config))


def test_regenerating_the_noise_from_the_job_does_not_match() -> None:
    for config in (LAPLACE, DPSGD):
        assert not torch.equal(_client_report(config), _aggregator_regenerates(config))


def test_with_seeded_noise_the_attack_succeeds_and_outputs_say_not_private() -> None:
    for config in (LAPLACE, DPSGD):
        seeded = replace(config, seeded_noise=True)
        assert torch.equal(_client_report(seeded), _aggregator_regenerates(seeded))
    summary = run_experiment(replace(LAPLACE, rounds=1, seeded_noise=True))
    assert summary["noise"] == SEEDED_LABEL
    assert any(SEEDED_LABEL in line for line in summary["ledger"])
    assert SEEDED_LABEL in summary["epsilon_assumptions"]["epsilon_total"]
