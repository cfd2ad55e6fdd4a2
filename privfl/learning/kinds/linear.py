"""Linear regression: ``r = z − y`` (scale 1) and the squared loss, exact under Paillier."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from privfl.crypto.encoding import DATA_BITS
from privfl.crypto.paillier import PublicKey
from privfl.learning.kinds.base import Additive, Ciphertexts, Glm, weights

LAPLACE = "Laplace noise on labels clipped to [label_low, label_high], once before training"


@dataclass(frozen=True)
class Linear(Additive):
    """Half the mean squared error; labels noised by the Laplace mechanism within bounds."""

    kind: ClassVar[str] = "linear"
    regression: ClassVar[bool] = True
    loss_name: ClassVar[str] = "squared loss"
    loss_note: ClassVar[str] = (
        "half the mean squared error on the training labels as noised, without L2"
    )
    mechanism: ClassVar[str] = LAPLACE

    def plain_residual(self, z_host: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.asarray(z_host - y)

    def loss(
        self, eta: np.ndarray, y: np.ndarray, offset: np.ndarray | None, z_host: np.ndarray
    ) -> float:
        return float(np.mean(np.sum(0.5 * (eta - y) ** 2, axis=1)))

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
        """``8b·½ mean (Z + u)² = 4ΣZ² + 8ΣZu + 4Σu²``, ``u = z_H − y``."""
        u = (z_host - y).ravel()
        parts = [key.dot(total, weights(8.0 * u, DATA_BITS)), key.dot(squares, [4] * len(squares))]
        return parts, 4.0 * float(u @ u)

    def reference(self, x: np.ndarray, y: np.ndarray, data: Any, l2: float) -> dict[str, Any]:
        """sklearn's Ridge with α = λ."""
        from sklearn.linear_model import Ridge

        model = Ridge(alpha=l2).fit(x, y)
        return self.metrics(data.y_test, model.predict(data.x_test).reshape(-1, 1))

    def summary_fields(self, model: Any) -> dict[str, Any]:
        return {"label_low": model.label_low, "label_high": model.label_high}


def make(outputs: int = 1, sigmoid: str = "taylor") -> Glm:
    """The registry's factory."""
    return Linear()
