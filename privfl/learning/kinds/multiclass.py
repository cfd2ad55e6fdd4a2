"""One-vs-rest multiclass logistic regression: k = classes outputs per row, by the Taylor
residual (any number of guests) or the separable sigmoid (one guest, learning/separable.py)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from privfl.crypto.encoding import DATA_BITS, VALUE_BITS, encode, to_exponents
from privfl.crypto.paillier import PublicKey
from privfl.errors import ConfigError
from privfl.learning import separable
from privfl.learning.kinds.base import EXP_BITS, Block, Ciphertexts, Glm, weights
from privfl.learning.kinds.logistic import Taylor, classifier_reference
from privfl.learning.metrics import multiclass_metrics
from privfl.learning.taylor import sigmoid

BASIS_NAMES = ("σ(z + 4)", "σ(z)", "σ(z − 4)", "clip(z, ±12)")
"""``learning.separable.guest_basis``'s columns, in its order."""


def basis_column(j: int, z: np.ndarray) -> np.ndarray:
    """Column ``j`` of the separable basis of the scores ``z``."""
    return np.asarray(separable.guest_basis(z)[:, j])


@dataclass(frozen=True)
class Multiclass(Glm):
    """What both residuals share: one-hot targets, k-ary randomized response, the metrics."""

    kind: ClassVar[str] = "multiclass"
    classifier: ClassVar[bool] = True
    mechanism: ClassVar[str] = "k-ary randomized response, once before training"

    @property
    def label_classes(self) -> int:
        return self.outputs

    def targets(self, labels: np.ndarray) -> np.ndarray:
        y = np.asarray(labels)
        onehot = np.zeros((len(y), self.outputs))
        onehot[np.arange(len(y)), y.astype(np.int64)] = 1.0
        return onehot

    def check_labels(self, labels: np.ndarray) -> None:
        k = self.outputs
        if labels.min() < 0 or labels.max() >= k or np.any(labels % 1 != 0):
            raise ConfigError(
                f"multiclass labels must be integers 0..{k - 1} (model.classes = {k})"
            )

    def mean(self, eta: np.ndarray, offset: np.ndarray | None = None) -> np.ndarray:
        return sigmoid(eta)

    def metrics(self, labels: np.ndarray, prediction: np.ndarray) -> dict[str, Any]:
        return multiclass_metrics(labels, prediction)

    def reference(self, x: np.ndarray, y: np.ndarray, data: Any, l2: float) -> dict[str, Any]:
        return classifier_reference(x, y, data, l2)

    def summary_fields(self, model: Any) -> dict[str, Any]:
        return {"classes": model.classes, "sigmoid": self.sigmoid}

    def prediction_columns(
        self, values: np.ndarray, exposure: np.ndarray | None
    ) -> tuple[list[str], list[list[str | int]]]:
        """``p_0 … p_{k−1}`` and the most probable class."""
        header = [*(f"p_{c}" for c in range(self.outputs)), "label"]
        return header, [[*(f"{p:.6f}" for p in row), int(np.argmax(row))] for row in values]


@dataclass(frozen=True)
class MulticlassTaylor(Multiclass, Taylor):
    """``4d = z − 4y + 2`` per class (y one-hot), any number of guests."""

    loss_note: ClassVar[str] = (
        "sum over classes of the one-vs-rest Taylor losses on the noised labels, "
        "without the L2 term"
    )


@dataclass(frozen=True)
class MulticlassSeparable(Multiclass):
    """``σ(z_H + z_G) − y`` through the separable fit (scale 1): the guest sends its basis."""

    sigmoid: ClassVar[str] = "separable"
    separable: ClassVar[bool] = True
    loss_name: ClassVar[str] = "cross-entropy (separable-sigmoid fit)"
    loss_note: ClassVar[str] = (
        "sum over classes of the one-vs-rest cross-entropies through the separable "
        "fit (learning/separable.py) on the noised labels, without the L2 term"
    )

    def residual(
        self, eta: np.ndarray, y: np.ndarray, offset: np.ndarray | None, z_host: np.ndarray
    ) -> np.ndarray:
        return separable.residual(z_host, eta - z_host, y)

    def loss(
        self, eta: np.ndarray, y: np.ndarray, offset: np.ndarray | None, z_host: np.ndarray
    ) -> float:
        return float(np.mean(np.sum(separable.loss(z_host, eta - z_host, y), axis=1)))

    def forward_blocks(self) -> tuple[Block, ...]:
        """The K blocks of ``separable.guest_basis`` at EXP_BITS, the last ``clip(z, ±12)``."""
        return tuple(
            (name, EXP_BITS, functools.partial(basis_column, j))
            for j, name in enumerate(BASIS_NAMES)
        )

    def encrypted_residual(
        self,
        key: PublicKey,
        scores: Sequence[Ciphertexts],
        z_host: np.ndarray,
        y: np.ndarray,
        offset: np.ndarray,
    ) -> tuple[list[int], list[int]]:
        """Each value's K basis ciphertexts meet the Host's coefficients (DATA_BITS) in one
        multi-exponentiation, so the residual lands at VALUE_BITS; ``c₀ − y`` is added in
        the clear. Also returns the guest's ``[[clip(z_G)]]`` block."""
        values, size = scores[0], z_host.size
        blocks = [values[j * size : (j + 1) * size] for j in range(separable.BASIS)]
        c = separable.coefficients(z_host.ravel(), sigmoid)
        coefficients: list[list[int]] = to_exponents(c[:, 1:], DATA_BITS).tolist()
        products = [
            key.dot(terms, w)
            for terms, w in zip(zip(*blocks, strict=True), coefficients, strict=True)
        ]
        residual = key.add_plain(products, encode(c[:, 0] - y.ravel(), VALUE_BITS, key.n))
        return residual, list(blocks[-1])

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
        """``8 Σ softplus(z) − yz`` through the fit held ≥ 0 for any z_G, at VALUE_BITS."""
        zh = z_host.ravel()
        c = separable.loss_coefficients(zh, y.ravel())
        lifted = weights(8.0 * c[:, 1:].T.ravel(), VALUE_BITS)
        parts = [key.dot(scores[0][: separable.BASIS * zh.size], lifted)]
        return parts, 8.0 * float(np.sum(c[:, 0]))


def make(outputs: int = 2, sigmoid: str = "taylor") -> Glm:
    """The registry's factory: the residual ``sigmoid`` names (auto already resolved)."""
    return RESIDUALS[sigmoid](outputs)


RESIDUALS: dict[str, type[Multiclass]] = {
    MulticlassTaylor.sigmoid: MulticlassTaylor,
    MulticlassSeparable.sigmoid: MulticlassSeparable,
}
"""The multiclass GLM of each ``[model] sigmoid`` (``auto`` resolved by the job parser)."""
