"""Attack: an honest-but-curious guest reads the linear, Poisson and multiclass residuals.

``test_residual_rerandomised.py`` runs this attack on the logistic residual and the
separable multiclass one; the other GLM kinds build theirs differently
(``learning/kinds``), so each gets the attack as a guest would run it on its own kind:

* **linear** and **multiclass Taylor** add the Host's plaintext part to the guests'
  summed scores, ``[[r]] = [[Σ z_g]] · (1 + n·(z_H − y'))`` (per class for multiclass):
  dividing out its own ``forward`` leaves ``1 + n·offset`` unless the Host re-randomises.
* **Poisson** multiplies the guest's ``[[exp z_G]]`` by the Host's plaintext
  ``a = ⌊exp(z_H + log exposure)·2^16⌉`` and subtracts ``y'``: ``R = c^a · (1 + n)^(−y')``.
  Modulo ``n`` the plaintext part vanishes, ``R ≡ (c mod n)^a``: a guest that kept its
  own ``c`` finds ``a`` (a few million at most) by baby-step giant-step, then reads
  ``y'`` from ``R / c^a = 1 − n·y'`` — the Host's multiplier (its private score and the
  row's exposure) and the count, per row, whatever the guest's own scores.

The observer only divides what it sent by what it received. With the Host's
re-randomisation (the shipped code) it reads nothing; with it switched off (the leaky
arm) it reads every row it tries.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from helpers import failures, host_start, memory_job, party_data, run_in_threads
from test_residual_rerandomised import leaky_rerandomize, observe

from privfl.config.vertical import JobConfig, ModelConfig
from privfl.crypto.encoding import DATA_BITS, VALUE_BITS, decode
from privfl.learning.glm import glm_of
from privfl.protocol import fresh
from privfl.protocol.memory import InMemoryHub

POISSON = ModelConfig(kind="poisson", exposure="exposure")
ADDITIVE = {
    "linear": ("diabetes", ModelConfig(kind="linear")),
    "multiclass": ("wine", ModelConfig(kind="multiclass", classes=3, sigmoid="taylor")),
}
TRIED = 48  # Poisson rows the guest attacks (each is a baby-step giant-step search)
BOUND = 1 << 22  # the multipliers it searches: exp(z_H + offset) < 64


def run(job: JobConfig, out: Path, leaky: bool, monkeypatch: pytest.MonkeyPatch) -> InMemoryHub:
    if leaky:
        monkeypatch.setattr(fresh, "rerandomize", leaky_rerandomize)
    hub = InMemoryHub()
    results = run_in_threads(job, hub, out)
    assert not failures(results), failures(results)
    return hub


@pytest.mark.parametrize("kind", sorted(ADDITIVE))
@pytest.mark.parametrize("leaky", [False, True])
def test_an_additive_residual_hides_the_labels_unless_the_host_rerandomises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, leaky: bool
) -> None:
    # Prepare: no label noise (ε = ∞, linear's default), one epoch, one full batch.
    dataset, model = ADDITIVE[kind]
    job = memory_job(1, epochs=1, dataset=dataset, model=model)
    host = party_data(job)[job.host]
    assert host.y_train is not None

    # Act
    guest = observe(job, run(job, tmp_path, leaky, monkeypatch))[job.guests[0]]
    tried, read = guest.read()

    # Assert
    k = model.classes or 1
    assert tried == len(host.y_train) * k
    if not leaky:
        assert read == [], f"{guest.name} read {sum(len(v) for *_, v in read)} values"
        return
    # Leaky arm: at epoch 0 (the guest at 0) every offset is z_H − y' exactly: the labels
    # behind the Host's private start (its scores are the Host's, a guest does not know
    # them, but a threshold or a regression on its own columns separates them).
    ((epoch, batch, offset),) = read
    z_host = np.hstack([host.x_train, np.ones((len(host.y_train), 1))]) @ host_start(tmp_path)
    target = glm_of(job).targets(host.y_train)
    scale = 4.0 if kind == "multiclass" else 1.0
    plain = z_host - scale * target + (2.0 if kind == "multiclass" else 0.0)
    assert (epoch, batch) == (0, 0)
    np.testing.assert_allclose(offset.reshape(plain.shape), plain, atol=1e-3)


def discrete_log(base: int, target: int, n: int, bound: int) -> int | None:
    """The ``a < bound`` with ``base^a ≡ target (mod n)``, by baby-step giant-step."""
    m = math.isqrt(bound) + 1
    table, power = {}, 1
    for j in range(m):
        table.setdefault(power, j)
        power = power * base % n
    step, gamma = pow(pow(base, m, n), -1, n), target % n
    for i in range(m):
        if gamma in table:
            return i * m + table[gamma]
        gamma = gamma * step % n
    return None


def poisson_read(
    n: int, sent: tuple[int, ...], residual: tuple[int, ...], rows: int
) -> list[tuple[float, float]]:
    """What the guest reads of each of ``rows`` rows: ``(multiplier, y')`` or nothing."""
    n2 = n * n
    out = []
    for c, r in zip(sent[:rows], residual[:rows], strict=True):
        a = discrete_log(c % n, r % n, n, BOUND)
        if a is None:
            continue
        q = r * pow(pow(c, a, n2), -1, n2) % n2
        if (q - 1) % n:
            continue
        # R / c^a = (1 + n)^(−y'): the count itself, at VALUE_BITS.
        out.append((a / 2**DATA_BITS, -float(decode([(q - 1) // n], VALUE_BITS, n)[0])))
    return out


@pytest.mark.parametrize("leaky", [False, True])
def test_a_poisson_residual_hides_multiplier_and_count_unless_the_host_rerandomises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, leaky: bool
) -> None:
    # Prepare: Poisson on the counts table, ε = ∞ (no label bounds: the default), one guest.
    job = memory_job(1, epochs=1, dataset="counts", model=POISSON)
    host = party_data(job)[job.host]
    assert host.y_train is not None and host.offset_train is not None

    # Act: the guest divides the first residual by its own first forward, row by row.
    guest = observe(job, run(job, tmp_path, leaky, monkeypatch))[job.guests[0]]
    first = guest.residuals[0]
    assert (first.epoch, first.batch) == (0, 0)
    reads = poisson_read(guest.n, guest.forwards[(0, 0)], first.residual.values, TRIED)

    # Assert
    if not leaky:
        # A fresh r^n makes R mod n uniform over Z_n*: a hit below 2^22 by chance has
        # probability 2^22/2^511 per row.
        assert reads == []
        return
    z_host = np.hstack([host.x_train, np.ones((len(host.y_train), 1))]) @ host_start(tmp_path)
    multiplier = np.exp(z_host[:TRIED, 0] + host.offset_train[:TRIED])
    assert len(reads) == TRIED
    got = np.array(reads)
    np.testing.assert_allclose(got[:, 0], multiplier, atol=2**-16)
    np.testing.assert_array_equal(np.rint(got[:, 1]), host.y_train[:TRIED])
