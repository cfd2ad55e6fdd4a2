"""Logistic regression by the second-order Taylor residual, and the Taylor maths it shares
with one-vs-rest multiclass (docs/protocol.md §6.8, §13)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from privfl.crypto.encoding import DATA_BITS
from privfl.crypto.paillier import PublicKey
from privfl.errors import ConfigError
from privfl.learning.kinds.base import Additive, Ciphertexts, Glm, weights
from privfl.learning.metrics import binary_metrics, multiclass_metrics
from privfl.learning.taylor import LOG2, sigmoid

THRESHOLD = 0.5
"""A predicted probability at or above it is labelled 1."""


@dataclass(frozen=True)
class Taylor(Additive):
    """``4d = z − 4y + 2`` per output (scale 4) and the Taylor loss ``log 2 − ½y'z + ⅛z²``."""

    scale: ClassVar[float] = 4.0
    classifier: ClassVar[bool] = True
    taylor: ClassVar[bool] = True
    loss_name: ClassVar[str] = "Taylor loss"

    def plain_residual(self, z_host: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.asarray(z_host - 4.0 * y + 2.0)

    def loss(
        self, eta: np.ndarray, y: np.ndarray, offset: np.ndarray | None, z_host: np.ndarray
    ) -> float:
        signed = 2.0 * y - 1.0
        return float(np.mean(np.sum(LOG2 - 0.5 * signed * eta + 0.125 * eta * eta, axis=1)))

    def mean(self, eta: np.ndarray, offset: np.ndarray | None = None) -> np.ndarray:
        return sigmoid(eta)

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
        """``Σ_c 8b·log 2 − 4Σy'z + Σz²`` with ``z = z_H + Z``: the plain part from z_H,
        ``Σ(2z_H − 4y')Z`` a dot product on ``[[Z]]``, ``ΣZ²`` the guests' squares."""
        signed = (2.0 * y - 1.0).ravel()
        zh = z_host.ravel()
        plain = 8 * len(y) * self.outputs * LOG2 - 4.0 * float(signed @ zh) + float(zh @ zh)
        return [key.dot(total, weights(2.0 * zh - 4.0 * signed, DATA_BITS)), *squares], plain


def classifier_reference(x: np.ndarray, y: np.ndarray, data: Any, l2: float) -> dict[str, Any]:
    """sklearn's LogisticRegression with C = 1/λ, scored by the per-class metrics."""
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(C=1.0 / l2, max_iter=5000).fit(x, y)
    return multiclass_metrics(data.y_test, model.predict_proba(data.x_test))


@dataclass(frozen=True)
class Logistic(Taylor):
    """Binary logistic regression (k = 1): randomized response, then flipback."""

    kind: ClassVar[str] = "logistic"
    flipback: ClassVar[bool] = True
    loss_note: ClassVar[str] = "Taylor loss on the flipped training labels, without the L2 term"
    mechanism: ClassVar[str] = "randomized response (flip), once before training"

    @property
    def label_classes(self) -> int:
        return 2

    def check_labels(self, labels: np.ndarray) -> None:
        if not np.isin(labels, (0, 1)).all():
            raise ConfigError("logistic regression needs labels 0 and 1; use --model multiclass")

    def metrics(self, labels: np.ndarray, prediction: np.ndarray) -> dict[str, Any]:
        return binary_metrics(labels, prediction[:, 0])

    def reference(self, x: np.ndarray, y: np.ndarray, data: Any, l2: float) -> dict[str, Any]:
        return classifier_reference(x, y, data, l2)

    def evaluate(
        self, labels: np.ndarray, host: np.ndarray, guests: np.ndarray, offset: np.ndarray
    ) -> dict[str, Any]:
        """The joint metrics and seed 004's bottom-model accuracies (each side's sign)."""
        host, guests = host[:, 0], guests[:, 0]
        metrics: dict[str, Any] = binary_metrics(labels, sigmoid(host + guests))
        metrics["bottom_host_accuracy"] = float(((host >= 0) == labels).mean())
        metrics["bottom_guests_accuracy"] = float(((guests >= 0) == labels).mean())
        return metrics

    def summary_metrics(self, metrics: dict[str, Any]) -> dict[str, Any]:
        metrics["bottom_accuracy"] = {
            "host": metrics.pop("bottom_host_accuracy"),
            "guests_combined": metrics.pop("bottom_guests_accuracy"),
        }
        return metrics

    def prediction_columns(
        self, values: np.ndarray, exposure: np.ndarray | None
    ) -> tuple[list[str], list[list[str | int]]]:
        rows: list[list[str | int]] = [[f"{p:.6f}", int(p >= THRESHOLD)] for p in values[:, 0]]
        return ["probability", "label"], rows


def make(outputs: int = 1, sigmoid: str = "taylor") -> Glm:
    """The registry's factory (logistic regression has one output and the Taylor residual)."""
    return Logistic()
