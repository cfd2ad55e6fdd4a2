"""One or two of 20 clients poison the model with the worst report the aggregator accepts.

Before: clients clipped their weights to ``±weight_bound`` (100) only, the aggregator
accepted anything inside that box and averaged by the mean; one client sending the
box's far end in every coordinate took accuracy from 0.75 to 0.12. Now every client
clips its update to ``‖w − w_g‖ ≤ B`` (B derived from the model: half the initial
model's norm), the aggregator refuses a report beyond it, and combines the rest by
a coordinate-wise trimmed mean. The worst accepted report is then the attacker's own
update reversed and stretched to the bound (all of B spent against the honest
direction); the test sends it from 1 and 2 clients and holds the final accuracy
within 0.02 of the clean run. The leaky arm puts the old bound and the plain mean
back and shows the collapse.

Mechanism ``none`` and seeded batch orders: every run here is deterministic (no
CSPRNG noise is drawn), so the margins are exact, not probabilistic.
"""

from __future__ import annotations

import logging

import pytest
from hfl_deviants import reversed_report

from privfl.config.horizontal import HflConfig
from privfl.learning import fedavg as engine
from privfl.runs.simulate import run_experiment

# One worker makes the clean run for every test here (--dist loadgroup, tests/conftest.py).
pytestmark = pytest.mark.xdist_group("hfl_inrange_poisoning")

CLEAN = HflConfig(clients=20, rounds=3, local_epochs=2, seed=3)
OLD = HflConfig(clients=20, rounds=3, local_epochs=2, seed=3, update_clip=float("inf"),
                aggregation="mean")  # fmt: skip
TOLERANCE = 0.02  # the bar: within 0.02 of the clean run


def _poison(monkeypatch: pytest.MonkeyPatch, attackers: int, shape: str) -> None:
    """Clients ``0..attackers−1`` send the worst report of ``shape``; the others are honest.

    ``reversed``: ``w_g − B·Δ/‖Δ‖`` (just inside the bound); ``box``: ``weight_bound``
    in every coordinate (the far end of the old range).
    """
    report = reversed_report(attackers, box=shape == "box")
    monkeypatch.setattr(engine, "randomize_weights", report)


@pytest.fixture(scope="module")
def clean_accuracy() -> float:
    accuracy: float = run_experiment(CLEAN)["accuracy"]
    assert accuracy > 0.85  # the clean run learns
    return accuracy


@pytest.mark.parametrize("attackers", [1, 2])
def test_the_worst_in_bound_report_leaves_the_accuracy_within_two_points(
    monkeypatch: pytest.MonkeyPatch, clean_accuracy: float, attackers: int
) -> None:
    _poison(monkeypatch, attackers, "reversed")
    summary = run_experiment(CLEAN)
    assert summary["refused_history"] == [0, 0, 0]  # in bound: accepted, and still harmless
    assert abs(summary["accuracy"] - clean_accuracy) <= TOLERANCE


def test_the_far_end_of_the_old_range_is_refused_and_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, clean_accuracy: float
) -> None:
    _poison(monkeypatch, 2, "box")
    with caplog.at_level(logging.WARNING):
        summary = run_experiment(CLEAN)
    assert summary["refused_history"] == [2, 2, 2]
    assert "refused 2 report(s) outside the mechanism's output range or the update bound" in (
        caplog.text
    )
    assert abs(summary["accuracy"] - clean_accuracy) <= TOLERANCE


def test_the_update_bound_fits_the_model() -> None:
    setup = engine.make_setup(CLEAN)
    initial = float(engine.get_flat(setup.model).norm())
    assert setup.calib.update_clip == pytest.approx(initial / 2)
    # the old box allowed an update 100·√d from the origin: thousands of times wider
    assert CLEAN.weight_bound * setup.dims**0.5 > 1000 * setup.calib.update_clip


@pytest.mark.parametrize("attackers", [1, 2])
def test_leaky_the_old_bound_and_the_plain_mean_collapse(
    monkeypatch: pytest.MonkeyPatch, clean_accuracy: float, attackers: int
) -> None:
    _poison(monkeypatch, attackers, "box")
    summary = run_experiment(OLD)
    assert summary["refused_history"] == [0, 0, 0]  # inside the old range: accepted
    assert summary["accuracy"] <= 0.2 < clean_accuracy - 0.6
