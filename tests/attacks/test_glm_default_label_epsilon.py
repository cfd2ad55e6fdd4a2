"""Attack: a deviating guest reads the residuals of every training row; at the default
label ε they carry labels that randomized response really flipped.

The guest of ``test_packed_requests.py`` spends its gradient requests on its residual
ciphertexts packed 40 bits apart, and at the least batch reads ``z_H + 2 − 4ỹ`` of every
training row in one epoch (its own weights at 0). What protects the labels then is label
DP alone: ``ỹ`` is randomized response, keeping each label with probability
``e^ε/(1 + e^ε)``. Under the old default (ε = 8: 0.03 % flipped) that read is the
training labels as they are; under logistic's default now (docs/results.md, "The GLMs'
default label ε") about one in six is wrong, and the guest cannot tell which.

Even granted the Host's private start (which it does not hold), so that it decodes
``ỹ`` exactly, the count it gets right is Binomial(426, e^ε/(1 + e^ε)); the test bounds
it 5.5 sd above that mean (a false failure below 1e-7), and the leaky arm, the old
default, reads at least 420 of 426 right (six flips at rate 3.4e-4: below 1e-7).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from helpers import failures, host_start, memory_job, party_data, run_in_threads
from test_packed_requests import DensePackingGuest

from privfl.config.vertical import JobConfig, kind_default
from privfl.mechanisms.label_dp import keep_probability
from privfl.parties.vertical import host_steps
from privfl.parties.vertical.batches import job_least_batch
from privfl.protocol.memory import InMemoryHub

OLD_DEFAULT = 8.0


def default_epsilon() -> float:
    """What a logistic job that names no ε gets (config/vertical.py LabelDPConfig)."""
    return float(kind_default("logistic", "label_dp.epsilon"))


def upper_bound(epsilon: float, rows: int, sds: float = 5.5) -> float:
    """Most labels right a decoder of randomized response gets, ``sds`` above the mean."""
    keep = keep_probability(epsilon)
    return rows * keep + sds * math.sqrt(rows * keep * (1 - keep))


def read_every_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, job: JobConfig
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Run ``job`` with the dense-packing guest; its read, the rows, and ``z_H`` at start."""
    guest = DensePackingGuest()
    guest.deviate(monkeypatch)
    # The Host keeps its start so the test knows z_H (the guest reads whatever it sends).
    monkeypatch.setattr(host_steps, "apply_gradient", lambda *_: None)
    results = run_in_threads(job, InMemoryHub(), tmp_path)
    assert not failures(results), failures(results)
    host = party_data(job)[job.host]
    x_host = np.hstack([host.x_train, np.ones((len(host.x_train), 1))])
    read = np.concatenate(list(guest.read.values()))
    rows = np.concatenate([guest.rows[w] for w in guest.read])
    return read, rows, (x_host @ host_start(tmp_path))[:, 0]


@pytest.mark.parametrize("arm", ["default", "old default (leaky)"])
def test_at_the_default_epsilon_a_guest_that_reads_every_residual_misses_flipped_labels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, arm: str
) -> None:
    # Prepare: breast cancer, one guest, the least batch, one epoch; the job's ε is the
    # default a logistic job gets, or the old one.
    epsilon = default_epsilon() if arm == "default" else OLD_DEFAULT
    job = memory_job(1, epochs=1, epsilon=epsilon)
    y = party_data(job)[job.host].y_train
    assert y is not None
    job = memory_job(1, epochs=1, epsilon=epsilon, batch_size=job_least_batch(job, len(y)))

    # Act
    read, rows, z_host = read_every_row(tmp_path, monkeypatch, job)

    # Assert: every training row read once; the guest's own guess (read < 0: label 1)
    # and the exact decoding with the Host's start removed.
    assert sorted(rows) == list(range(len(y)))
    guessed = int(np.sum((read < 0) == y[rows]))
    decoded = np.rint((z_host[rows] + 2.0 - read) / 4.0)
    assert set(np.unique(decoded)) <= {0.0, 1.0}
    exact = int(np.sum(decoded == y[rows]))
    print(f"ε = {epsilon:g}: guessed {guessed}, decoded {exact} of {len(y)} labels right")
    bound = upper_bound(default_epsilon(), len(y))
    if arm == "default":
        assert exact < bound and guessed < bound, (exact, guessed, bound)
    else:
        assert exact >= len(y) - 6 > bound
