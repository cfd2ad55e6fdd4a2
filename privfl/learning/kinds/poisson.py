"""Poisson regression: ``r = exp(z + offset) − y`` (scale 1), ``offset = log(exposure)``.

Under encryption the guest sends ``[[exp(z_G)]]`` at EXP_BITS and the Host multiplies by
its plaintext ``exp(z_H + offset)`` at DATA_BITS; the only approximation is this
fixed-point rounding (one guest only: Paillier cannot multiply two ciphertexts).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from privfl.crypto.encoding import DATA_BITS, VALUE_BITS, encode
from privfl.crypto.paillier import PublicKey
from privfl.errors import ConfigError
from privfl.learning.kinds.base import (
    EXP_BITS,
    Block,
    Ciphertexts,
    Glm,
    column,
    identity,
    weights,
)
from privfl.learning.kinds.linear import LAPLACE
from privfl.learning.metrics import poisson_metrics

MAX_LOG_RATE = 20.0
"""Largest ``η + offset`` a Host start may have: a warm-up on Laplace-noised counts (ε = 1,
bounds 0–15) ran away to finite scores up to 7·10^29 in 3 of 40 draws on the counts table,
which no multiplier encodes; a rate of e^20 is far beyond any count the bounds allow."""


@dataclass(frozen=True)
class Poisson(Glm):
    """The negative log-likelihood without ``log y!``; one guest."""

    kind: ClassVar[str] = "poisson"
    regression: ClassVar[bool] = True
    loss_name: ClassVar[str] = "Poisson negative log-likelihood"
    loss_note: ClassVar[str] = (
        "mean exp(η) − yη (Poisson negative log-likelihood without log y!) on the "
        "training labels as noised, without L2"
    )
    mechanism: ClassVar[str] = LAPLACE

    def check_labels(self, labels: np.ndarray) -> None:
        if labels.min() < 0:
            raise ConfigError("Poisson regression needs counts >= 0 as labels")

    def start_fits(self, eta: np.ndarray, offset: np.ndarray | None) -> bool:
        """Finite, and every rate ``exp(η + offset)`` within ``MAX_LOG_RATE``: the Host
        multiplies by it at DATA_BITS (below 2^62 needs ``η + offset`` < 31.9)."""
        full = eta + column(offset, eta)
        return bool(np.isfinite(full).all() and float(np.max(full, initial=0.0)) <= MAX_LOG_RATE)

    def residual(
        self, eta: np.ndarray, y: np.ndarray, offset: np.ndarray | None, z_host: np.ndarray
    ) -> np.ndarray:
        return np.asarray(np.exp(eta + column(offset, eta)) - y)

    def loss(
        self, eta: np.ndarray, y: np.ndarray, offset: np.ndarray | None, z_host: np.ndarray
    ) -> float:
        full = eta + column(offset, eta)
        return float(np.mean(np.sum(np.exp(full) - y * full, axis=1)))

    def mean(self, eta: np.ndarray, offset: np.ndarray | None = None) -> np.ndarray:
        """The rate ``exp(η + offset)`` (per unit exposure without an offset)."""
        return np.asarray(np.exp(eta + column(offset, eta)))

    def metrics(self, labels: np.ndarray, prediction: np.ndarray) -> dict[str, Any]:
        return poisson_metrics(labels, prediction[:, 0])

    def reference(self, x: np.ndarray, y: np.ndarray, data: Any, l2: float) -> dict[str, Any]:
        """sklearn's PoissonRegressor on rates, weighted by the exposures."""
        from sklearn.linear_model import PoissonRegressor

        exposure = np.exp(data.offset_train)
        model = PoissonRegressor(alpha=l2 / float(exposure.sum()), max_iter=3000, tol=1e-8)
        model.fit(x, y / exposure, sample_weight=exposure)
        counts = model.predict(data.x_test) * np.exp(data.offset_test)
        return self.metrics(data.y_test, counts.reshape(-1, 1))

    def summary_fields(self, model: Any) -> dict[str, Any]:
        return {
            "label_low": model.label_low,
            "label_high": model.label_high,
            "exposure": model.exposure or "(none: exposure 1)",
        }

    def prediction_columns(
        self, values: np.ndarray, exposure: np.ndarray | None
    ) -> tuple[list[str], list[list[str | int]]]:
        """``rate`` and, with the exposures of the new rows, the expected count."""
        rate = values[:, 0]
        if exposure is None:
            return ["rate"], [[f"{m:.6f}"] for m in rate]
        pairs = np.column_stack([rate, rate * exposure])
        return ["rate", "prediction"], [[f"{r:.6f}", f"{c:.6f}"] for r, c in pairs]

    def forward_blocks(self) -> tuple[Block, ...]:
        """``[[exp z_G]]`` at EXP_BITS, then ``[[z_G]]``: 2 per row."""
        return (("exp(z)", EXP_BITS, np.exp), ("z", VALUE_BITS, identity))

    def encrypted_residual(
        self,
        key: PublicKey,
        scores: Sequence[Ciphertexts],
        z_host: np.ndarray,
        y: np.ndarray,
        offset: np.ndarray,
    ) -> tuple[list[int], list[int]]:
        """``[[exp(z_G)]] · exp(z_H + offset) − y``: EXP_BITS + DATA_BITS = VALUE_BITS."""
        values, size = scores[0], len(y)
        multiplier = np.exp(z_host[:, 0] + offset)
        product = key.scalar_mul(values[:size], weights(multiplier, DATA_BITS))
        residual = key.add_plain(product, encode(-y[:, 0], VALUE_BITS, key.n))
        return residual, list(values[size:])  # [[z_G]], for the loss

    def encrypted_loss(
        self,
        key: PublicKey,
        total: list[int],
        scores: Sequence[Ciphertexts],
        squares: list[int],
        z_host: np.ndarray,
        y: np.ndarray,
        offset: np.ndarray,
    ) -> tuple[list[int], float]:
        """``8 Σ exp(z_G)·exp(η_H) − 8 Σ y z_G − 8 Σ y η_H``, ``η_H = z_H + offset``."""
        eta = z_host[:, 0] + offset
        exps = scores[0][: len(y)]
        parts = [
            key.dot(exps, weights(8.0 * np.exp(eta), VALUE_BITS)),
            key.dot(total, weights(-8.0 * y[:, 0], DATA_BITS)),
        ]
        return parts, -8.0 * float(y[:, 0] @ eta)


def make(outputs: int = 1, sigmoid: str = "taylor") -> Glm:
    """The registry's factory."""
    return Poisson()
