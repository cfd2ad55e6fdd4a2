"""The separable sigmoid: ``σ(a + b) ≈ c₀(a) + Σ_k c_k(a)·g_k(b)`` for two parties' scores.

One-vs-rest logistic regression needs ``σ(z_H + z_G) − y`` per row and class, with
``z_H`` at the Host in the clear and ``z_G`` at the guest. Paillier adds ciphertexts and
multiplies them by plaintexts, nothing more, so the Host can only form a *linear*
combination of ciphertexts the guest sent, with coefficients of its own. The
second-order Taylor residual is the case ``g = (b)``, ``c(a) = (½ + a/4, ¼)``: a
least-squares fit whose optimum stays below logistic regression on hard tasks (digits:
0.924 against 0.951).

Here the guest sends four functions of its score, the **basis**
``g(b) = (σ(b + 4), σ(b), σ(b − 4), clip(b, ±12))``, and the Host, who knows ``a``, picks the
coefficients that best reproduce ``b ↦ σ(a + b)`` on that basis: a weighted
least-squares fit over ``b`` on a grid, weights ``exp(−b²/72)`` (scores of a
standardised model mostly lie within ±12). The Host computes its coefficients per row
exactly (no table), so only the guest's basis is part of the protocol
(docs/protocol.md §6.3). The basis is bounded and smooth, so unlike a polynomial
sigmoid the fit cannot turn over and diverge for large scores: it stays within
[−0.4, 1.4] for any scores (|a| ≤ 40, |b| ≤ 100 checked). Error of the sigmoid
(tests/learning/test_separable.py): at most 0.12 (root mean square 0.050) for
``|a|, |b| ≤ 4`` and 0.18 (0.054) for ``|a|, |b| ≤ 8``, against 1.50 (0.48) and 3.50
(1.26) for the Taylor residual.

The cross-entropy the Server reports, ``softplus(a + b) − y(a + b)``, goes through the
same basis. Its plain least-squares fit fell up to 2.14 below zero (``a = −4, b = −12``,
label 0), so on digits the reported loss went negative. The Host knows each row's label
and ``a``, so it fits ``b ↦ softplus(a + b) − y(a + b)`` under the constraint that the
fitted curve is ≥ 0 for every ``b`` (``loss_coefficients``: a small QP per tabulated
``a``, errors weighted relative to the loss so near-zero losses stay near zero). Every
reported loss is then ≥ 0. The fit is within 0.65 of the cross-entropy (root mean
square 0.19) for ``|a|, |b| ≤ 4``; on digits (the vfl-models case, 30 epochs in the
clear) it reads 3.64 → 0.71 where the exact cross-entropy reads 3.48 → 0.45. It draws
the loss curve and feeds the stopping rule; the gradient follows the sigmoid's fit.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from privfl.learning.taylor import sigmoid

SHIFTS = (-4.0, 0.0, 4.0)
"""The guest's sigmoids are ``σ(b − s)`` for these ``s``; the basis ends with ``b`` itself."""
BASIS = len(SHIFTS) + 1
"""Values the guest sends per score: K = 4."""
LIMIT = 12.0
"""The fit's grid spans ``b`` in ±LIMIT; the basis's last value is ``b`` clipped to it."""
_GRID = np.linspace(-LIMIT, LIMIT, 121)
_ROOT_WEIGHT = np.exp(-0.25 * (_GRID / 6.0) ** 2)  # √ of exp(−b²/72)
RELATIVE = 0.1
"""The loss's fit weighs a grid point's squared error by ``1 / (loss + RELATIVE)``."""
A_LIMIT = 40.0
"""The loss's fit is tabulated for Host scores in ±A_LIMIT (linear in ``a`` past it)."""
_TABLE_A = np.linspace(-A_LIMIT, A_LIMIT, 161)
# Guest scores on which a fitted loss must be ≥ 0: past ±(LIMIT + 28) the basis is
# constant to within σ(−24) ≈ 4e-11, so these spans cover every real score.
_SPAN = np.linspace(-LIMIT - 28.0, LIMIT + 28.0, 161)
_CHECK_SPAN = np.linspace(-LIMIT - 28.0, LIMIT + 28.0, 801)


def guest_basis(z: np.ndarray) -> np.ndarray:
    """``(len(z), K)``: ``σ(z + 4), σ(z), σ(z − 4), clip(z, ±12)`` per guest score.

    The clip keeps every basis value bounded, so the fit is too for any score.
    """
    z = np.asarray(z, dtype=np.float64).ravel()
    return np.column_stack([*(sigmoid(z - s) for s in SHIFTS), np.clip(z, -LIMIT, LIMIT)])


def _projection() -> np.ndarray:
    """``(1 + K, grid)``: weighted least squares onto the constant and the guest's basis."""
    design = np.column_stack([np.ones_like(_GRID), guest_basis(_GRID)])
    return np.asarray(np.linalg.pinv(design * _ROOT_WEIGHT[:, None]) * _ROOT_WEIGHT[None, :])


_PROJECT = _projection()
_DESIGN = np.column_stack([np.ones_like(_GRID), guest_basis(_GRID)])
_CURVE = np.column_stack([np.ones_like(_SPAN), guest_basis(_SPAN)])
_CHECK = np.column_stack([np.ones_like(_CHECK_SPAN), guest_basis(_CHECK_SPAN)])


def softplus(x: np.ndarray) -> np.ndarray:
    """``log(1 + e^x)``, stable for large |x|."""
    return np.asarray(np.logaddexp(0.0, x))


def coefficients(a: np.ndarray, func: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """``(len(a), 1 + K)``: the fit of ``b ↦ func(a + b)`` per Host score ``a``.

    Column 0 is the constant the Host adds in the clear; columns 1..K multiply the
    guest's basis values.
    """
    a = np.asarray(a, dtype=np.float64).ravel()
    return np.asarray(func(a[:, None] + _GRID[None, :]) @ _PROJECT.T)


def approximate(
    a: np.ndarray, b: np.ndarray, func: Callable[[np.ndarray], np.ndarray]
) -> np.ndarray:
    """``func(a + b)`` as the protocol evaluates it (same shape as ``a``)."""
    c = coefficients(a, func)
    basis = guest_basis(b)
    return np.asarray((c[:, 0] + np.sum(c[:, 1:] * basis, axis=1)).reshape(np.shape(a)))


def residual(a: np.ndarray, b: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``σ(a + b) − y`` through the fit (the plain twin of the encrypted residual)."""
    return np.asarray(approximate(a, b, sigmoid) - y)


def _nonnegative_fit(target: np.ndarray, start: np.ndarray) -> np.ndarray:
    """``(1 + K,)``: the weighted least-squares fit of ``target`` (on the grid) among the
    coefficient vectors whose curve is ≥ 0 at every point of ``_SPAN`` (a small QP)."""
    from scipy.optimize import minimize  # only the Host's loss needs it: guests start light

    # Relative weights: most rows of a trained model sit where the loss is near zero, and
    # an absolute error of 0.1 there would swamp the curve the stopping rule reads.
    root = _ROOT_WEIGHT / np.sqrt(target + RELATIVE)
    design = _DESIGN * root[:, None]
    goal = target * root
    result = minimize(
        lambda c: float(np.sum((design @ c - goal) ** 2)),
        start,
        jac=lambda c: 2.0 * design.T @ (design @ c - goal),
        constraints=[{"type": "ineq", "fun": lambda c: _CURVE @ c, "jac": lambda c: _CURVE}],
        method="SLSQP",
    )
    return np.asarray(result.x)


@functools.cache
def _loss_table() -> np.ndarray:
    """``(2, len(_TABLE_A), 1 + K)``: the non-negative fit of ``b ↦ softplus(a + b) − y(a + b)``
    for labels 0 and 1 at each tabulated Host score (built once, about a second)."""
    table = np.empty((2, _TABLE_A.size, 1 + BASIS))
    for y in (0, 1):
        fits = coefficients(_TABLE_A, softplus)
        fits[:, 0] -= y * _TABLE_A
        fits[:, -1] -= y
        for i, a in enumerate(_TABLE_A):
            target = softplus(a + _GRID) - y * (a + _GRID)
            table[y, i] = _nonnegative_fit(target, fits[i])
    return table


def loss_coefficients(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``(len(a), 1 + K)``: per row, a fit of ``b ↦ softplus(a + b) − y(a + b)`` that is ≥ 0
    for every guest score ``b`` (labels ``y`` in {0, 1}).

    The fit is tabulated over ``a`` (±A_LIMIT) and interpolated; past the table the loss is
    linear in ``a`` (``a + b`` for label 0 above it, ``−(a + b)`` for label 1 below it), so
    the constant carries the excess. Interpolation can leave a dip of rounding size, so each
    row's curve is checked over all ``b`` and its constant lifted by whatever dip remains.
    """
    a = np.asarray(a, dtype=np.float64).ravel()
    y = np.asarray(y, dtype=np.float64).ravel()
    inside = np.clip(a, -A_LIMIT, A_LIMIT)
    table = _loss_table()
    c = np.column_stack(
        [
            (1 - y) * np.interp(inside, _TABLE_A, table[0, :, j])
            + y * np.interp(inside, _TABLE_A, table[1, :, j])
            for j in range(1 + BASIS)
        ]
    )
    c[:, 0] += (1 - y) * np.maximum(a - A_LIMIT, 0.0) + y * np.maximum(-A_LIMIT - a, 0.0)
    c[:, 0] += np.maximum(0.0, -(c @ _CHECK.T).min(axis=1))
    return c


def loss(a: np.ndarray, b: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Cross-entropy ``softplus(a + b) − y(a + b)`` through the fit held ≥ 0 (elementwise,
    ≥ 0; the guest's ``b`` enters through its basis values, as under encryption)."""
    c = loss_coefficients(a, y)
    basis = guest_basis(b)
    return np.asarray((c[:, 0] + np.sum(c[:, 1:] * basis, axis=1)).reshape(np.shape(a)))
