"""What an honest report can be: each local randomizer's output range, from public values only.

The aggregator refuses a report outside its range (NaN and ±∞ included), so one
client cannot move the average by more than the mechanism itself allows. Every
bound is computed from what every client also holds (the job, the global model
it was sent, the public top-k indices), so it never refuses an honest report,
however far a previous round moved the model:

- ``none`` / ``pnpm``: clients clip their update to ``‖w − w_g‖ ≤ B`` (``update_clip``,
  :func:`~privfl.mechanisms.randomize.update_bound`) and the weights to ``[−b, b]``
  (``weight_bound``), so a report lies in ``[−b, b]`` within ``B`` of ``w_g`` (none),
  or in ``[−b·C, b·C]`` (PNPM scales ``|w|`` by ≤ C) with
  ``‖max(0, |r|/C − |w_g|)‖ ≤ B``: some ``w`` within ``B`` of ``w_g`` has ``|r| ≤ C·|w|``.
  PNPM's sign is random, so a report's signs are never checked: any sign is honest.
- ``duchi`` / ``pm``: per layer ``centre ± radius·B`` (Duchi) or ``± radius·(C + grid)`` (PM).
- ``gaussian`` (NbAFL): no bounded support. The clipped weights have ``‖w‖ ≤ C``, the
  rounding moves each by < one grid step, and discrete Gaussian noise is σ-subgaussian
  (Canonne–Kamath–Steinke 2020), so by Hsu–Kakade–Zhang (2012)
  ``P[‖noise‖² > σ²(d + 2√(dt) + 2t)] ≤ e^{−t}``: with ``t = TAIL`` an honest report is
  refused with probability below ``e^{−40} ≈ 4·10^{−18}``.
- ``laplace-topk``: per coordinate ``r·(1 + s·(ln 2k + TAIL))`` (discrete Laplace tail,
  union bound over the k coordinates); ``gaussian-topk``: the same norm bound as above
  on k coordinates. Off the public indices a report is zero (with private indices: at
  most k non-zero coordinates).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from privfl.config.horizontal import HflConfig
from privfl.mechanisms import skellam
from privfl.mechanisms.ldp import duchi_bound, piecewise_c, pnpm_c
from privfl.mechanisms.noise import TAIL, subgaussian_norm
from privfl.mechanisms.randomize import PM_GRID, Calibration, layer_ranges

SLACK = 1e-5  # relative: float32 transport and a client's other device round differently


@dataclass(frozen=True, slots=True)
class ReportRange:
    """Per-coordinate limits, an L2 limit around ``centre``, and how many may be non-zero."""

    low: np.ndarray
    high: np.ndarray
    centre: np.ndarray
    norm: float = math.inf
    nonzero: int | None = None
    scale: float = 0.0  # > 0 (PNPM's C): the norm limit is on max(0, |r|/scale − |centre|)

    def admits(self, report: np.ndarray) -> bool:
        """True iff ``report`` is finite and within every limit."""
        r = np.asarray(report, dtype=np.float64)
        if r.shape != self.low.shape or not bool(np.isfinite(r).all()):
            return False
        if bool((r < self.low).any() or (r > self.high).any()):
            return False
        if self.nonzero is not None and int(np.count_nonzero(r)) > self.nonzero:
            return False
        if math.isinf(self.norm):
            return True
        if self.scale > 0:
            excess = np.maximum(np.abs(r) / self.scale - np.abs(self.centre), 0.0)
            return float(np.linalg.norm(excess)) <= self.norm
        return float(np.linalg.norm(r - self.centre)) <= self.norm


def _box(limit: np.ndarray | float, dims: int, centre: np.ndarray | None = None) -> ReportRange:
    mid = np.zeros(dims) if centre is None else centre
    half = np.broadcast_to(np.asarray(limit, dtype=np.float64), (dims,))
    pad = SLACK * (np.abs(mid) + half)
    return ReportRange(mid - half - pad, mid + half + pad, mid)


def _layers(
    config: HflConfig, reference: torch.Tensor, slices: list[tuple[str, slice]], spread: float
) -> ReportRange:
    """Duchi / PM: each layer's public ``centre ± radius·spread``."""
    dims = int(slices[-1][1].stop)
    centre, half = np.zeros(dims), np.zeros(dims)
    for sl, mid, radius in layer_ranges(reference, slices, config.range_radius):
        centre[sl], half[sl] = mid, radius * spread
    return _box(half, dims, centre)


def _topk(
    config: HflConfig,
    calib: Calibration,
    dims: int,
    indices: np.ndarray | None,
    per_coord: float,
    norm: float,
) -> ReportRange:
    """*-topk: ``per_coord`` on the k coordinates (zero elsewhere when they are public)."""
    limit = np.full(dims, per_coord * config.delta_radius)
    if indices is not None:
        mask = np.zeros(dims, dtype=bool)
        mask[indices] = True
        limit[~mask] = 0.0
    box = _box(limit, dims)
    nonzero = None if indices is not None else calib.k
    return ReportRange(box.low, box.high, box.centre, norm * (1 + SLACK), nonzero)


def secure_noise_norm(config: HflConfig, bound: float, dims: int) -> float:
    """Under secure aggregation a report is a group mean: the tail bound of its Skellam
    noise's norm (groups of at least ``max(2, secagg_group)``; Skellam of variance v has the
    cumulant ``v(cosh t − 1) = v t²/2 + O(v t⁴)``: at variances of ~2^32 it is the Gaussian's
    up to a relative 1e-9 over the tail's t), plus one grid step per coordinate of rounding."""
    if not config.secure_aggregation or not math.isfinite(bound):
        return 0.0
    step = skellam.grid_step(bound)
    # with secagg_bounds the report is a mean of at least one input carrying both servers'
    # noise (variance 2·(z·Δ₂)²): the bound of one input, every valid client count
    share = 2**-0.5 if config.secagg_bounds else max(2, config.secagg_group)
    sigma = config.ddp_noise * skellam.l2_sensitivity(dims) * step / share
    return subgaussian_norm(sigma, dims) + step * math.sqrt(dims)


def report_range(
    config: HflConfig,
    calib: Calibration,
    reference: torch.Tensor,
    slices: list[tuple[str, slice]],
    indices: torch.Tensor,
) -> ReportRange:
    """The range of an honest report given the global model ``reference`` the clients were sent.

    ``indices`` are the round's public top-k coordinates (used with ``topk_public``).
    """
    mech, eps, dims = config.mechanism, config.epsilon, int(slices[-1][1].stop)
    if mech in ("none", "pnpm"):
        scale = pnpm_c(eps) if mech == "pnpm" else 1.0
        box = _box(config.weight_bound * scale, dims)
        # clients clamp w_g + Δ to the box: a projection, so within B of the clamped w_g
        sent = np.clip(reference.detach().double().cpu().numpy(), -config.weight_bound,
                       config.weight_bound)  # fmt: skip
        bound = calib.update_clip + secure_noise_norm(config, calib.update_clip, dims)
        if math.isfinite(bound):  # float32 transport and the client's clip round differently
            bound += SLACK * (bound + float(np.linalg.norm(sent)))
        return ReportRange(box.low, box.high, sent, bound, scale=scale if mech == "pnpm" else 0.0)
    if mech == "duchi":
        return _layers(config, reference, slices, duchi_bound(eps))
    if mech == "pm":
        return _layers(config, reference, slices, piecewise_c(eps) + PM_GRID)
    if mech == "gaussian":
        norm = config.clip_norm + math.sqrt(dims) * calib.grid + subgaussian_norm(calib.sigma, dims)
        box = _box(norm, dims)
        return ReportRange(box.low, box.high, box.centre, norm * (1 + SLACK))
    public = indices.cpu().numpy() if config.topk_public else None
    k = calib.k
    if mech == "laplace-topk":
        scale = 2.0 * k / eps  # laplace_release's scale in the unit range
        per_coord = 1 + scale * (math.log(2 * k) + TAIL)
        return _topk(config, calib, dims, public, per_coord, math.inf)
    norm = math.sqrt(k) + subgaussian_norm(calib.sigma_coord, k)  # gaussian-topk
    return _topk(config, calib, dims, public, norm, norm * config.delta_radius)
