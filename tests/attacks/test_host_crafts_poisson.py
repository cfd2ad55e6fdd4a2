"""Attack: the column-crafting Host of ``test_host_crafts_columns.py`` against Poisson.

Poisson's residual is not additive: ``r_i = exp(z_G,i)·exp(z_H,i + offset_i) − y'_i``
(``learning/kinds/poisson.py``), so the guests' score noise (``training.score_noise``)
has to survive the exponential. The Host puts indicator columns beside its bias, gets
``r_i`` of one row per column from its decrypted gradient and, knowing its own score, the
row's exposure and the label, inverts the link: ``z_G,i = log((r_i + y'_i) / exp(z_H,i +
offset_i))``. Leaky arm: σ = 0 (the default), every crafted row's score read exactly.
Defended arm: σ = 1, each read off by the guest's noise (the guest noises ``z`` before
it takes ``exp``), whatever the Host's columns.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import failures, memory_job, party_data, run_in_threads
from test_host_crafts_columns import CraftingHost

from privfl.config.vertical import ModelConfig
from privfl.learning.pinning import PIN, null_weights
from privfl.protocol.memory import InMemoryHub

POISSON = ModelConfig(kind="poisson", exposure="exposure")
# The reads do not depend on the step; at the default 0.3 the guest's noised exp(z) (σ = 1)
# sometimes steps its weights past float range within the epoch (1 run in 6 at load 5).
LR = 0.05


def poisson_reads(
    host: CraftingHost, x_all: np.ndarray, y: np.ndarray, offset: np.ndarray
) -> np.ndarray:
    """The Host's estimate − the guest's true score, every pinned row of every batch."""
    errors = []
    for c, rows, g, truth in zip(host.columns, host.rows, host.gradients, host.truths, strict=True):
        r = np.linalg.lstsq(c.T, g[:, 0], rcond=None)[0]  # Cᵀ r = G
        pinned = null_weights(c) < PIN
        multiplier = np.exp(x_all[rows] @ host.theta[:, 0] + offset[rows])
        with np.errstate(invalid="ignore", divide="ignore"):
            estimate = np.log((r + y[rows]) / multiplier)
        errors.append((estimate - truth)[pinned])
    return np.concatenate(errors)


@pytest.mark.parametrize("sigma", [0.0, 1.0])
def test_a_poisson_host_with_crafted_columns_reads_scores_unless_the_guest_adds_noise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sigma: float
) -> None:
    # Prepare: the counts table (Host 2 columns, guest 4), batches of 60, one epoch;
    # no label bounds, so no label DP (Poisson's default): y' = y.
    job = memory_job(
        1,
        epochs=1,
        dataset="counts",
        model=POISSON,
        batch_size=60,
        score_noise=sigma,
        learning_rate=LR,
    )
    host = CraftingHost()
    host.deviate(monkeypatch)

    # Act
    results = run_in_threads(job, InMemoryHub(), tmp_path)

    # Assert
    assert not failures(results), failures(results)
    data = party_data(job)[job.host]
    assert data.y_train is not None and data.offset_train is not None
    x_all = np.hstack([data.x_train, np.ones((len(data.x_train), 1))])
    errors = poisson_reads(host, x_all, data.y_train, data.offset_train)
    assert len(errors) == 2 * 25  # 2 indicator columns in each of 25 batches
    if sigma == 0.0:
        # Leaky arm: every pinned row's score exact (exp(z_G) travels at 2^-16).
        assert float(np.max(np.abs(errors))) < 1e-3
        return
    # Defended: each read is off by the guest's η ~ N(0, σ²). Over 50 reads the RMS is
    # σ·(1 ± 0.1): 50·(RMS/σ)² is χ²(50), below 12.5 or above 128 with P < 1e-8. A read
    # within 1e-3 has P = 0.0008, 0.04 expected in 50: four or more, P < 1e-6.
    rms = float(np.sqrt(np.mean(errors**2)))
    assert 0.5 * sigma < rms < 1.6 * sigma
    assert int(np.sum(np.abs(errors) < 1e-3)) <= 3
