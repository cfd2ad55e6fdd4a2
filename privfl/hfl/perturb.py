"""A client's local randomizer on its weights or update, in torch (no numpy round trip on a GPU).

The maths mirrors :mod:`privfl.mechanisms.ldp` (same constants, checked against it in
the tests); randomness comes from a ``torch.Generator`` on the tensor's device.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from privfl.hfl.config import HflConfig
from privfl.mechanisms.accountants import analytic_gaussian_sigma
from privfl.mechanisms.ldp import duchi_bound, piecewise_c, pnpm_c


def _uniform(like: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    return torch.rand(like.shape, generator=gen, device=like.device, dtype=like.dtype)


def duchi_t(t: torch.Tensor, epsilon: float, gen: torch.Generator) -> torch.Tensor:
    bound = duchi_bound(epsilon)
    plus = _uniform(t, gen) < 0.5 + t / (2 * bound)
    return torch.where(plus, bound, -bound).to(t.dtype)


def piecewise_t(t: torch.Tensor, epsilon: float, gen: torch.Generator) -> torch.Tensor:
    c = piecewise_c(epsilon)
    left = (c + 1) / 2 * t - (c - 1) / 2
    right = left + c - 1
    inside = _uniform(t, gen) < math.exp(epsilon / 2) / (math.exp(epsilon / 2) + 1)
    u = _uniform(t, gen)
    walk = u * (c + 1)
    outer = torch.where(walk < left + c, -c + walk, right + (walk - (left + c)))
    return torch.where(inside, left + u * (c - 1), outer)


def pnpm_t(w: torch.Tensor, epsilon: float, gen: torch.Generator) -> torch.Tensor:
    c = pnpm_c(epsilon)
    sign = torch.where(w < 0, -1.0, 1.0).to(w.dtype)
    magnitude = 1 + _uniform(w, gen) * (c - 1)
    keep = _uniform(w, gen) < math.exp(epsilon) / (math.exp(epsilon) + 1)
    return w.abs() * torch.where(keep, sign, -sign) * magnitude


def laplace_t(t: torch.Tensor, scale: float, gen: torch.Generator) -> torch.Tensor:
    u = _uniform(t, gen) - 0.5
    return t - scale * torch.sign(u) * torch.log1p(-2 * u.abs().clamp(max=0.5 - 1e-7))


def gaussian_t(t: torch.Tensor, sigma: float, gen: torch.Generator) -> torch.Tensor:
    noise = torch.randn(t.shape, generator=gen, device=t.device, dtype=t.dtype)
    return t + sigma * noise


@dataclass(frozen=True, slots=True)
class Calibration:
    """Per-run noise constants, public and identical at every client."""

    sigma: float = 0.0  # gaussian: N(0, σ²) on the clipped weights
    sigma_coord: float = 0.0  # gaussian-topk: per coordinate
    k: int = 0  # *-topk: coordinates reported


def calibrate(config: HflConfig, dims: int, smallest_shard: int) -> Calibration:
    """σ of NbAFL's client noise (analytic Gaussian, sensitivity 2C/m) and the top-k sizes."""
    k = max(1, round(config.topk_fraction * dims))
    if config.mechanism == "gaussian":
        sensitivity = 2 * config.clip_norm / smallest_shard
        return Calibration(
            sigma=analytic_gaussian_sigma(config.epsilon, config.delta, sensitivity), k=k
        )
    if config.mechanism == "gaussian-topk":
        sensitivity = 2 * 1.0  # per coordinate, after mapping to [−1, 1]
        sigma = analytic_gaussian_sigma(config.epsilon / k, config.delta / k, sensitivity)
        return Calibration(sigma_coord=sigma, k=k)
    return Calibration(k=k)


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


def randomize(
    config: HflConfig,
    calib: Calibration,
    weights: torch.Tensor,
    global_weights: torch.Tensor,
    slices: list[tuple[str, slice]],
    indices: torch.Tensor,
    gen: torch.Generator,
) -> torch.Tensor:
    """The report a client sends: perturbed weights, or the perturbed update on ``indices``."""
    mech, eps = config.mechanism, config.epsilon
    if mech == "none":
        return weights
    if mech == "pnpm":
        return pnpm_t(weights, eps, gen)
    if mech in ("duchi", "pm"):
        out = torch.empty_like(weights)
        for sl, centre, radius in layer_ranges(global_weights, slices, config.range_radius):
            t = ((weights[sl] - centre) / radius).clamp(-1.0, 1.0)
            noisy = duchi_t(t, eps, gen) if mech == "duchi" else piecewise_t(t, eps, gen)
            out[sl] = centre + radius * noisy
        return out
    if mech == "gaussian":
        clipped = weights / max(1.0, float(weights.norm()) / config.clip_norm)
        return gaussian_t(clipped, calib.sigma, gen)
    # SFD-RSS / SFD-RAS: the update on k coordinates, clipped, mapped to [−1, 1], noised.
    update = torch.zeros_like(weights)
    t = ((weights - global_weights)[indices] / config.delta_radius).clamp(-1.0, 1.0)
    if mech == "laplace-topk":
        noisy = laplace_t(t, 2.0 * calib.k / eps, gen)
    else:
        noisy = gaussian_t(t, calib.sigma_coord, gen)
    update[indices] = noisy * config.delta_radius
    return update
