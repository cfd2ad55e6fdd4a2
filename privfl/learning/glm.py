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

Each kind is one object (learning/kinds, named by the registry, models/registry.py)
that owns these rules; this module looks a job's kind up and runs the steps in the
clear: ``reference_train`` is the oracle of the tests.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from privfl.config.vertical import JobConfig, ModelConfig, TrainingConfig, sigmoid_of
from privfl.errors import ConfigError
from privfl.learning.kinds.base import EXP_BITS as EXP_BITS
from privfl.learning.kinds.base import Glm as Glm
from privfl.learning.pinning import unpin
from privfl.learning.taylor import batch_plan, learning_rate
from privfl.models.registry import kind_named


def glm_named(kind: str, outputs: int = 1, sigmoid: str = "taylor") -> Glm:
    """The GLM object of a kind (``sigmoid``: the classifiers' residual, auto resolved)."""
    entry = kind_named(kind)
    if entry.glm is None:
        raise ConfigError(
            f"model.kind {kind!r} is not a GLM; the vertical GLM protocol cannot train it"
        )
    factory = entry.load(entry.glm)
    glm: Glm = factory(outputs, sigmoid)
    return glm


def outputs_of(model: ModelConfig) -> int:
    """Outputs per row the job's model has: ``classes`` for multiclass, else 1.

    What the Server sizes decryptions by; 1 for every kind that reads no ``classes``
    (their own rules size their messages).
    """
    return model.classes if "classes" in kind_named(model.kind).reads else 1


def glm_of(job: JobConfig) -> Glm:
    """The job's GLM; ConfigError for a model kind that is not a GLM."""
    return glm_named(job.model.kind, outputs_of(job.model), sigmoid_of(job))


def targets(glm: Glm, labels: np.ndarray) -> np.ndarray:
    """The labels as a ``(rows, k)`` float matrix (one-hot for multiclass)."""
    return glm.targets(labels)


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
    return glm.residual(eta, y, offset, eta if z_host is None else z_host)


def loss(
    glm: Glm,
    eta: np.ndarray,
    y: np.ndarray,
    offset: np.ndarray | None,
    z_host: np.ndarray | None = None,
) -> float:
    """Mean loss per row (summed over the k outputs) as the Server reports it."""
    return glm.loss(eta, y, offset, eta if z_host is None else z_host)


def gradient(
    glm: Glm, x_t_r: np.ndarray, theta: np.ndarray, batch: int, l2: float, penalised: np.ndarray
) -> np.ndarray:
    """``(1/b)(Xᵀr / s + λθ)``; ``penalised`` (per feature) marks weights under L2."""
    return glm.gradient(x_t_r, theta, batch, l2, penalised)


def mean_of(glm: Glm, eta: np.ndarray, offset: np.ndarray | None = None) -> np.ndarray:
    """The model's prediction: probabilities (per class), the mean, or the Poisson rate."""
    return glm.mean(eta, offset)


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
    plan: Sequence[np.ndarray | None] | None = None,
    noise: np.random.Generator | None = None,
) -> tuple[list[np.ndarray], list[float]]:
    """Train every party's ``(features, k)`` block in the clear exactly as the protocol does.

    ``parts[0]`` is the Host's matrix (bias column included), the rest the guests'.
    ``start``: the Host's initial ``(features + 1, k)`` block (``learning.start``, private
    to the Host, so the caller passes the one the run drew); None = zeros. Guests start at 0.
    ``plan``: the run's batch plan (drawn from the parties' joint seed, so the caller passes
    the one the Host's model.json names: ``vfl_models.host_plan``); None = drawn from ``rng``.
    ``noise``: with ``cfg.score_noise`` > 0, the generator of the guests' score noise (the
    protocol draws it from each guest's OS CSPRNG, so a twin matches it in distribution
    only); None = no noise.
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
    if plan is None:
        plan = batch_plan(parts[0].shape[0], cfg.batch_size, rng, min_rows)  # one per job
        plan = plan if cfg.allow_small_batches else unpin(parts[0], plan)
    for epoch in range(cfg.epochs):
        lr = learning_rate(cfg, epoch)
        total, count = 0.0, 0
        for idx in plan:
            rows = slice(None) if idx is None else idx
            xs = [p[rows] for p in parts]
            y = y_all[rows]
            off = None if offset is None else offset[rows]
            scores = [x @ t for x, t in zip(xs, thetas, strict=True)]
            if noise is not None:  # training.score_noise: each guest's scores as it sends them
                scores[1:] = [z + noise.normal(0.0, cfg.score_noise, z.shape) for z in scores[1:]]
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
