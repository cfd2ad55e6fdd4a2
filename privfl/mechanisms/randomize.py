"""A client's local randomizer on its weights or update: the only thing that leaves the client.

Randomness comes from a :class:`~privfl.mechanisms.noise.NoiseSource` (ChaCha20 keyed
from the OS CSPRNG, never from the job). PNPM, Duchi and PM are the numpy mechanisms
of :mod:`privfl.mechanisms.ldp`; PM's continuous output is rounded to a 2^-20 grid of
its range. Laplace and Gaussian reports are discrete (CKS) releases on a grid
(:mod:`privfl.mechanisms.noise`), so no output is impossible under another input.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from privfl.config.horizontal import CLIPPED_UPDATES, HflConfig
from privfl.mechanisms.accountants import zcdp_rho_for
from privfl.mechanisms.ldp import duchi, piecewise, pnpm
from privfl.mechanisms.noise import (
    NoiseSource,
    gaussian_grid,
    gaussian_release,
    grid_sensitivity,
    laplace_release,
    subgaussian_norm,
    unit_grid,
)

PM_GRID = 2.0**-20  # PM's outputs (unit range) rounded to this grid: no float-lattice gaps


@dataclass(frozen=True, slots=True)
class Calibration:
    """Per-run noise constants, public and identical at every client."""

    sigma: float = 0.0  # gaussian: discrete N(0, σ²) on the clipped weights (weight units)
    grid: float = 0.0  # gaussian: the weights' grid step
    sigma_coord: float = 0.0  # gaussian-topk: per coordinate, in the [−1, 1] units
    rho: float = 0.0  # zCDP ρ of one report (gaussian, gaussian-topk)
    k: int = 0  # *-topk: coordinates reported
    update_clip: float = math.inf  # none/pnpm: L2 bound B of a client's update w − w_global


UPDATE_CLIP_SHARE = 0.5  # derived update_clip: this share of the initial model's L2 norm


def update_bound(config: HflConfig, dims: int, initial_norm: float, largest_shard: int) -> float:
    """The L2 bound B of a client's update (none/pnpm; inf for the other mechanisms).

    ``update_clip = 0`` derives it from the model: half the norm of the initial model
    (public, every party builds it from the job seed). A round of honest local
    training moves the weights by less: on digits' MLP (‖w₀‖ = 9.49) the largest
    honest update of 10 rounds × 20 clients was 4.74 IID and 5.4 of most
    Dirichlet(0.5) clients (docs/results-hfl.md); the old box ``±weight_bound`` allowed
    an update of norm ``100·√19210 ≈ 13,860``.

    DP-SGD local training adds its noise to the weights: plain SGD without momentum
    sums it, ``lr·Σ_t ξ_t`` over the ``s`` steps, Gaussian with ``σ = lr·z·C/b·√s`` per
    coordinate, so the derived bound adds that sum's norm bound (exceeded with
    probability ≤ e^{−40}); clipping below it would shrink every honest update.
    """
    if config.mechanism not in CLIPPED_UPDATES:
        return math.inf
    if config.update_clip > 0:
        return config.update_clip
    bound = UPDATE_CLIP_SHARE * initial_norm
    if config.local_dp == "dpsgd" and math.isfinite(bound):
        # privfl.learning.local_dp.local_steps: Poisson rate q = b/rows, epochs·round(1/q) steps
        q = min(1.0, config.batch_size / max(largest_shard, 1))
        steps = config.local_epochs * max(1, round(1 / q))
        step = config.lr * config.local_noise * config.local_clip / config.batch_size
        bound += subgaussian_norm(step * math.sqrt(steps), dims)
    return bound


def clip_update(weights: torch.Tensor, reference: torch.Tensor, bound: float) -> torch.Tensor:
    """``reference + Δ·min(1, B/‖Δ‖)`` for ``Δ = weights − reference``."""
    if math.isinf(bound):
        return weights
    delta = weights - reference
    norm = float(delta.double().norm())
    return weights if norm <= bound else reference + delta * (bound / norm)


def calibrate(
    config: HflConfig,
    dims: int,
    smallest_shard: int,
    initial_norm: float = math.inf,
    largest_shard: int = 0,
) -> Calibration:
    """σ of the discrete Gaussian reports (zCDP → (ε, δ) per report), the top-k sizes and
    the update bound (:func:`update_bound`; ``initial_norm`` is ‖w₀‖, inf when unknown:
    then only a set ``update_clip`` bounds the update).

    gaussian: NbAFL's L2 sensitivity 2C/m, plus the grid rounding's ``2√d`` steps.
    gaussian-topk: k coordinates in ``[−1, 1]``, L2 sensitivity ``2√k``.
    """
    k = max(1, round(config.topk_fraction * dims))
    if config.mechanism not in ("gaussian", "gaussian-topk"):
        bound = update_bound(config, dims, initial_norm, largest_shard or smallest_shard)
        return Calibration(k=k, update_clip=bound)
    rho = zcdp_rho_for(config.epsilon, config.delta)
    if config.mechanism == "gaussian":
        sensitivity = 2 * config.clip_norm / smallest_shard
        grid = gaussian_grid(sensitivity, dims)
        sigma_grid = grid_sensitivity(sensitivity, grid, dims) / math.sqrt(2 * rho)
        return Calibration(sigma=sigma_grid * grid, grid=grid, rho=rho, k=k)
    sigma = 2 * math.sqrt(k) / math.sqrt(2 * rho)
    return Calibration(sigma_coord=sigma, rho=rho, k=k)


def layer_ranges(
    reference: torch.Tensor, slices: list[tuple[str, slice]], radius: float
) -> list[tuple[slice, float, float]]:
    """(slice, centre, radius) per layer: fixed ``[−r, r]`` or adaptive (public global model)."""
    out = []
    for _, sl in slices:
        if radius > 0:
            out.append((sl, 0.0, radius))
            continue
        layer = reference[sl]
        centre = float(layer.mean())
        spread = float((layer - centre).abs().max())
        out.append((sl, centre, max(spread, 1e-3)))
    return out


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().double().cpu().numpy()


def _unit_ldp(
    mech: str, weights: np.ndarray, reference: torch.Tensor, config: HflConfig,
    slices: list[tuple[str, slice]], source: NoiseSource,
) -> np.ndarray:  # fmt: skip
    """Duchi or PM per layer: map to [−1, 1] (public range), randomize, map back."""
    out = np.empty_like(weights)
    for sl, centre, radius in layer_ranges(reference, slices, config.range_radius):
        t = np.clip((weights[sl] - centre) / radius, -1.0, 1.0)
        if mech == "duchi":
            noisy = duchi(t, config.epsilon, source.rng)
        else:
            noisy = np.round(piecewise(t, config.epsilon, source.rng) / PM_GRID) * PM_GRID
        out[sl] = centre + radius * noisy
    return out


def randomize(
    config: HflConfig,
    calib: Calibration,
    weights: torch.Tensor,
    global_weights: torch.Tensor,
    slices: list[tuple[str, slice]],
    indices: torch.Tensor,
    source: NoiseSource,
) -> torch.Tensor:
    """The report a client sends: perturbed weights, or the perturbed update on ``indices``."""
    mech, eps = config.mechanism, config.epsilon
    if mech in CLIPPED_UPDATES:  # an update of norm ≤ B, then the box
        weights = clip_update(weights, global_weights, calib.update_clip)
    if mech == "none":  # clipped so that every honest report lies in a known range
        return weights.clamp(-config.weight_bound, config.weight_bound)
    w = _np(weights)
    if mech == "pnpm":  # likewise: |w|·t* ≤ b·C once |w| ≤ b
        out = pnpm(np.clip(w, -config.weight_bound, config.weight_bound), eps, source.rng)
    elif mech in ("duchi", "pm"):
        out = _unit_ldp(mech, w, global_weights, config, slices, source)
    elif mech == "gaussian":
        clipped = w / max(1.0, float(np.linalg.norm(w)) / config.clip_norm)
        out = gaussian_release(clipped, calib.sigma, calib.grid, source)
    else:  # SFD-RSS / SFD-RAS: the update on k coordinates, clipped to [−1, 1], noised
        idx = indices.cpu().numpy()
        t = np.clip((w - _np(global_weights))[idx] / config.delta_radius, -1.0, 1.0)
        if mech == "laplace-topk":
            noisy = laplace_release(t, 2.0 * calib.k / eps, source)
        else:
            noisy = gaussian_release(t, calib.sigma_coord, unit_grid(calib.sigma_coord), source)
        out = np.zeros_like(w)
        out[idx] = noisy * config.delta_radius
    return torch.from_numpy(out).to(dtype=weights.dtype, device=weights.device)
