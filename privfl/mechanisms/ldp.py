"""Local-DP randomizers on weights (docs/guide.md): Duchi, PM, PNPM, Gaussian, Laplace, top-k.

Every function is pure and vectorised over numpy arrays; randomness comes in as a
``numpy.random.Generator``. The inputs of Duchi and PM lie in ``[−1, 1]``: map
weights there first with :func:`to_unit` (clip to a per-layer range) and back with
:func:`from_unit`. All outputs are unbiased estimates of their (clipped) inputs.
"""

from __future__ import annotations

import math

import numpy as np


def _check_epsilon(epsilon: float) -> None:
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ValueError(f"epsilon must be a finite number > 0, got {epsilon}")


def _check_unit(t: np.ndarray) -> None:
    if t.size and (np.nanmax(np.abs(t)) > 1.0 or np.isnan(t).any()):
        raise ValueError("inputs must lie in [-1, 1]; map them with to_unit first")


def duchi_bound(epsilon: float) -> float:
    """Duchi's output magnitude ``B = (e^ε + 1)/(e^ε − 1)``."""
    _check_epsilon(epsilon)
    return (math.exp(epsilon) + 1) / math.expm1(epsilon)


def duchi(t: np.ndarray, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """Duchi et al.'s ε-LDP mechanism: each ``t ∈ [−1, 1]`` becomes ``±B``, unbiased.

    ``P[+B] = ½ + t (e^ε − 1)/(2(e^ε + 1))``; variance ``B² − t²``.
    """
    t = np.asarray(t, dtype=np.float64)
    _check_unit(t)
    bound = duchi_bound(epsilon)
    p_plus = 0.5 + t / (2 * bound)
    return np.where(rng.random(t.shape) < p_plus, bound, -bound)


def duchi_variance(t: np.ndarray | float, epsilon: float) -> np.ndarray:
    """``Var[duchi(t)] = B² − t²``."""
    return duchi_bound(epsilon) ** 2 - np.square(t)


def piecewise_c(epsilon: float) -> float:
    """PM's output range ``C = (e^{ε/2} + 1)/(e^{ε/2} − 1)``."""
    _check_epsilon(epsilon)
    return (math.exp(epsilon / 2) + 1) / math.expm1(epsilon / 2)


def piecewise(t: np.ndarray, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """The Piecewise Mechanism (Wang et al. 2019): ε-LDP, unbiased, output in ``[−C, C]``.

    With probability ``e^{ε/2}/(e^{ε/2} + 1)`` uniform on ``[l(t), r(t)]``, otherwise
    uniform on ``[−C, l(t)) ∪ (r(t), C]``; ``l(t) = (C+1)/2·t − (C−1)/2``, ``r = l + C − 1``.
    """
    t = np.asarray(t, dtype=np.float64)
    _check_unit(t)
    c = piecewise_c(epsilon)
    left = (c + 1) / 2 * t - (c - 1) / 2
    right = left + c - 1
    inside = rng.random(t.shape) < math.exp(epsilon / 2) / (math.exp(epsilon / 2) + 1)
    u = rng.random(t.shape)
    centre = left + u * (c - 1)
    # The two outer pieces have total length C + 1; walk along them.
    walk = u * (c + 1)
    outer = np.where(walk < left + c, -c + walk, right + (walk - (left + c)))
    return np.where(inside, centre, outer)


def piecewise_variance(t: np.ndarray | float, epsilon: float) -> np.ndarray:
    """``Var[PM(t)] = t²/(e^{ε/2} − 1) + (e^{ε/2} + 3)/(3(e^{ε/2} − 1)²)``."""
    e = math.exp(epsilon / 2)
    return np.square(t) / (e - 1) + (e + 3) / (3 * (e - 1) ** 2)


def pnpm_c(epsilon: float) -> float:
    """PNPM's output range ``C = (e^ε + 3)/(e^ε − 1)``."""
    _check_epsilon(epsilon)
    return (math.exp(epsilon) + 3) / math.expm1(epsilon)


def pnpm_sign(t: np.ndarray, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """PNPM on signs ``t ∈ {−1, 1}`` (seed 000): ``t*`` with ``E[t*] = t``.

    With probability ``e^ε/(e^ε + 1)`` uniform on ``[l(t), r(t)]`` (``[1, C]`` for
    ``t = 1``), otherwise uniform on ``[−r(t), −l(t)]``. The sign is ε-LDP.
    """
    t = np.asarray(t, dtype=np.float64)
    if t.size and not np.isin(t, (-1.0, 1.0)).all():
        raise ValueError("PNPM takes signs in {-1, 1}")
    c = pnpm_c(epsilon)
    magnitude = 1 + rng.random(t.shape) * (c - 1)  # uniform on [1, C]
    keep = rng.random(t.shape) < math.exp(epsilon) / (math.exp(epsilon) + 1)
    return np.where(keep, t, -t) * magnitude


def pnpm(w: np.ndarray, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """PNPM on weights: ``|w| · t*`` for ``t = sign(w)`` (zeros count as +1), unbiased.

    Only the *sign* of each weight is ε-LDP; ``|w|`` is scaled by a factor in
    ``[1, C]`` and is not hidden.
    """
    w = np.asarray(w, dtype=np.float64)
    out: np.ndarray = np.abs(w) * pnpm_sign(np.where(w < 0, -1.0, 1.0), epsilon, rng)
    return out


def pnpm_variance(epsilon: float) -> float:
    """``Var[t*] = 4(e^ε + 1/3)/(e^ε − 1)²`` (multiply by ``w²`` for ``pnpm(w)``)."""
    _check_epsilon(epsilon)
    return 4 * (math.exp(epsilon) + 1 / 3) / math.expm1(epsilon) ** 2


def laplace(
    t: np.ndarray, epsilon: float, rng: np.random.Generator, sensitivity: float = 2.0
) -> np.ndarray:
    """ε-DP Laplace noise of scale ``sensitivity/ε`` (2 for inputs in ``[−1, 1]``)."""
    _check_epsilon(epsilon)
    t = np.asarray(t, dtype=np.float64)
    return t + rng.laplace(0.0, sensitivity / epsilon, size=t.shape)


def gaussian(t: np.ndarray, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """Add ``N(0, σ²)`` to every coordinate (calibrate σ with the accountants)."""
    t = np.asarray(t, dtype=np.float64)
    return t + rng.normal(0.0, sigma, size=t.shape)


def clip_norm(w: np.ndarray, clip: float) -> np.ndarray:
    """NbAFL's clipping ``w / max(1, ‖w‖₂ / C)``."""
    w = np.asarray(w, dtype=np.float64)
    return w / max(1.0, float(np.linalg.norm(w)) / clip)


def to_unit(w: np.ndarray, centre: float, radius: float) -> np.ndarray:
    """Clip ``w`` to ``[centre − radius, centre + radius]`` and map that range onto ``[−1, 1]``."""
    if not radius > 0:
        raise ValueError("a layer range needs a radius > 0")
    return np.clip((np.asarray(w, dtype=np.float64) - centre) / radius, -1.0, 1.0)


def from_unit(t: np.ndarray, centre: float, radius: float) -> np.ndarray:
    """Inverse of :func:`to_unit` (on ``[−1, 1]``; applied to noisy outputs too)."""
    return centre + radius * np.asarray(t, dtype=np.float64)


def topk_indices(score: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` coordinates with the largest ``|score|``, ascending (ties by position).

    Pass *public* scores (the last global update) so the index set leaks nothing;
    a client's own update as score leaks which coordinates moved (docs/results.md, hfl-shuffle).
    """
    score = np.abs(np.asarray(score, dtype=np.float64)).ravel()
    if not 0 < k <= score.size:
        raise ValueError(f"k must be in 1..{score.size}, got {k}")
    order = np.argsort(-score, kind="stable")[:k]
    return np.sort(order)
