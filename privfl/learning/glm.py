"""Plain maths of the vertical GLMs: residual, loss, gradient and mean of each kind.

Every kind trains ``θ`` of shape ``(features, k)`` by the same step
``θ ← θ − lr · (1/b)(Xᵀr / s + λθ)`` on a residual ``r`` the Host assembles under
encryption (``s`` its scale):

* **logistic** (k = 1) and **multiclass** one-vs-rest (k = classes): the second-order
  Taylor residual ``4d = z − 4y + 2`` per class (``s = 4``), ``y`` one-hot for multiclass;
  or, multiclass with one guest (``[model] sigmoid``), the **separable** residual
  ``σ(z_H + z_G) − y`` through ``learning.separable``'s fit (``s = 1``);
* **linear**: ``r = z − y`` (``s = 1``), squared loss — exact under Paillier, no Taylor step;
* **poisson**: ``r = exp(z + offset) − y`` (``s = 1``) with ``offset = log(exposure)``.
  Under encryption the guest sends ``[[exp(z_G)]]`` with ``EXP_BITS`` fractional bits
  and the Host multiplies by its plaintext ``exp(z_H + offset)`` at ``DATA_BITS``; the
  only approximation is this fixed-point rounding (one guest only: Paillier cannot
  multiply two ciphertexts).

``reference_train`` runs the same steps in the clear: the oracle of the tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from privfl.config.vertical import JobConfig, ModelConfig, TrainingConfig, sigmoid_of
from privfl.crypto.encoding import DATA_BITS, VALUE_BITS
from privfl.errors import ConfigError
from privfl.learning import separable
from privfl.learning.pinning import unpin
from privfl.learning.taylor import LOG2, batch_plan, learning_rate, sigmoid

GLM_KINDS = ("logistic", "linear", "poisson", "multiclass")
EXP_BITS = VALUE_BITS - DATA_BITS
"""Fractional bits of a guest's ``exp(z_G)``: times the Host's multiplier at DATA_BITS,
the Poisson residual lands at VALUE_BITS like every other kind's."""


@dataclass(frozen=True, slots=True)
class Glm:
    """One GLM kind, its number of outputs ``k`` (classes for multiclass, else 1) and, for
    the classifiers, how the residual approximates the sigmoid."""

    kind: str
    outputs: int = 1
    sigmoid: str = "taylor"  # or "separable" (multiclass, one guest)

    @property
    def classifier(self) -> bool:
        """Logistic and multiclass: the mean is the sigmoid of the score."""
        return self.kind in ("logistic", "multiclass")

    @property
    def separable(self) -> bool:
        """The residual through ``learning.separable``'s fit (the guest sends its basis)."""
        return self.classifier and self.sigmoid == "separable"

    @property
    def taylor(self) -> bool:
        """The classifiers' second-order Taylor residual ``4d`` (scale 4)."""
        return self.classifier and not self.separable

    @property
    def scale(self) -> float:
        """What the encrypted residual is multiplied by (the gradient divides it out)."""
        return 4.0 if self.taylor else 1.0

    @property
    def regression(self) -> bool:
        return self.kind in ("linear", "poisson")


def outputs_of(model: ModelConfig) -> int:
    """Outputs per row the job's model has: ``classes`` for multiclass, else 1.

    What the Server sizes decryptions by; 1 for every non-GLM kind (their own rules
    size their messages).
    """
    return model.classes if model.kind == "multiclass" else 1


def glm_of(job: JobConfig) -> Glm:
    """The job's GLM; ConfigError for a model kind that is not a GLM."""
    kind = job.model.kind
    if kind not in GLM_KINDS:
        raise ConfigError(
            f"model.kind {kind!r} is not a GLM ({', '.join(GLM_KINDS)}); the vertical GLM "
            "protocol cannot train it"
        )
    return Glm(kind, outputs_of(job.model), sigmoid_of(job))


def targets(glm: Glm, labels: np.ndarray) -> np.ndarray:
    """The labels as a ``(rows, k)`` float matrix (one-hot for multiclass)."""
    y = np.asarray(labels)
    if glm.kind == "multiclass":
        onehot = np.zeros((len(y), glm.outputs))
        onehot[np.arange(len(y)), y.astype(np.int64)] = 1.0
        return onehot
    return y.astype(np.float64).reshape(-1, 1)


def plain_residual(glm: Glm, z_host: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The Host's plaintext part of ``r`` for logistic, multiclass and linear (``(b, k)``)."""
    if glm.taylor:
        return np.asarray(z_host - 4.0 * y + 2.0)
    if glm.kind == "linear":
        return np.asarray(z_host - y)
    raise ValueError("the Poisson residual has no additive plaintext part")


def residual(
    glm: Glm,
    eta: np.ndarray,
    y: np.ndarray,
    offset: np.ndarray | None,
    z_host: np.ndarray | None = None,
) -> np.ndarray:
    """``r`` of the whole score ``eta = Σ_parties z`` (``(b, k)``), scaled as ``glm.scale``.

    Separable: ``z_host`` is the Host's part of ``eta`` (the rest is the one guest's).
    """
    if glm.separable:
        assert z_host is not None
        return separable.residual(z_host, eta - z_host, y)
    if glm.kind == "poisson":
        return np.asarray(np.exp(eta + _column(offset, eta)) - y)
    return plain_residual(glm, eta, y)


def loss(
    glm: Glm,
    eta: np.ndarray,
    y: np.ndarray,
    offset: np.ndarray | None,
    z_host: np.ndarray | None = None,
) -> float:
    """Mean loss per row (summed over the k outputs) as the Server reports it.

    Taylor: ``Σ_c log 2 − ½ y'z + ⅛ z²``; separable: the cross-entropy through the fit;
    linear: ``½ (z − y)²``; poisson: the negative log-likelihood without ``log y!``:
    ``exp(η) − yη``, ``η = z + offset``.
    """
    if glm.separable:
        assert z_host is not None
        return float(np.mean(np.sum(separable.loss(z_host, eta - z_host, y), axis=1)))
    if glm.taylor:
        signed = 2.0 * y - 1.0
        return float(np.mean(np.sum(LOG2 - 0.5 * signed * eta + 0.125 * eta * eta, axis=1)))
    if glm.kind == "linear":
        return float(np.mean(np.sum(0.5 * (eta - y) ** 2, axis=1)))
    full = eta + _column(offset, eta)
    return float(np.mean(np.sum(np.exp(full) - y * full, axis=1)))


def gradient(
    glm: Glm, x_t_r: np.ndarray, theta: np.ndarray, batch: int, l2: float, penalised: np.ndarray
) -> np.ndarray:
    """``(1/b)(Xᵀr / s + λθ)``; ``penalised`` (per feature) marks weights under L2."""
    mask = penalised.reshape(-1, 1) if theta.ndim == 2 else penalised
    return np.asarray(x_t_r / (glm.scale * batch) + l2 * theta * mask / batch)


def mean_of(glm: Glm, eta: np.ndarray, offset: np.ndarray | None = None) -> np.ndarray:
    """The model's prediction: probabilities (per class), the mean, or the Poisson rate."""
    if glm.classifier:
        return sigmoid(eta)
    if glm.kind == "poisson":
        return np.asarray(np.exp(eta + _column(offset, eta)))
    return np.asarray(eta)


def _column(offset: np.ndarray | None, eta: np.ndarray) -> np.ndarray:
    if offset is None:
        return np.zeros_like(eta)
    return np.asarray(offset, dtype=np.float64).reshape(-1, 1)


def reference_train(
    parts: Sequence[np.ndarray],
    labels: np.ndarray,
    cfg: TrainingConfig,
    rng: np.random.Generator,
    glm: Glm,
    offset: np.ndarray | None = None,
    penalised: Sequence[np.ndarray] | None = None,
    min_rows: int = 1,
    start: np.ndarray | None = None,
) -> tuple[list[np.ndarray], list[float]]:
    """Train every party's ``(features, k)`` block in the clear exactly as the protocol does.

    ``parts[0]`` is the Host's matrix (bias column included), the rest the guests'.
    ``start``: the Host's initial ``(features + 1, k)`` block (``learning.start``, private
    to the Host, so the caller passes the one the run drew); None = zeros. Guests start at 0.
    Returns the weights per part and the mean loss per epoch (before each epoch's
    updates, as the Server reports it). No early stopping.
    """
    k = glm.outputs
    thetas = [np.zeros((p.shape[1], k)) for p in parts]
    if start is not None:
        thetas[0] = np.array(start, dtype=np.float64).reshape(thetas[0].shape)
    masks = list(penalised) if penalised is not None else [np.ones(p.shape[1]) for p in parts]
    y_all = targets(glm, labels)
    losses: list[float] = []
    plan = batch_plan(parts[0].shape[0], cfg.batch_size, rng, min_rows)  # one per job
    plan = plan if cfg.allow_small_batches else unpin(parts[0], plan)  # as the Host's job_plan
    for epoch in range(cfg.epochs):
        lr = learning_rate(cfg, epoch)
        total, count = 0.0, 0
        for idx in plan:
            rows = slice(None) if idx is None else idx
            xs = [p[rows] for p in parts]
            y = y_all[rows]
            off = None if offset is None else offset[rows]
            scores = [x @ t for x, t in zip(xs, thetas, strict=True)]
            eta = np.sum(scores, axis=0)
            r = residual(glm, eta, y, off, scores[0])
            total += loss(glm, eta, y, off, scores[0]) * len(y)
            count += len(y)
            for j, x in enumerate(xs):
                thetas[j] = thetas[j] - lr * gradient(
                    glm, x.T @ r, thetas[j], len(y), cfg.l2, masks[j]
                )
        losses.append(total / count)
    return thetas, losses
