"""Attack (audit, finding "the first batch gives its labels"): subset sums over binary labels.

An honest-but-curious guest decrypts, through its masked gradient, ``G = X_gᵀ·4d`` for
each batch. Were the Host's weights at zero, at epoch 0 batch 0 every score would be 0
and ``4d = 2 − 4y`` (per class for multiclass): ``G`` would be a known function of the
batch's binary labels alone, ``T = (2·Σ_i x_i − G) / 4 = Σ_{i: y_i = 1} x_i`` — a subset
sum of the guest's own rows. With the fixed point the guest uses (features as integers
``rint(x·2^16)``) ``T`` is an integer vector, and meet-in-the-middle over the batch's
``2^b`` subsets finds the labels even with ``b`` far above the guest's feature count.

The guest below runs exactly that search on the gradient it really decrypted. With the
Host's private start the first residual carries each row's unknown continuous ``z_H``,
and no binary labels are consistent with the gradient; with the start pinned at zero
(the leaky arm) the search returns the batch's true labels.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import (
    decoded_traffic,
    failures,
    memory_job,
    party_data,
    run_in_threads,
    zero_start,
)

from privfl.config.vertical import JobConfig, ModelConfig
from privfl.crypto.encoding import DATA_BITS, VALUE_BITS, to_exponents
from privfl.learning import separable
from privfl.learning import start as starts
from privfl.learning.taylor import sigmoid
from privfl.parties.vertical import guest as guest_party
from privfl.parties.vertical.host_steps import unflatten
from privfl.protocol.memory import InMemoryHub
from privfl.protocol.messages import Batch

BATCH = 24  # above both parties' gradient entries, small enough to search 2^24 subsets
SCALE = float(1 << DATA_BITS)


def subset_sums(rows: np.ndarray) -> dict[tuple[int, ...], list[int]]:
    """Every subset of ``rows`` (integer vectors) by its sum: sum → bit masks."""
    sums: dict[tuple[int, ...], list[int]] = {}
    for mask in range(1 << len(rows)):
        picked = [(mask >> i) & 1 for i in range(len(rows))]
        key = tuple(int(v) for v in np.asarray(picked, dtype=np.int64) @ rows)
        sums.setdefault(key, []).append(mask)
    return sums


def meet_in_the_middle(x: np.ndarray, target: np.ndarray) -> list[np.ndarray]:
    """Every binary ``y`` with ``xᵀy = target`` (integer rows ``x``, target rounded)."""
    half = len(x) // 2
    left, right = subset_sums(x[:half]), subset_sums(x[half:])
    goal = np.rint(target).astype(np.int64)
    found = []
    for key, masks in right.items():
        for low in left.get(tuple(int(v) for v in goal - np.asarray(key)), []):
            for high in masks:
                bits = [(low >> i) & 1 for i in range(half)]
                bits += [(high >> i) & 1 for i in range(len(x) - half)]
                found.append(np.asarray(bits, dtype=np.int64))
    return found


def first_gradient(job: JobConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Run the job; the guest's decrypted first gradient ``(features, k)`` and that batch's rows."""
    seen: list[np.ndarray] = []

    def recording(values: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        out = unflatten(values, shape)  # the guest's own decoding, recorded
        seen.append(out.copy())
        return out

    monkeypatch.setattr(guest_party, "unflatten", recording)
    hub = InMemoryHub()
    results = run_in_threads(job, hub, tmp_path)
    assert not failures(results), failures(results)
    batches = [
        b for _, to, _, b in decoded_traffic(hub) if to == "guest-1" and isinstance(b, Batch)
    ]
    assert (batches[0].epoch, batches[0].batch) == (0, 0) and batches[0].indices is not None
    return seen[0], batches[0].indices


def residual_at_zero() -> float:
    """The separable residual's constant when every score is 0, ``c₀ = σ(0)`` through the
    fit, exactly as the Host's fixed point makes it (public code, no secret): the
    coefficients at 2^16 times the basis at 2^16, plus the clear constant at 2^32."""
    c = separable.coefficients(np.zeros(1), sigmoid)[0]
    basis = separable.guest_basis(np.zeros(1))[0]
    products = sum(round(w * SCALE) * round(v * SCALE) for w, v in zip(c[1:], basis, strict=True))
    return (products + round(c[0] * 2.0**VALUE_BITS)) / 2.0**VALUE_BITS


def attack(job: JobConfig, gradient: np.ndarray, rows: np.ndarray) -> list[list[np.ndarray]]:
    """The guest's search, class by class: every binary labelling consistent with ``G``."""
    x = to_exponents(party_data(job)["guest-1"].x_train[rows], DATA_BITS)
    if job.model.sigmoid == "separable":  # r = c₀ − y at zero scores (scale 1)
        target = residual_at_zero() * x.sum(axis=0)[:, None] - gradient * SCALE
    else:  # 4d = 2 − 4y at zero scores
        target = (2.0 * x.sum(axis=0)[:, None] - gradient * SCALE) / 4.0  # Σ_{y=1} x
    return [meet_in_the_middle(x, target[:, c]) for c in range(gradient.shape[1])]


KINDS = {
    "logistic": ModelConfig(),
    "multiclass-taylor": ModelConfig(kind="multiclass", classes=3, sigmoid="taylor"),
    # The default with one guest: the separable sigmoid (the job parser resolves "auto").
    "multiclass-separable": ModelConfig(kind="multiclass", classes=3, sigmoid="separable"),
}
DATASET = {"logistic": "breast_cancer", "multiclass-taylor": "wine", "multiclass-separable": "wine"}


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("leaky", [False, True], ids=["private-start", "zero-start"])
def test_the_first_gradient_is_no_subset_sum_over_the_labels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, leaky: bool
) -> None:
    # Prepare: no label noise (a leak shows the true labels); one epoch in batches of 24.
    job = memory_job(1, epochs=1, batch_size=BATCH, dataset=DATASET[kind], model=KINDS[kind])
    if leaky:  # the Host as it was: every weight at zero
        monkeypatch.setattr(starts, "host_start", zero_start)
    y = party_data(job)[job.host].y_train
    assert y is not None

    # Act: the guest's own decrypted gradient of epoch 0 batch 0, then its search.
    gradient, rows = first_gradient(job, tmp_path, monkeypatch)
    found = attack(job, gradient, rows)

    # Assert: from zero, exactly the true labels (each class's members); from the private
    # start, no binary labelling at all is consistent with what the guest decrypted.
    k = gradient.shape[1]
    truth = y[rows][:, None] if k == 1 else np.eye(k, dtype=np.int64)[y[rows]]
    if leaky:
        for c, solutions in enumerate(found):
            assert len(solutions) == 1 and np.array_equal(solutions[0], truth[:, c])
    else:
        assert found == [[]] * k
