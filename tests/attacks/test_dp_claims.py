"""Attack (claims): measure each shipped mechanism's ε from its outputs, against its claim.

An ε printed by a bug looks like a real one. The auditor (tests/dp_auditor.py, not
the mechanisms' code) samples each mechanism through its public API on two
neighbouring inputs and proves a lower bound on ε (Clopper–Pearson, α = 1e-4). It
must not exceed the claim (the claim is sound); where the best event is a simple
threshold, it must reach 0.7 × the claim (the claim is not vacuous: the mechanism
spends what it says). The leaky arm runs each mechanism at twice its ε — four
times its ρ for the Gaussian — while claiming the original: the auditor catches it.

The HFL randomizers go through the client's own ``randomize`` (PNPM, Duchi, PM with
its output grid) or the releases it calls (discrete Laplace and Gaussian on a grid,
with the simulator's vectorised integer samplers, and the discrete Laplace once more
with the client's OpenDP sampler, on fewer draws: it is about 100× slower).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from dp_auditor import Sampler, audit

from privfl.config.horizontal import HflConfig
from privfl.mechanisms.label_dp import laplace_labels, private_generator, randomized_response
from privfl.mechanisms.noise import (
    NoiseSource,
    gaussian_release,
    laplace_release,
    private_source,
    unit_grid,
)
from privfl.mechanisms.randomize import Calibration, calibrate, randomize

N_SELECT, N_EVAL = 200_000, 1_000_000
TIGHT = 0.7


@dataclass(frozen=True)
class Claim:
    """A mechanism at a claimed (ε, δ); ``make(factor)`` samples it at ``factor`` × that ε."""

    epsilon: float
    delta: float
    inputs: tuple[float, float]
    make: Callable[[float], Sampler]
    tight: bool = True
    samples: tuple[int, int] = (N_SELECT, N_EVAL)  # per input: selection, evaluation


def rng() -> np.random.Generator:
    return private_generator()


def rr(epsilon: float, classes: int) -> Callable[[float], Sampler]:
    def make(factor: float) -> Sampler:
        return lambda y, n: randomized_response(
            np.full(n, int(y)), factor * epsilon, rng(), num_classes=classes
        )

    return make


def laplace_label(epsilon: float) -> Callable[[float], Sampler]:
    def make(factor: float) -> Sampler:
        return lambda y, n: laplace_labels(np.full(n, y), factor * epsilon, 0.0, 1.0, rng())[0]

    return make


def client(mechanism: str, epsilon: float) -> Callable[[float], Sampler]:
    """The HFL client's ``randomize`` on n one-weight coordinates, each an independent trial."""

    def make(factor: float) -> Sampler:
        config = HflConfig(mechanism=mechanism, epsilon=factor * epsilon, range_radius=1.0)

        def sample(w: float, n: int) -> np.ndarray:
            weights = torch.full((n,), w, dtype=torch.float64)
            out = randomize(
                config, Calibration(), weights, torch.zeros_like(weights),
                [("w", slice(0, n))], torch.arange(0), NoiseSource(rng(), exact=False),
            )  # fmt: skip
            return out.numpy()

        return sample

    return make


def discrete_laplace(epsilon: float, exact: bool = False) -> Callable[[float], Sampler]:
    """laplace-topk's release of one coordinate in [−1, 1] (k = 1: scale 2/ε).

    ``exact``: through the client's own source, OpenDP's exact integer sampler.
    """

    def make(factor: float) -> Sampler:
        scale = 2.0 / (factor * epsilon)
        return lambda t, n: laplace_release(
            np.full(n, t), scale, private_source() if exact else NoiseSource(rng(), exact=False)
        )

    return make


def discrete_gaussian(epsilon: float, delta: float) -> Callable[[float], Sampler]:
    """gaussian-topk's release of one coordinate, σ from the client's own calibration."""

    def make(factor: float) -> Sampler:
        config = HflConfig(mechanism="gaussian-topk", epsilon=epsilon, delta=delta, topk_fraction=1)
        sigma = calibrate(config, 1, 1).sigma_coord / factor  # ρ × factor²
        grid = unit_grid(sigma)
        return lambda t, n: gaussian_release(
            np.full(n, t), sigma, grid, NoiseSource(rng(), exact=False)
        )

    return make


CLAIMS = {
    "rr-labels": Claim(2.0, 0.0, (0, 1), rr(2.0, 2)),
    "rr-4-classes": Claim(2.0, 0.0, (0, 1), rr(2.0, 4)),
    "laplace-labels": Claim(1.0, 0.0, (0.0, 1.0), laplace_label(1.0)),
    "pnpm": Claim(1.0, 0.0, (-1.0, 1.0), client("pnpm", 1.0)),
    "duchi": Claim(1.0, 0.0, (-1.0, 1.0), client("duchi", 1.0)),
    "pm": Claim(2.0, 0.0, (-1.0, 1.0), client("pm", 2.0)),
    "discrete-laplace": Claim(1.0, 0.0, (-1.0, 1.0), discrete_laplace(1.0)),
    # The client's OpenDP sampler (~30 µs a draw here): fewer draws, still ≥ 0.7 × ε.
    "discrete-laplace-opendp": Claim(
        1.0, 0.0, (-1.0, 1.0), discrete_laplace(1.0, exact=True), samples=(10_000, 30_000)
    ),
    # A threshold event sees only part of the Gaussian's (ε, δ) curve: soundness only.
    "discrete-gaussian": Claim(1.0, 1e-5, (-1.0, 1.0), discrete_gaussian(1.0, 1e-5), tight=False),
}


@pytest.mark.parametrize("name", CLAIMS)
def test_the_measured_epsilon_is_within_the_claim(name: str) -> None:
    claim = CLAIMS[name]

    found = audit(claim.make(1.0), claim.inputs, *claim.samples, delta=claim.delta)

    assert found.epsilon_lb <= claim.epsilon, found
    if claim.tight:
        assert found.epsilon_lb >= TIGHT * claim.epsilon, found


@pytest.mark.parametrize("name", CLAIMS)
def test_an_over_claimed_mechanism_is_caught(name: str) -> None:
    claim = CLAIMS[name]

    found = audit(claim.make(2.0), claim.inputs, *claim.samples, delta=claim.delta)

    assert found.epsilon_lb > claim.epsilon, found
