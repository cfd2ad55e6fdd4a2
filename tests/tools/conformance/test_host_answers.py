"""The host script's first-batch answers for a Poisson and a separable Host
(tools/conformance/host_answers.py), on residuals made here: a correct Host passes, and
a Host that starts from zero or reports another loss is failed by the named check.

No processes: the full runs are test_kinds_conformance.py's (our Poisson Host with
ε = inf, our separable Host); these feed each check the broken residual it must catch.
"""

from __future__ import annotations

import numpy as np
import pytest

from privfl.data.views import PartyData
from privfl.learning.kinds.multiclass import MulticlassSeparable
from privfl.learning.separable import residual
from privfl.tools.conformance.host_answers import ROUNDING, first_residual, poisson_first
from privfl.tools.conformance.peer import Report

RATE = "first residual + y is a positive rate"
LINEAR = "first residual's z_H = log μ − offset is linear in the host's columns and not 0"
LOSS = "first batch's Poisson loss is mean(μ − y·log μ)"
PRIVATE = "first residual is not σ̂(0) − ỹ (two values per class): the host starts private"


def poisson_host(rows: int = 60) -> PartyData:
    """The Host's demo-like rows: 3 standardised columns, exposures, counts."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=(rows, 3))
    exposure = rng.uniform(0.5, 3.0, size=rows)
    y = rng.poisson(exposure).astype(np.float64)
    return PartyData(("a", "b", "c"), x, x[:0], np.zeros(3), np.ones(3), y, y[:0],
                     offset_train=np.log(exposure))  # fmt: skip


def poisson_residual(host: PartyData, theta: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """What a Host sends with the played guest's exp(z_g) = 1: rint(μ·2^16)/2^16 − y."""
    assert host.y_train is not None and host.offset_train is not None
    x = np.hstack([host.x_train[idx], np.ones((len(idx), 1))])
    mu = np.exp(x @ theta + host.offset_train[idx])
    return np.rint(mu / ROUNDING) * ROUNDING - host.y_train[idx]


def checks(report: Report) -> dict[str, bool]:
    return {name: ok for name, ok, _ in report.checks}


def named(report: Report, prefix: str) -> bool:
    (ok,) = [ok for name, ok in checks(report).items() if name.startswith(prefix)]
    return ok


@pytest.mark.parametrize("batch", [None, np.arange(5, 45)])
def test_a_private_poisson_host_passes(batch: np.ndarray | None) -> None:
    # Prepare: a private start and the loss it gives (mini-batch rows, or every row)
    host = poisson_host()
    idx = np.arange(60) if batch is None else batch
    theta = np.array([0.3, -0.2, 0.1, -0.25])
    first = poisson_residual(host, theta, idx)
    assert host.y_train is not None and host.offset_train is not None
    eta = np.hstack([host.x_train[idx], np.ones((len(idx), 1))]) @ theta + host.offset_train[idx]
    loss = float(np.mean(np.exp(eta) - host.y_train[idx] * eta))

    # Act
    report = Report()
    poisson_first(report, host, batch, first, loss)

    # Assert
    assert report.passed and len(report.checks) == 3, report.checks


def test_a_poisson_host_from_zero_or_with_another_loss_is_caught() -> None:
    # Prepare: θ_H = 0 (the guests could solve the first gradient); a loss without y·η
    host = poisson_host()
    idx = np.arange(60)
    from_zero = poisson_residual(host, np.zeros(4), idx)
    private = poisson_residual(host, np.array([0.3, -0.2, 0.1, -0.25]), idx)

    # Act
    zero, wrong_loss, negative = Report(), Report(), Report()
    poisson_first(zero, host, None, from_zero, 1.0)
    poisson_first(wrong_loss, host, None, private, float(np.mean(private + host.y_train)))
    poisson_first(negative, host, None, -host.y_train - 0.5, 1.0)  # type: ignore[operator]

    # Assert: each by its own check
    assert named(zero, RATE) and not named(zero, LINEAR)
    assert named(wrong_loss, LINEAR) and not named(wrong_loss, LOSS)
    assert not named(negative, RATE) and len(negative.checks) == 1


def test_a_separable_host_from_zero_is_caught() -> None:
    # Prepare: 3 classes, one-hot labels; z_H = 0 against a private start's scores
    rng = np.random.default_rng(2)
    y = np.eye(3)[rng.integers(0, 3, size=40)]
    zero = residual(np.zeros((40, 3)), np.zeros((40, 3)), y)
    private = residual(rng.normal(scale=0.5, size=(40, 3)), np.zeros((40, 3)), y)
    glm = MulticlassSeparable(outputs=3)

    # Act
    reports = {"zero": Report(), "private": Report()}
    first_residual(reports["zero"], glm, zero.ravel())
    first_residual(reports["private"], glm, private.ravel())

    # Assert
    assert not named(reports["zero"], PRIVATE)
    assert named(reports["private"], PRIVATE)
