"""What every GLM kind provides, and the additive residual most of them share.

A kind is a frozen object (its only field: ``outputs``, the ``k`` of ``θ``'s shape
``(features, k)``) whose methods are the rules docs/protocol.md §6.8 tabulates per kind:
the plain maths (targets, residual, loss, mean, metrics) that ``reference_train`` and
the tests' oracles run in the clear, and the same rules under encryption: what a guest
encrypts in its ``forward``, how the Host assembles ``[[r]]`` and ``[[8b·L]]``. The
Host's and guest's steps (parties/vertical) stay protocol only and call these.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from privfl.crypto.encoding import DATA_BITS, VALUE_BITS, encode, to_exponents
from privfl.crypto.paillier import PublicKey
from privfl.errors import TrainingDiverged
from privfl.learning.metrics import regression_metrics

EXP_BITS = VALUE_BITS - DATA_BITS
"""Fractional bits of a guest's ``exp(z_G)`` or separable basis: times the Host's
multiplier at DATA_BITS, the product lands at VALUE_BITS like every other residual."""

Ciphertexts = Sequence[int]
Block = tuple[str, int, Callable[[np.ndarray], np.ndarray]]
"""One block of a guest's ``forward.scores``: its name, its scale (fractional bits) and
the function of the guest's flat scores ``z`` it holds (docs/protocol.md §6.8)."""


def identity(z: np.ndarray) -> np.ndarray:
    """The scores themselves."""
    return z


@dataclass(frozen=True)
class Glm:
    """One GLM kind with ``outputs`` = k scores per row (classes for multiclass, else 1)."""

    outputs: int = 1

    kind: ClassVar[str] = ""
    sigmoid: ClassVar[str] = "taylor"  # the classifiers' residual ("separable": one guest)
    scale: ClassVar[float] = 1.0  # what [[r]] is multiplied by (the gradient divides it out)
    classifier: ClassVar[bool] = False  # the mean is the sigmoid of the score
    taylor: ClassVar[bool] = False  # the classifiers' second-order Taylor residual 4d
    separable: ClassVar[bool] = False  # the residual through learning/separable.py's fit
    regression: ClassVar[bool] = False  # real labels, noised by the Laplace mechanism
    flipback: ClassVar[bool] = False  # flipback runs (and the Server allows its scores)
    loss_name: ClassVar[str] = ""  # the plot's name of the loss
    loss_note: ClassVar[str] = ""  # summary.json's loss_note
    mechanism: ClassVar[str] = ""  # the privacy ledger's label mechanism

    @property
    def label_classes(self) -> int:
        """Randomized response's k (0: not a classifier; its labels get Laplace noise)."""
        return 0

    # --- plain maths -------------------------------------------------------------------

    def targets(self, labels: np.ndarray) -> np.ndarray:
        """The labels as a ``(rows, k)`` float matrix."""
        return np.asarray(labels).astype(np.float64).reshape(-1, 1)

    def check_labels(self, labels: np.ndarray) -> None:
        """Refuse labels the model cannot take (ConfigError); regression takes any."""

    def residual(
        self, eta: np.ndarray, y: np.ndarray, offset: np.ndarray | None, z_host: np.ndarray
    ) -> np.ndarray:
        """``r`` of the whole score ``eta = Σ_parties z`` (``(b, k)``), at ``scale``."""
        raise NotImplementedError

    def loss(
        self, eta: np.ndarray, y: np.ndarray, offset: np.ndarray | None, z_host: np.ndarray
    ) -> float:
        """Mean loss per row, summed over the k outputs, as the Server reports it."""
        raise NotImplementedError

    def mean(self, eta: np.ndarray, offset: np.ndarray | None = None) -> np.ndarray:
        """The model's prediction from the joint score: the identity unless overridden."""
        return np.asarray(eta)

    def gradient(
        self, x_t_r: np.ndarray, theta: np.ndarray, batch: int, l2: float, penalised: np.ndarray
    ) -> np.ndarray:
        """``(1/b)(Xᵀr / s + λθ)``; ``penalised`` (per feature) marks weights under L2."""
        mask = penalised.reshape(-1, 1) if theta.ndim == 2 else penalised
        return np.asarray(x_t_r / (self.scale * batch) + l2 * theta * mask / batch)

    def metrics(self, labels: np.ndarray, prediction: np.ndarray) -> dict[str, Any]:
        """Test metrics from ``mean``'s ``(rows, k)`` prediction."""
        return regression_metrics(labels, prediction[:, 0])

    def evaluate(
        self, labels: np.ndarray, host: np.ndarray, guests: np.ndarray, offset: np.ndarray
    ) -> dict[str, Any]:
        """The Host's metrics of one epoch from its own and the guests' summed scores."""
        return self.metrics(labels, self.mean(host + guests, offset))

    def summary_fields(self, model: Any) -> dict[str, Any]:
        """The kind's own hyper-parameters for summary.json's ``model`` (``[model]`` table)."""
        return {}

    def summary_metrics(self, metrics: dict[str, Any]) -> dict[str, Any]:
        """The final epoch's metrics as summary.json shows them."""
        return metrics

    def prediction_columns(
        self, values: np.ndarray, exposure: np.ndarray | None
    ) -> tuple[list[str], list[list[str | int]]]:
        """The predictions file's columns after ``id`` and their cells per row of ``values``."""
        return ["prediction"], [[f"{m:.6f}"] for m in values[:, 0]]

    def reference(self, x: np.ndarray, y: np.ndarray, data: Any, l2: float) -> dict[str, Any]:
        """The centralised sklearn model of the kind's objective fitted on ``x, y`` (every
        column pooled), and its metrics on ``data``'s test rows (``learning/references.py``)."""
        raise NotImplementedError

    def start_fits(self, eta: np.ndarray, offset: np.ndarray | None) -> bool:
        """Whether the Host may start from scores ``eta`` (learning/start.py): finite."""
        return bool(np.isfinite(eta).all())

    # --- under encryption ------------------------------------------------------------

    def forward_blocks(self) -> tuple[Block, ...]:
        """The blocks of ``forward.scores``, each ``rows·k`` long; the last one is ``z``
        itself (clipped for the separable basis), the scores the loss and the kit read."""
        return (("z", VALUE_BITS, identity),)

    def forward_length(self, rows: int) -> int:
        """Ciphertexts in one guest's ``forward.scores`` for a batch of ``rows``."""
        return len(self.forward_blocks()) * rows * self.outputs

    def forward_plain(self, z: np.ndarray, n: int) -> list[int]:
        """What a guest encrypts in ``forward.scores`` for its flat scores ``z`` (row-major):
        its blocks one after the other (block-major)."""
        out: list[int] = []
        for name, bits, f in self.forward_blocks():
            with np.errstate(over="ignore"):
                values = f(z)
            if not np.all(np.isfinite(values)):
                raise TrainingDiverged(
                    f"a guest's {name} left float range (largest score {float(np.max(z)):.4g}): "
                    "the training diverged; lower training.learning_rate"
                )
            out += encode(values, bits, n)
        return out

    def encrypted_residual(
        self,
        key: PublicKey,
        scores: Sequence[Ciphertexts],
        z_host: np.ndarray,
        y: np.ndarray,
        offset: np.ndarray,
    ) -> tuple[list[int], list[int]]:
        """``[[r]]`` and ``[[Z]]`` (what the loss needs of the guests' scores) from every
        guest's ``forward.scores`` (in the job's guest order)."""
        raise NotImplementedError

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
        """``[[8b·L]]``'s ciphertext terms at 2^LOSS_BITS and its plaintext part.

        ``squares``: every guest's ``[[Σz_g²]]`` and, with several guests, their cross terms.
        """
        raise NotImplementedError


@dataclass(frozen=True)
class Additive(Glm):
    """A residual that is the guests' summed scores plus a plaintext part of the Host's."""

    def plain_residual(self, z_host: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The Host's plaintext part of ``r`` given the whole score (``(b, k)``)."""
        raise NotImplementedError

    def residual(
        self, eta: np.ndarray, y: np.ndarray, offset: np.ndarray | None, z_host: np.ndarray
    ) -> np.ndarray:
        return self.plain_residual(eta, y)

    def encrypted_residual(
        self,
        key: PublicKey,
        scores: Sequence[Ciphertexts],
        z_host: np.ndarray,
        y: np.ndarray,
        offset: np.ndarray,
    ) -> tuple[list[int], list[int]]:
        total = add_all(key, scores)
        plain = self.plain_residual(z_host, y).ravel()
        return key.add_plain(total, encode(plain, VALUE_BITS, key.n)), total


def add_all(key: PublicKey, vectors: Sequence[Ciphertexts]) -> list[int]:
    """Elementwise homomorphic sum of several equally long ciphertext vectors."""
    total = list(vectors[0])
    for vector in vectors[1:]:
        total = key.add(total, vector)
    return total


def column(offset: np.ndarray | None, eta: np.ndarray) -> np.ndarray:
    """The per-row offset as a column beside ``eta`` (zeros without one)."""
    if offset is None:
        return np.zeros_like(eta)
    return np.asarray(offset, dtype=np.float64).reshape(-1, 1)


def weights(values: np.ndarray, bits: int) -> list[int]:
    """Plaintext multipliers for ciphertexts: ``rint(values·2^bits)`` as Python ints."""
    return list(to_exponents(values, bits).tolist())
