"""Each mechanism's report range admits every honest report and refuses what none can be."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from privfl.config.horizontal import HflConfig
from privfl.learning import fedavg as engine
from privfl.learning.models import get_flat
from privfl.mechanisms.ldp import duchi_bound
from privfl.mechanisms.noise import private_source
from privfl.mechanisms.randomize import calibrate, randomize
from privfl.mechanisms.ranges import report_range, subgaussian_norm

CONFIGS = [
    HflConfig(mechanism="none"),
    HflConfig(mechanism="pnpm", epsilon=0.5),
    HflConfig(mechanism="duchi", epsilon=0.5),
    HflConfig(mechanism="duchi", epsilon=2.0, range_radius=0.3),
    HflConfig(mechanism="pm", epsilon=0.5),
    HflConfig(mechanism="gaussian", epsilon=1.0),
    HflConfig(mechanism="laplace-topk", epsilon=1.0),
    HflConfig(mechanism="laplace-topk", epsilon=1.0, topk_public=False),
    HflConfig(mechanism="gaussian-topk", epsilon=1.0),
    HflConfig(mechanism="gaussian-topk", epsilon=1.0, topk_public=False),
]
IDS = [f"{c.mechanism}-{c.epsilon:g}{'' if c.topk_public else '-private'}" for c in CONFIGS]
SETUP = engine.make_setup(HflConfig(clients=4))


def _setup(config: HflConfig) -> engine.Setup:
    """The digits setup with ``config``'s mechanism (same model and data, update bound)."""
    initial = float(get_flat(SETUP.model).double().norm())
    return replace(SETUP, config=config, calib=calibrate(config, SETUP.dims, 100, initial))


@pytest.mark.parametrize("config", CONFIGS, ids=IDS)
def test_every_honest_report_is_admitted_wherever_the_global_model_is(config: HflConfig) -> None:
    setup = _setup(replace(config, clients=4, local_epochs=1))
    source = private_source(exact=False)
    gen = torch.Generator().manual_seed(0)
    for shift in (0.0, 7.0, -300.0):  # however far earlier rounds moved the model
        glob = get_flat(setup.model) + shift
        indices = engine.report_indices(setup, torch.randn(setup.dims, generator=gen), 2)
        allowed = report_range(setup.config, setup.calib, glob, setup.slices, indices)
        for scale in (0.01, 1.0, 1e4):  # local weights near, far and very far from it
            local = glob + scale * torch.randn(setup.dims, generator=gen)
            report = randomize(
                setup.config, setup.calib, local, glob, setup.slices, indices, source
            )
            assert allowed.admits(report.float().numpy()), (shift, scale)


@pytest.mark.parametrize("config", CONFIGS, ids=IDS)
def test_reports_no_mechanism_can_output_are_refused(config: HflConfig) -> None:
    setup = _setup(config)
    glob = get_flat(setup.model)
    indices = engine.report_indices(setup, None, 1)
    allowed = report_range(config, setup.calib, glob, setup.slices, indices)
    honest = np.zeros(setup.dims, np.float32) if config.mechanism.endswith("topk") else glob.numpy()
    assert allowed.admits(honest)
    for value in (1e30, -1e30, np.nan, np.inf, -np.inf):
        bad = honest.copy()
        bad[indices[0].item()] = value
        assert not allowed.admits(bad), value
    assert not allowed.admits(honest[:-1])  # another length


def test_duchi_admits_exactly_its_two_outputs_per_layer() -> None:
    config = HflConfig(mechanism="duchi", epsilon=1.0, range_radius=0.5)
    setup = _setup(config)
    glob = torch.zeros(setup.dims)
    allowed = report_range(config, setup.calib, glob, setup.slices, torch.arange(1))
    edge = 0.5 * duchi_bound(1.0)
    assert allowed.admits(np.full(setup.dims, edge, np.float32))
    assert not allowed.admits(np.full(setup.dims, edge * 1.001, np.float32))


def test_the_gaussian_norm_bound_is_a_tail_not_a_guess() -> None:
    # the norm concentrates at σ√d with spread about σ; the bound sits some 6σ above
    sigma, dims = 0.3, 10_000
    bound = subgaussian_norm(sigma, dims)
    norms = [np.linalg.norm(np.random.default_rng(i).normal(0, sigma, dims)) for i in range(50)]
    assert max(norms) < bound < sigma * (np.sqrt(dims) + 12)
