"""``[[Xᵀr]]`` per class and its layout: the gradient step every data holder takes alike.

Shared by the Host and the guests (neither imports the other's steps).
"""

from __future__ import annotations

import numpy as np

from privfl.crypto.paillier import PublicKey
from privfl.crypto.pools import NoisePool


def class_matvec(
    noise: NoisePool, key: PublicKey, x_exp: np.ndarray, residual: list[int], k: int
) -> list[int]:
    """``[[Xᵀ R]]`` for a residual of ``rows·k`` (row-major), class-major: ``c·f + j``."""
    if k == 1:
        return noise.matvec_t(key, x_exp, residual)
    out: list[int] = []
    for c in range(k):
        out += noise.matvec_t(key, x_exp, residual[c::k])
    return out


def unflatten(values: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """A class-major gradient (``c·f + j``) back in θ's ``(f, k)`` layout."""
    features, k = shape
    return np.asarray(values).reshape(k, features).T
